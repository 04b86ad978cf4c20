package reports

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// sweepTables are a sweep's tables, for every report format: each mode's
// points, then the fitted growth exponents. None without a sweep.
func sweepTables(r *Result) []reportTable {
	sw := r.Sweep
	if sw == nil {
		return nil
	}
	points := reportTable{
		Title:  fmt.Sprintf("Sweep: cost by size of group %s", sw.Group),
		Header: []string{"mode", "count", "services", "endpoints", "where", "first sync", "local slope", "rules after first sync", "kube-proxy peak rss"},
	}
	fits := reportTable{
		Title:  "Sweep: growth exponents",
		Header: []string{"mode", "where", "metric", "exponent", "R²", "points"},
	}
	vm := false
	for i := range sw.Modes {
		sm := &sw.Modes[i]
		kind := sm.HeadlineRuleKind()
		var prev *SweepPoint
		for i, p := range sm.Points {
			// The slope from the previous size: where a single exponent
			// hides a knee, this shows it.
			local := "-"
			if prev != nil && prev.FirstSyncSeconds > 0 && p.FirstSyncSeconds > 0 && p.Services > prev.Services && prev.Services > 0 {
				local = fmt.Sprintf("%.2f", math.Log(p.FirstSyncSeconds/prev.FirstSyncSeconds)/math.Log(float64(p.Services)/float64(prev.Services)))
			}
			if p.Error == "" {
				prev = &sm.Points[i]
			}
			first := seconds(p.FirstSyncSeconds)
			if p.Placement == "vm" {
				vm = true
				first += " (VM)"
				if e := p.FirstSyncHostEstimate; e != nil {
					first += fmt.Sprintf(", host est. %s-%s", seconds(e[1]), seconds(e[2]))
				}
			}
			rules := "-"
			if v, ok := p.Rules[kind]; ok {
				rules = fmt.Sprintf("%d %s", v, kind)
			}
			label := sm.Name
			if p.Error != "" {
				label += " (FAILED)"
				points.Notes = append(points.Notes, fmt.Sprintf("%s failed: %s", p.Run, p.Error))
			}
			points.Rows = append(points.Rows, []string{label, fmt.Sprint(p.Count), fmt.Sprint(p.Services), fmt.Sprint(p.Endpoints),
				p.Placement, first, local, rules, fmt.Sprintf("%d MiB", p.PeakRSSBytes>>20)})
		}
		for _, sk := range sm.Skipped {
			points.Rows = append(points.Rows, []string{sm.Name, fmt.Sprint(sk.Count), "", "", "", "skipped: " + sk.Reason, "", "", ""})
		}
		for _, f := range sm.Fits {
			metric := f.Metric
			switch f.Metric {
			case SweepFirstSync:
				metric = "first sync"
				if sm.Kernel == "vm" {
					metric += " (VM timing)"
				}
			case SweepPeakRSS:
				metric = "peak rss"
			case SweepListNetlink:
				metric = "listing over netlink, kpsim's replay (chains + sets, as v1.37+)"
			case SweepListNFT:
				metric = "nft list table, kpsim's replay (as v1.36)"
			case SweepDataPathServiceKernel, SweepDataPathDirectKernel:
				metric = "data path: dataplane's kernel CPU per connection, via Service"
				if f.Metric == SweepDataPathDirectKernel {
					metric = "data path: dataplane's kernel CPU per connection, direct"
				}
				if sm.Kernel == "vm" {
					metric += " (VM timing)"
				}
			default:
				if part, ok := strings.CutPrefix(f.Metric, SweepFirstSync+"/"); ok {
					metric = "first sync: " + part
					if sm.Kernel == "vm" {
						metric += " (VM timing)"
					}
				}
			}
			fits.Rows = append(fits.Rows, []string{sm.Name, sm.Kernel, strings.TrimPrefix(metric, SweepRulesPrefix),
				fmt.Sprintf("%.2f", f.Exponent), fmt.Sprintf("%.3f", f.RSquared), fmt.Sprint(f.Points)})
		}
	}
	points.Notes = append(points.Notes, "local slope: ln(first sync / the previous size's) / ln(services / the previous size's), the growth exponent between two sizes.")
	fits.Notes = append(fits.Notes, "Exponent b of metric ∝ services^b: "+sw.FitMethod)
	if vm {
		note := "Timings marked VM ran in a qemu VM (software emulation here): they compare only with other VM timings of the same run, never with host rows."
		points.Notes = append(points.Notes, note)
		fits.Notes = append(fits.Notes, note)
	}
	return []reportTable{points, fits}
}

// writeTables prints report tables in the terminal summary: title, table,
// notes.
func writeTables(w io.Writer, tables []reportTable) error {
	for _, st := range tables {
		if st.Folded {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", st.Title)
		if st.Lead != "" {
			fmt.Fprintln(w, wrap(st.Lead, 108, "  "))
		}
		t := newTable(w)
		t.Header(st.Header)
		for _, row := range st.Rows {
			_ = t.Append(row)
		}
		if err := t.Render(); err != nil {
			return err
		}
		for _, n := range st.Notes {
			fmt.Fprintln(w, wrap(n, 108, "  "))
		}
	}
	return nil
}
