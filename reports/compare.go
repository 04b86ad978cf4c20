package reports

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// DefaultAlpha is the significance level below which a difference is
// reported, as in benchstat.
const DefaultAlpha = 0.05

// CompareOptions say how to pair two runs' modes.
type CompareOptions struct {
	// Pairs maps a mode entry name of run A to one of run B, for entries
	// named differently that should be compared (iptables-legacy in A,
	// iptables-nft in B). Entries not named here pair by equal name.
	Pairs map[string]string
	// Alpha is the significance level; 0 means DefaultAlpha.
	Alpha float64
}

// RunInfo identifies one side of a comparison.
type RunInfo struct {
	RunID       string       `json:"runID"`
	Scenario    ScenarioInfo `json:"scenario"`
	Environment Environment  `json:"environment"`
}

// Comparison is run B measured against run A.
type Comparison struct {
	A, B  RunInfo
	Alpha float64
	// Machine lists the environment differences that make timings
	// incomparable (kernel, kernel kind, CPUs); Other lists the rest
	// (kube-proxy or Go version, scenario), which are often the point of
	// the comparison.
	Machine, Other []string
	Modes          []ModeComparison
	// OnlyA and OnlyB are mode entries that found no partner.
	OnlyA, OnlyB []string
}

// SameMachine reports whether both runs' timings were taken on what looks
// like the same machine. The result schema has no host identity, so two
// machines with the same kernel build and CPU count look the same.
func (c *Comparison) SameMachine() bool { return len(c.Machine) == 0 }

// ModeComparison compares one pair of mode entries.
type ModeComparison struct {
	A, B string
	// Note says why the pair is unusual (different proxy modes, a mode
	// that failed or was skipped).
	Note    string
	Metrics []MetricComparison
}

// MetricComparison is one figure of both runs.
type MetricComparison struct {
	Name string
	// Unit is "s" for durations and "" for counts.
	Unit string
	// A and B are the medians of samples, or the single values.
	A, B   float64
	NA, NB int
	// Delta is (B - A) / A; NaN when only A is 0.
	Delta float64
	// Tested is true when both sides are samples and a Mann-Whitney U
	// test ran; P is then its two-sided p-value.
	Tested bool
	P      float64
	// Significant is Tested and P < alpha.
	Significant bool
}

// Compare measures run b against run a, mode by mode: sync durations (all
// and partial only, with a Mann-Whitney U test on the samples), end-to-end
// network programming latency (tested the same way), the first sync and
// the rule counts. It returns an error when a pair names a mode entry
// that one of the runs lacks.
func Compare(a, b *Result, opts CompareOptions) (*Comparison, error) {
	alpha := opts.Alpha
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if alpha <= 0 || alpha >= 1 {
		return nil, fmt.Errorf("significance level %v is not between 0 and 1", alpha)
	}
	c := &Comparison{
		A:     RunInfo{a.RunID, a.Scenario, a.Environment},
		B:     RunInfo{b.RunID, b.Scenario, b.Environment},
		Alpha: alpha,
	}
	c.Machine, c.Other = environmentDiffs(a, b)

	byName := func(r *Result, name string) *ModeResult {
		for i := range r.Modes {
			if r.Modes[i].Name == name {
				return &r.Modes[i]
			}
		}
		return nil
	}
	pairs := map[string]string{}
	usedB := map[string]string{}
	aNames := make([]string, 0, len(opts.Pairs))
	for an := range opts.Pairs {
		aNames = append(aNames, an)
	}
	sort.Strings(aNames)
	for _, an := range aNames {
		bn := opts.Pairs[an]
		var missing []string
		if byName(a, an) == nil {
			missing = append(missing, fmt.Sprintf("run A (%s) has no mode %q (it has %s)", a.RunID, an, modeNames(a)))
		}
		if byName(b, bn) == nil {
			missing = append(missing, fmt.Sprintf("run B (%s) has no mode %q (it has %s)", b.RunID, bn, modeNames(b)))
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("pair %s=%s: %s", an, bn, strings.Join(missing, "; "))
		}
		if prev, dup := usedB[bn]; dup {
			return nil, fmt.Errorf("pairs %s=%s and %s=%s name the same mode of run B", prev, bn, an, bn)
		}
		pairs[an], usedB[bn] = bn, an
	}
	for i := range a.Modes {
		am := &a.Modes[i]
		if _, ok := pairs[am.Name]; ok {
			continue
		}
		if _, taken := usedB[am.Name]; !taken && byName(b, am.Name) != nil {
			pairs[am.Name], usedB[am.Name] = am.Name, am.Name
		}
	}
	for i := range a.Modes {
		am := &a.Modes[i]
		bn, ok := pairs[am.Name]
		if !ok {
			c.OnlyA = append(c.OnlyA, am.Name)
			continue
		}
		c.Modes = append(c.Modes, compareModes(am, byName(b, bn), alpha))
	}
	for i := range b.Modes {
		if _, ok := usedB[b.Modes[i].Name]; !ok {
			c.OnlyB = append(c.OnlyB, b.Modes[i].Name)
		}
	}
	return c, nil
}

