package reports

import (
	"fmt"
)

// dataPathTables are the data-path tables, rates then CPU: per size
// across a sweep, or per mode and datapath step in a run without one.
// None without a datapath step.
func dataPathTables(r *Result) []reportTable {
	type row struct {
		lead []string
		f    DataPathFigures
		vm   bool
	}
	var rows []row
	var leadHeader []string
	var title string
	if sw := r.Sweep; sw != nil {
		title, leadHeader = fmt.Sprintf("Sweep: data path by size of group %s", sw.Group), []string{"mode", "services", "where"}
		for i := range sw.Modes {
			sm := &sw.Modes[i]
			for _, p := range sm.Points {
				if p.DataPath == nil {
					continue
				}
				label := sm.Name
				if p.Error != "" {
					label += " (FAILED)"
				}
				rows = append(rows, row{[]string{label, fmt.Sprint(p.Services), p.Placement}, *p.DataPath, p.Placement == "vm"})
			}
		}
	} else {
		title, leadHeader = "Data path", []string{"mode", "step", "where"}
		for i := range r.Modes {
			m := &r.Modes[i]
			where := "host"
			if m.Placement != nil && m.Placement.Kernel != "" {
				where = m.Placement.Kernel
			}
			for _, dp := range m.DataPaths {
				rows = append(rows, row{[]string{modeLabel(m), dp.Step, where}, dp.Figures, where == "vm"})
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	rates := reportTable{
		Title: title + ": connection rates, through the Service and straight to a pod",
		Lead:  dataPathLead,
		Header: append(leadHeader, "connections per kind", "conn/s service / direct", "ratio ± se",
			"ratio per CPU-second ± se", "cpu busy (dataplane's share)", "KUBE-SERVICES mean position / rules", "failed, stray"),
	}
	cpu := reportTable{
		Title: title + ": CPU per new connection",
		Header: append(leadHeader, "kernel µs/conn, pinned CPU: service / direct", "Δ ± se",
			"kernel µs/conn, dataplane's: service / direct", "Δ ± se", "dataplane CPU µs/conn: service / direct", "Δ ± se",
			"kernel ns per KUBE-SERVICES rule walked ± se"),
	}
	vm, res := false, 0.0
	for _, rw := range rows {
		f := rw.f
		vm = vm || rw.vm
		res = max(res, f.KernelResolutionMicros)
		pos, perRule := "-", "-"
		if f.ChainRules > 0 {
			pos = fmt.Sprintf("%.0f / %d", f.MeanPosition, f.ChainRules)
		}
		if f.NanosPerRuleSE > 0 {
			perRule = fmt.Sprintf("%.1f ± %.1f", f.NanosPerRule, f.NanosPerRuleSE)
		}
		rates.Rows = append(rates.Rows, append(append([]string{}, rw.lead...),
			fmt.Sprint(f.Connections),
			fmt.Sprintf("%.0f / %.0f", f.ServiceRate, f.DirectRate),
			fmt.Sprintf("%.3f ± %.3f", f.RateRatio, f.RateRatioSE),
			fmt.Sprintf("%.3f ± %.3f", f.CPURateRatio, f.CPURateRatioSE),
			fmt.Sprintf("%.0f%% (%.0f%%)", f.Busy*100, f.DataplaneShare*100),
			pos,
			fmt.Sprintf("%d, %d", f.Failed, f.Stray)))
		cpu.Rows = append(cpu.Rows, append(append([]string{}, rw.lead...),
			fmt.Sprintf("%.1f / %.1f", f.ServiceKernelMicros, f.DirectKernelMicros),
			fmt.Sprintf("%+.1f ± %.1f", f.KernelDeltaMicros, f.KernelDeltaSE),
			fmt.Sprintf("%.1f / %.1f", f.ServiceOwnKernelMicros, f.DirectOwnKernelMicros),
			fmt.Sprintf("%+.1f ± %.1f", f.OwnKernelDeltaMicros, f.OwnKernelDeltaSE),
			fmt.Sprintf("%.1f / %.1f", f.ServiceProcessMicros, f.DirectProcessMicros),
			fmt.Sprintf("%+.1f ± %.1f", f.ProcessDeltaMicros, f.ProcessDeltaSE),
			perRule))
	}
	rates.Notes = []string{
		"conn/s: connections made per second of the measured windows, on one CPU; ratio: service/direct, ± one standard error from the rounds. " +
			"ratio per CPU-second: direct's dataplane CPU per connection over service's, the ratio each would reach on a CPU of its own, " +
			"whatever else ran. cpu busy: the pinned CPU's non-idle share, and in brackets the dataplane process's share of that: below " +
			"about 95%, other work ran on that CPU, slowing the rates and counting in its kernel time.",
		"KUBE-SERVICES position: each sampled Service's rule in iptables' nat chain at the step's start (random: kube-proxy writes it in " +
			"Go map order); a direct connection walks all of it.",
	}
	cpu.Notes = []string{
		fmt.Sprintf("kernel µs/conn, pinned CPU: its system+irq+softirq time in /proc/stat (10 ms ticks, sampled by the timer tick) per "+
			"connection; other work on that CPU counts too. Rounding is at most one tick per window, %.2f µs per connection in all, and mostly "+
			"cancels; the ± of Δ, from the rounds' spread, covers it and the tick sampling.", res),
		"kernel µs/conn, dataplane's: the dataplane process's system time per connection (getrusage): the kernel work done in its threads, " +
			"softirqs included, never another process's. dataplane CPU µs/conn: its user+system time, exact; it includes the Go prober's and " +
			"responders' user time, the same for both kinds, so its Δ is the most precise cost of the path. Δ = service - direct.",
		"kernel ns per KUBE-SERVICES rule walked (iptables): the least-squares slope of each sampled Service's dataplane kernel µs per " +
			"connection on its rule's position in nat KUBE-SERVICES, within the one node, ± its standard error; small chains give " +
			"positions too close together for a useful slope.",
	}
	if vm {
		note := "Rows that ran in a VM (software emulation here) compare only with rows of the same VM: their rates and µs are the VM's, " +
			"their ratios and Δ within one node."
		rates.Notes = append(rates.Notes, note)
		cpu.Notes = append(cpu.Notes, note)
	}
	return []reportTable{rates, cpu}
}

const dataPathLead = "New TCP connections from the fake client pod, each kind through the node namespace's rules, the " +
	"dataplane pinned to one CPU. A ratio below 1 or a positive Δ is what going through the Service costs over going " +
	"straight to the pod; in iptables mode the direct connection also walks all of KUBE-SERVICES (no rule matches it)."
