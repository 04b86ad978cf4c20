package reports

import (
	"fmt"
)

// dataPathTables are the data-path tables: per size across a sweep, or
// per mode and datapath step in a run without one. None without a
// datapath step.
func dataPathTables(r *Result) []reportTable {
	if r.Sweep != nil {
		if t := dataPathSweepTable(r.Sweep); len(t.Rows) > 0 {
			return []reportTable{t}
		}
		return nil
	}
	if !hasDataPath(r) {
		return nil
	}
	t := reportTable{
		Title:  "Data path: new connections through the Service vs straight to a pod",
		Lead:   dataPathLead,
		Header: append([]string{"mode", "step"}, dataPathHeader...),
	}
	vm, res := false, 0.0
	for i := range r.Modes {
		m := &r.Modes[i]
		for j := range m.DataPaths {
			dp := &m.DataPaths[j]
			t.Rows = append(t.Rows, append([]string{modeLabel(m), dp.Step}, dataPathCells(dp.Figures)...))
			vm = vm || (m.Placement != nil && m.Placement.Kernel == "vm")
			res = max(res, dp.Figures.KernelResolutionMicros)
		}
	}
	t.Notes = dataPathNotes(res, vm)
	return []reportTable{t}
}

const dataPathLead = "Connections per kind, each through the node namespace's rules from the fake client pod, the " +
	"dataplane pinned to one CPU. A ratio below 1 or a positive Δ is what going through the Service costs over going " +
	"straight to the pod; in iptables mode the direct connection also walks all of KUBE-SERVICES (no rule matches it)."

var dataPathHeader = []string{"connections per kind", "conn/s service / direct", "ratio ± se",
	"kernel µs/conn service / direct", "Δ kernel µs ± se", "dataplane µs/conn service / direct", "Δ dataplane µs ± se",
	"cpu busy (dataplane's share)", "KUBE-SERVICES mean position / rules", "failed, stray"}

func dataPathCells(f DataPathFigures) []string {
	pos := "-"
	if f.ChainRules > 0 {
		pos = fmt.Sprintf("%.0f / %d", f.MeanPosition, f.ChainRules)
	}
	return []string{
		fmt.Sprint(f.Connections),
		fmt.Sprintf("%.0f / %.0f", f.ServiceRate, f.DirectRate),
		fmt.Sprintf("%.3f ± %.3f", f.RateRatio, f.RateRatioSE),
		fmt.Sprintf("%.1f / %.1f", f.ServiceKernelMicros, f.DirectKernelMicros),
		fmt.Sprintf("%+.1f ± %.1f", f.KernelDeltaMicros, f.KernelDeltaSE),
		fmt.Sprintf("%.1f / %.1f", f.ServiceProcessMicros, f.DirectProcessMicros),
		fmt.Sprintf("%+.1f ± %.1f", f.ProcessDeltaMicros, f.ProcessDeltaSE),
		fmt.Sprintf("%.0f%% (%.0f%%)", f.Busy*100, f.DataplaneShare*100),
		pos,
		fmt.Sprintf("%d, %d", f.Failed, f.Stray),
	}
}

// dataPathNotes say how the figures were obtained, in short (the method
// note has it all), the rounding of the kernel times (res, µs per
// connection) and what a VM row compares with.
func dataPathNotes(res float64, vm bool) []string {
	notes := []string{
		"conn/s: connections made per second of the measured windows, one CPU; ratio: service/direct, ± one standard error from the rounds.",
		fmt.Sprintf("kernel µs/conn: the pinned CPU's system+irq+softirq time in /proc/stat (10 ms ticks, sampled by the timer tick) per connection; "+
			"other work on that CPU counts too (cpu busy: the CPU's non-idle share, and in brackets the dataplane process's share of that). "+
			"Rounding is at most one tick per window, %.2f µs per connection in all, and mostly cancels; the ± of Δ, from the rounds' spread, "+
			"covers it and the tick sampling. dataplane µs/conn: the dataplane process's CPU time (user+system, exact), so other processes "+
			"do not count; it includes the Go prober's and responders' user time, the same for both kinds, so its Δ is the more precise "+
			"cost of the path. Δ = service - direct.", res),
		"KUBE-SERVICES position: each sampled Service's rule in iptables' nat chain at the step's start (random: kube-proxy writes it in Go map order); " +
			"a direct connection walks all of it.",
	}
	if vm {
		notes = append(notes, "Rows that ran in a VM (software emulation here) compare only with rows of the same VM: their rates and µs are the VM's, "+
			"their ratios and Δ within one node.")
	}
	return notes
}

// dataPathSweepTable gives each mode's data-path figures per size.
func dataPathSweepTable(sw *SweepResult) reportTable {
	t := reportTable{
		Title:  fmt.Sprintf("Sweep: data path by size of group %s", sw.Group),
		Lead:   dataPathLead,
		Header: append([]string{"mode", "services", "where"}, dataPathHeader...),
	}
	vm, res := false, 0.0
	for i := range sw.Modes {
		sm := &sw.Modes[i]
		for _, p := range sm.Points {
			if p.DataPath == nil {
				continue
			}
			res = max(res, p.DataPath.KernelResolutionMicros)
			label := sm.Name
			if p.Error != "" {
				label += " (FAILED)"
			}
			if p.Placement == "vm" {
				vm = true
			}
			t.Rows = append(t.Rows, append([]string{label, fmt.Sprint(p.Services), p.Placement}, dataPathCells(*p.DataPath)...))
		}
	}
	t.Notes = dataPathNotes(res, vm)
	return t
}
