package reports

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A comparison of variants runs each mode entry several times with each
// variant, alternating. Each run gives one value per metric (its first
// sync, the median of its partial syncs, ...): runs are the independent
// units, syncs within a run are not. Every later variant is compared with
// the first, its base.

// VariantAlpha is the family-wise error rate of a comparison's verdicts
// (Holm's correction over every metric, entry and variant of the run).
const VariantAlpha = 0.05

// VariantMethod says how a comparison's figures are obtained.
const VariantMethod = "each variant ran each mode entry the same number of times, alternating (A B A B ...) so that drift " +
	"of the machine falls on both; one value per run and metric (partial syncs: the median of the run's). " + ShiftMethod +
	" Verdicts (first sync, partial sync, kube-proxy cpu and rss) are Holm-corrected over those rows of the table at a " +
	"family-wise 0.05; the rows splitting a sync into parts are descriptive, with their uncorrected p. " +
	"Rule and object counts are compared exactly."

// variantMetric is one per-run value.
type variantMetric struct {
	name string
	// value of one run; ok false when the run has none.
	value func(m *ModeResult) (float64, bool)
	// show renders a value.
	show func(float64) string
	// tested metrics get a verdict; the parts of a sync are descriptive:
	// with 5 runs a side the smallest p is 0.008, and Holm's correction
	// over a dozen rows would leave no verdict possible.
	tested bool
}

// variantMetrics are the compared metrics: the sync figures, kube-proxy's
// own CPU and memory, and the first sync's and partial syncs' parts.
func variantMetrics(runs []*ModeResult) []variantMetric {
	median := func(xs []float64) (float64, bool) {
		if len(xs) == 0 {
			return 0, false
		}
		return Summarize(xs).P50, true
	}
	f := false
	ms := []variantMetric{
		{"first sync", func(m *ModeResult) (float64, bool) {
			if s := m.ColdFirstSync(); s != nil {
				return s.Seconds, true
			}
			return 0, false
		}, seconds, true},
		{"partial sync (median of each run)", func(m *ModeResult) (float64, bool) { return median(m.SyncSeconds(&f)) }, seconds, true},
		{"kube-proxy cpu", func(m *ModeResult) (float64, bool) {
			c := m.Resources.KubeProxyCPUSeconds()
			return c, c > 0
		}, func(v float64) string { return fmt.Sprintf("%.2fs", v) }, true},
		{"kube-proxy peak rss", func(m *ModeResult) (float64, bool) {
			b := float64(m.Resources.MaxRSSBytes)
			return b, b > 0
		}, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }, true},
	}
	// The parts of the first sync and of the partial syncs that any run
	// timed.
	first, partial := map[string]float64{}, map[string]float64{}
	for _, m := range runs {
		for _, sp := range SyncSplits(m) {
			switch sp.Class {
			case "first sync":
				maps.Copy(first, sp.Parts)
			case "partial syncs":
				maps.Copy(partial, sp.Parts)
			}
		}
	}
	part := func(class, p string) func(m *ModeResult) (float64, bool) {
		return func(m *ModeResult) (float64, bool) {
			for _, sp := range SyncSplits(m) {
				if sp.Class == class {
					v, ok := sp.Parts[p]
					return v, ok && v > 0
				}
			}
			return 0, false
		}
	}
	for _, p := range SortedParts(first) {
		ms = append(ms, variantMetric{"first sync: " + p, part("first sync", p), seconds, false})
	}
	for _, p := range SortedParts(partial) {
		ms = append(ms, variantMetric{"partial sync, mean: " + p, part("partial syncs", p), seconds, false})
	}
	return ms
}

// VariantRow compares one metric of one mode entry between a variant and
// the base.
type VariantRow struct {
	Entry, Metric string
	Base, Variant string
	// BaseValues and Values are the per-run values.
	BaseValues, Values []float64
	// Shift is nil when either side has no value.
	Shift *RatioShift
	// Tested rows get a verdict: AdjustedP is Shift.P after Holm's
	// correction over the tested rows of the table. The others describe.
	Tested    bool
	AdjustedP float64
	show      func(float64) string
}

// Significant says the row's difference holds at VariantAlpha.
func (r VariantRow) Significant() bool {
	return r.Tested && r.Shift != nil && r.AdjustedP <= VariantAlpha
}