func modeNames(r *Result) string {
	names := make([]string, len(r.Modes))
	for i, m := range r.Modes {
		names[i] = m.Name
	}
	return strings.Join(names, ", ")
}

func environmentDiffs(a, b *Result) (machine, other []string) {
	ea, eb := a.Environment, b.Environment
	diff := func(list *[]string, what, x, y string) {
		if x != y {
			*list = append(*list, fmt.Sprintf("%s: %s vs %s", what, orDash(x), orDash(y)))
		}
	}
	diff(&machine, "kernel", ea.KernelRelease, eb.KernelRelease)
	diff(&machine, "kernel kind (host or vm)", ea.Kernel, eb.Kernel)
	diff(&machine, "cpus", fmt.Sprint(ea.CPUs), fmt.Sprint(eb.CPUs))
	diff(&other, "kube-proxy", ea.KubeProxyVersion, eb.KubeProxyVersion)
	diff(&other, "go", ea.GoVersion, eb.GoVersion)
	diff(&other, "scenario", a.Scenario.Name, b.Scenario.Name)
	if a.Scenario.SHA256 != b.Scenario.SHA256 {
		other = append(other, "scenario file contents differ (sha256)")
	}
	if a.Scenario.Seed != b.Scenario.Seed {
		other = append(other, fmt.Sprintf("seed: %d vs %d", a.Scenario.Seed, b.Scenario.Seed))
	}
	return machine, other
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func compareModes(a, b *ModeResult, alpha float64) ModeComparison {
	mc := ModeComparison{A: a.Name, B: b.Name}
	var notes []string
	if a.Mode != b.Mode {
		notes = append(notes, fmt.Sprintf("different proxy modes (%s vs %s)", a.Mode, b.Mode))
	}
	for _, side := range []struct {
		run string
		m   *ModeResult
	}{{"A", a}, {"B", b}} {
		switch {
		case side.m.Skipped != "":
			notes = append(notes, fmt.Sprintf("skipped in %s: %s", side.run, firstLine(side.m.Skipped)))
		case side.m.Error != "":
			notes = append(notes, fmt.Sprintf("failed in %s: %s", side.run, firstLine(side.m.Error)))
		}
	}
	mc.Note = strings.Join(notes, "; ")
	if a.Skipped != "" || b.Skipped != "" {
		return mc
	}

	partial := false
	samples := []struct {
		name string
		a, b []float64
	}{
		{"sync, all", a.SyncSeconds(nil), b.SyncSeconds(nil)},
		{"sync, partial", a.SyncSeconds(&partial), b.SyncSeconds(&partial)},
		{"end-to-end latency", a.EndToEndSeconds(), b.EndToEndSeconds()},
	}
	for _, s := range samples {
		if len(s.a) == 0 && len(s.b) == 0 {
			continue
		}
		m := MetricComparison{Name: s.name, Unit: "s", NA: len(s.a), NB: len(s.b),
			A: Summarize(s.a).P50, B: Summarize(s.b).P50, P: math.NaN()}
		m.Delta = relative(m.A, m.B)
		if len(s.a) > 0 && len(s.b) > 0 {
			if mw, err := MannWhitneyU(s.a, s.b); err == nil {
				m.Tested, m.P = true, mw.P
				m.Significant = mw.P < alpha
			}
		}
		mc.Metrics = append(mc.Metrics, m)
	}
	if fa, fb := a.FirstSync(), b.FirstSync(); fa != nil || fb != nil {
		m := MetricComparison{Name: "first sync", Unit: "s", P: math.NaN()}
		if fa != nil {
			m.A, m.NA = fa.Seconds, 1
		}
		if fb != nil {
			m.B, m.NB = fb.Seconds, 1
		}
		m.Delta = relative(m.A, m.B)
		mc.Metrics = append(mc.Metrics, m)
	}
	if a.NetworkProgramming.Count > 0 || b.NetworkProgramming.Count > 0 {
		m := MetricComparison{Name: "prog. latency, kube-proxy mean", Unit: "s", P: math.NaN(),
			A: a.NetworkProgramming.MeanSeconds, B: b.NetworkProgramming.MeanSeconds,
			NA: int(a.NetworkProgramming.Count), NB: int(b.NetworkProgramming.Count)}
		m.Delta = relative(m.A, m.B)
		mc.Metrics = append(mc.Metrics, m)
	}
	for _, k := range countKeys(a.Rules, b.Rules) {
		va, okA := a.Rules[k]
		vb, okB := b.Rules[k]
		m := MetricComparison{Name: "rules " + k, A: float64(va), B: float64(vb), P: math.NaN()}
		if okA {
			m.NA = 1
		}
		if okB {
			m.NB = 1
		}
		m.Delta = relative(m.A, m.B)
		mc.Metrics = append(mc.Metrics, m)
	}
	return mc
}

func relative(a, b float64) float64 {
	if a == b {
		return 0
	}
	if a == 0 {
		return math.NaN()
	}
	return (b - a) / a
}

// WriteComparison prints a comparison as terminal tables, benchstat
// style: a change whose test is not significant shows as "~".
func WriteComparison(w io.Writer, c *Comparison) error {
	return writeComparison(w, c, false)
}

// WriteComparisonMarkdown writes a comparison as Markdown.
func WriteComparisonMarkdown(w io.Writer, c *Comparison) error {
	return writeComparison(w, c, true)
}

// machineWarning is printed whenever two runs' machines differ.
const machineWarning = "WARNING: timings from different machines are not comparable"

func writeComparison(w io.Writer, c *Comparison, markdown bool) error {
	bw := bufio.NewWriter(w)
	heading := func(s string) {
		if markdown {
			fmt.Fprintf(bw, "\n## %s\n\n", s)
		} else {
			fmt.Fprintf(bw, "\n%s\n", s)
		}
	}
	if markdown {
		fmt.Fprintf(bw, "# kpsim compare: %s (A) vs %s (B)\n\n", mdEscape(c.A.RunID), mdEscape(c.B.RunID))
	} else {
		fmt.Fprintf(bw, "A: %s, scenario %s (seed %d)\nB: %s, scenario %s (seed %d)\n",
			c.A.RunID, c.A.Scenario.Name, c.A.Scenario.Seed, c.B.RunID, c.B.Scenario.Name, c.B.Scenario.Seed)
	}
	envRows := [][]string{
		{"kernel", fmt.Sprintf("%s (%s)", c.A.Environment.KernelRelease, c.A.Environment.Kernel), fmt.Sprintf("%s (%s)", c.B.Environment.KernelRelease, c.B.Environment.Kernel)},
		{"cpus", fmt.Sprint(c.A.Environment.CPUs), fmt.Sprint(c.B.Environment.CPUs)},
		{"kube-proxy", c.A.Environment.KubeProxyVersion, c.B.Environment.KubeProxyVersion},
		{"go", c.A.Environment.GoVersion, c.B.Environment.GoVersion},
		{"scenario", fmt.Sprintf("%s seed %d", c.A.Scenario.Name, c.A.Scenario.Seed), fmt.Sprintf("%s seed %d", c.B.Scenario.Name, c.B.Scenario.Seed)},
	}
	if err := writeAnyTable(bw, markdown, []string{"environment", "A", "B"}, envRows); err != nil {
		return err
	}
	warn := func() {
		if c.SameMachine() {
			return
		}
		msg := fmt.Sprintf("%s (%s). Deltas below mix the machine's speed with the change under test.", machineWarning, strings.Join(c.Machine, "; "))
		if markdown {
			fmt.Fprintf(bw, "\n> **%s**\n", mdEscape(msg))
		} else {
			line := strings.Repeat("!", 78)
			fmt.Fprintf(bw, "\n%s\n%s\n%s\n", line, msg, line)
		}
	}
	warn()
	if len(c.Other) > 0 {
		fmt.Fprintf(bw, "\nThe runs also differ in: %s.\n", strings.Join(c.Other, "; "))
	}

	for _, mc := range c.Modes {
		title := mc.A
		if mc.A != mc.B {
			title = mc.A + " (A) vs " + mc.B + " (B)"
		}
		heading(title)
		if mc.Note != "" {
			fmt.Fprintf(bw, "%s\n", mc.Note)
			if markdown {
				fmt.Fprintln(bw)
			}
		}
		if len(mc.Metrics) == 0 {
			continue
		}
		var rows [][]string
		for _, m := range mc.Metrics {
			rows = append(rows, []string{m.Name, formatValue(m.A, m.NA, m.Unit, m.Tested), formatValue(m.B, m.NB, m.Unit, m.Tested), formatDelta(m), formatTest(m)})
		}
		if err := writeAnyTable(bw, markdown, []string{"metric", "A", "B", "delta", "test"}, rows); err != nil {
			return err
		}
	}
	if len(c.OnlyA) > 0 {
		fmt.Fprintf(bw, "\nOnly in A: %s (pair them with --pair A_MODE=B_MODE).\n", strings.Join(c.OnlyA, ", "))
	}
	if len(c.OnlyB) > 0 {
		fmt.Fprintf(bw, "\nOnly in B: %s.\n", strings.Join(c.OnlyB, ", "))
	}
	warn()
	heading("How to read this")
	how := fmt.Sprintf("A and B of samples are medians (n = number of syncs or latency samples); delta is (B - A) / A. "+
		"For sync times and end-to-end latency a two-sided Mann-Whitney U test asks whether the two samples could "+
		"come from one distribution (exact for up to %d values per side without ties, otherwise the normal "+
		"approximation with tie and continuity correction); when p >= %g the delta is shown as ~: no "+
		"significant difference, as in benchstat. First sync, kube-proxy's mean and rule counts are single figures "+
		"with no test: judge them against run-to-run variation. Syncs are not independent draws (a sync's work "+
		"depends on the churn before it), so treat p-values as a guide, and compare runs of the same scenario and seed.",
		exactLimit, c.Alpha)
	if !markdown {
		how = wrapText(how, 100)
	}
	fmt.Fprintln(bw, how)
	return bw.Flush()
}

func writeAnyTable(w io.Writer, markdown bool, header []string, rows [][]string) error {
	if markdown {
		writeMarkdownTable(w, header, rows)
		return nil
	}
	t := newTable(w)
	t.Header(header)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return err
		}
	}
	return t.Render()
}

func formatValue(v float64, n int, unit string, sample bool) string {
	if n == 0 {
		return "-"
	}
	s := fmt.Sprint(int64(v))
	if unit == "s" {
		s = seconds(v)
	}
	if sample {
		s += fmt.Sprintf(" (n=%d)", n)
	}
	return s
}

func formatDelta(m MetricComparison) string {
	if m.NA == 0 || m.NB == 0 {
		return "-"
	}
	if m.Tested && !m.Significant {
		return "~"
	}
	pct := "n/a"
	if !math.IsNaN(m.Delta) {
		pct = fmt.Sprintf("%+.1f%%", 100*m.Delta)
	}
	if m.Unit == "" {
		return fmt.Sprintf("%+d (%s)", int64(m.B-m.A), pct)
	}
	return pct
}

func formatTest(m MetricComparison) string {
	if !m.Tested {
		return "single value"
	}
	return fmt.Sprintf("p=%.3f n=%d+%d", m.P, m.NA, m.NB)
}

// wrapText breaks s into lines of at most width characters at spaces.
func wrapText(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteString("\n")
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