// CompareVariants compares every variant of r with the first, per mode
// entry and metric, in entry order. Nil for a run without variants.
func CompareVariants(r *Result) []VariantRow {
	if len(r.Variants) < 2 {
		return nil
	}
	base := r.Variants[0].Name
	byEntry := map[string]map[string][]*ModeResult{}
	var entries []string
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Variant == nil || m.Skipped != "" || m.Error != "" {
			continue
		}
		e := m.Variant.Entry
		if byEntry[e] == nil {
			byEntry[e] = map[string][]*ModeResult{}
			entries = append(entries, e)
		}
		byEntry[e][m.Variant.Variant] = append(byEntry[e][m.Variant.Variant], m)
	}
	var rows []VariantRow
	for _, e := range entries {
		var all []*ModeResult
		for _, runs := range byEntry[e] {
			all = append(all, runs...)
		}
		for _, v := range r.Variants[1:] {
			for _, mt := range variantMetrics(all) {
				row := VariantRow{Entry: e, Metric: mt.name, Base: base, Variant: v.Name, show: mt.show, Tested: mt.tested}
				for _, m := range byEntry[e][base] {
					if x, ok := mt.value(m); ok {
						row.BaseValues = append(row.BaseValues, x)
					}
				}
				for _, m := range byEntry[e][v.Name] {
					if x, ok := mt.value(m); ok {
						row.Values = append(row.Values, x)
					}
				}
				if len(row.BaseValues) == 0 && len(row.Values) == 0 {
					continue
				}
				if sh, err := EstimateRatio(row.BaseValues, row.Values); err == nil {
					row.Shift = &sh
				}
				rows = append(rows, row)
			}
		}
	}
	var ps []float64
	var at []int
	for i, row := range rows {
		if row.Tested && row.Shift != nil {
			ps, at = append(ps, row.Shift.P), append(at, i)
		}
	}
	for j, adj := range Holm(ps) {
		rows[at[j]].AdjustedP = adj
	}
	return rows
}

// variantTables: the comparison, then the exact count differences.
func variantTables(r *Result) []reportTable {
	rows := CompareVariants(r)
	if rows == nil {
		return nil
	}
	t := reportTable{
		Title:  "Variants: each against " + r.Variants[0].Name,
		Lead:   variantLead(r),
		Header: []string{"mode", "metric", "base: median (runs)", "variant: median (runs)", "variant/base [95% CI]", "p (Holm)", "verdict"},
	}
	for _, row := range rows {
		cell := func(xs []float64) string {
			if len(xs) == 0 {
				return "-"
			}
			return fmt.Sprintf("%s (%d)", row.show(Summarize(xs).P50), len(xs))
		}
		ratio, p, verdict := "-", "-", "not compared: a side has no value"
		if sh := row.Shift; sh != nil {
			ratio = fmt.Sprintf("%s [%s, %s]", signedPercent(sh.Ratio), signedPercent(sh.Low), signedPercent(sh.High))
			p = fmt.Sprintf("%.3g (%.3g)", sh.P, row.AdjustedP)
			verdict = "no significant difference"
			switch {
			case !row.Tested:
				p, verdict = fmt.Sprintf("%.3g", sh.P), "descriptive"
			case row.Significant():
				verdict = "DIFFERENT"
			}
		}
		t.Rows = append(t.Rows, []string{row.Entry + " " + row.Variant, row.Metric, cell(row.BaseValues), cell(row.Values), ratio, p, verdict})
	}
	t.Notes = append(t.Notes, "variant/base: the ratio as a change, +10% = the variant's values 1.1 times the base's. "+VariantMethod)
	return []reportTable{t, variantCountTable(r)}
}

// variantLead names the binaries and what they were built from.
func variantLead(r *Result) string {
	var vs []string
	for _, v := range r.Variants {
		vs = append(vs, fmt.Sprintf("%s = %s (%s)", v.Name, v.Binary, v.Version))
	}
	return strings.Join(vs, "; ")
}

// signedPercent writes a ratio as a change: 1.123 as +12.3%.
func signedPercent(ratio float64) string { return fmt.Sprintf("%+.1f%%", 100*(ratio-1)) }

// variantCountTable: rule and object counts after the first sync, per
// entry and variant, exactly (a range when runs differ).
func variantCountTable(r *Result) reportTable {
	t := reportTable{Title: "Variants: rule and object counts after the first sync", Header: []string{"mode", "count"}}
	for _, v := range r.Variants {
		t.Header = append(t.Header, v.Name)
	}
	t.Header = append(t.Header, "differs")
	type key struct{ entry, variant string }
	counts := map[key][]map[string]int{}
	var entries []string
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Variant == nil || len(m.RulesAfterFirstSync) == 0 {
			continue
		}
		k := key{m.Variant.Entry, m.Variant.Variant}
		if !slices.Contains(entries, k.entry) {
			entries = append(entries, k.entry)
		}
		counts[k] = append(counts[k], m.RulesAfterFirstSync)
	}
	for _, e := range entries {
		var all []map[string]int
		for _, v := range r.Variants {
			all = append(all, counts[key{e, v.Name}]...)
		}
		for _, c := range countKeys(all...) {
			row := []string{e, c}
			var cells []string
			for _, v := range r.Variants {
				var xs []int
				for _, m := range counts[key{e, v.Name}] {
					if x, ok := m[c]; ok {
						xs = append(xs, x)
					}
				}
				cell := "-"
				if len(xs) > 0 {
					cell = fmt.Sprint(slices.Min(xs))
					if hi := slices.Max(xs); hi != slices.Min(xs) {
						cell += fmt.Sprintf("-%d", hi)
					}
				}
				cells = append(cells, cell)
			}
			differs := ""
			for _, cell := range cells[1:] {
				if cell != cells[0] {
					differs = "yes"
				}
			}
			t.Rows = append(t.Rows, append(append(row, cells...), differs))
		}
	}
	return t
}
