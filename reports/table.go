package reports

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteSummary prints a run's environment, one row per mode and the
// expectations, then says how every column was obtained.
func WriteSummary(w io.Writer, r *Result) error {
	env := r.Environment
	fmt.Fprintf(w, "run %s: scenario %s (%s, seed %d)\n", r.RunID, r.Scenario.Name, r.Scenario.File, r.Scenario.Seed)
	fmt.Fprintf(w, "kernel %s (%s), %d CPUs, kube-proxy %s, %s\n", env.KernelRelease, env.Kernel, env.CPUs, env.KubeProxyVersion, env.GoVersion)
	for _, f := range toolFacts(r) {
		fmt.Fprintln(w, wrap(f.Name+": "+f.Value, 108, "  "))
	}
	if r.Lanes != nil {
		fmt.Fprintln(w, wrap("shared machine: "+laneFact(r.Lanes), 108, "  "))
	}
	fmt.Fprintln(w)

	t := newTable(w)
	t.Header([]string{"mode", "first sync", "syncs (full/partial)", "p50", "p90", "p99", "max", "prog. latency: kube-proxy mean (n)", "end-to-end p50/p99 (n)", "rules", "probes ok/sent (stray)", "kube-proxy cpu", "kube-proxy rss", "harness cpu, rss"})
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Skipped != "" {
			_ = t.Append([]string{m.Name, "skipped: " + m.Skipped, "", "", "", "", "", "", "", "", "", "", "", ""})
			continue
		}
		row := []string{m.Name}
		if pl := m.Placement; pl != nil && pl.Kernel == "vm" {
			row[0] += fmt.Sprintf(" [vm %s, %s]", pl.KernelRelease, pl.Accel)
		}
		if m.Error != "" {
			row[0] += " (FAILED)"
		}
		first := "-"
		if f := m.FirstSync(); f != nil {
			first = seconds(f.Seconds)
		}
		full, partial := true, false
		sm := Summarize(m.SyncSeconds(nil))
		row = append(row, first,
			fmt.Sprintf("%d (%d/%d)", sm.Count, len(m.SyncSeconds(&full)), len(m.SyncSeconds(&partial))),
			seconds(sm.P50), seconds(sm.P90), seconds(sm.P99), seconds(sm.Max))
		np := "-"
		if m.NetworkProgramming.Count > 0 {
			np = fmt.Sprintf("%s (%d)", seconds(m.NetworkProgramming.MeanSeconds), m.NetworkProgramming.Count)
		}
		e2e := "-"
		if xs := m.EndToEndSeconds(); len(xs) > 0 {
			es := Summarize(xs)
			e2e = fmt.Sprintf("%s/%s (%d)", seconds(es.P50), seconds(es.P99), es.Count)
		}
		row = append(row, np, e2e, headlineRules(m.Rules))
		probes := probeCell(m)
		row = append(row, probes, fmt.Sprintf("%.1fs", m.Resources.KubeProxyCPUSeconds()), fmt.Sprintf("%d MiB", m.Resources.MaxRSSBytes>>20), harnessCell(m.Resources))
		_ = t.Append(row)
	}
	if err := t.Render(); err != nil {
		return err
	}
	ipvs := false
	for _, m := range r.Modes {
		ipvs = ipvs || (m.Mode == "ipvs" && m.Skipped == "")
		if m.Error != "" {
			fmt.Fprintf(w, "%s failed: %s\n", m.Name, m.Error)
		}
	}
	if ipvs {
		fmt.Fprintln(w, wrap(ipvsDeprecation, 108, "  "))
	}
	var more []reportTable
	if st := syncTimeTable(r); len(st.Rows) > 0 || len(st.Notes) > 0 {
		more = append(more, st)
	}
	more = append(more, sweepTables(r)...)
	more = append(more, variantTables(r)...)
	if err := writeTables(w, more); err != nil {
		return err
	}

	if ft := faultsTable(r); len(ft.Rows) > 0 {
		fmt.Fprintln(w)
		tt := newTable(w)
		tt.Header(ft.Header)
		for _, row := range ft.Rows {
			_ = tt.Append(row)
		}
		if err := tt.Render(); err != nil {
			return err
		}
	}
	if err := writeLifecycleSummary(w, r); err != nil {
		return err
	}
	if len(r.Expectations) > 0 {
		fmt.Fprintln(w)
		et := newTable(w)
		et.Header([]string{"expectation", "mode", "want", "got", "verdict", "detail"})
		for _, e := range r.Expectations {
			verdict := "MISSED"
			if e.Passed {
				verdict = "ok"
			}
			_ = et.Append([]string{e.Name, e.Mode, e.Want, e.Got, verdict, firstLine(e.Detail)})
		}
		if err := et.Render(); err != nil {
			return err
		}
	}
	writeDesigns(w, r)
	for i := range r.Modes {
		if t, ok := r.Modes[i].MemoryTrend(); ok {
			fmt.Fprintf(w, "%s memory: %s\n", r.Modes[i].Name, t)
		}
	}
	for _, n := range append(vmNotes(r), startupNotes(r)...) {
		fmt.Fprintln(w, wrap(n, 108, "  "))
	}
	if r.Host.Checked && !r.Host.Unchanged {
		fmt.Fprintf(w, "\nTHE HOST CHANGED during the run:\n%s\n", r.Host.Diff)
	}

	fmt.Fprintln(w, "\nHow these were obtained:")
	for _, n := range notesFor(r) {
		fmt.Fprintln(w, "  "+wrap(n.What+": "+n.How, 108, "    "))
	}
	return nil
}

// writeDesigns says, per probe step, what the share tests could detect:
// the same in every mode, so from the first mode that probed.
func writeDesigns(w io.Writer, r *Result) {
	for _, m := range r.Modes {
		if len(m.Distributions) == 0 {
			continue
		}
		fmt.Fprintln(w, "\nDistribution tests (per probe step):")
		for _, sd := range m.Distributions {
			pl := sd.Plan
			if pl == nil {
				fmt.Fprintf(w, "  %s: %d connections per Service port, no Service to test shares of\n", sd.Step, sd.Connections)
				continue
			}
			fmt.Fprintf(w, "  %s: %d Services tested, %d connections each; family-wise alpha %g; power %.2f to flag +%.0f%% on one endpoint, %.2f for +%.0f%% at one chain position in every Service (the design asks %.2f, reached at %d each)\n",
				sd.Step, pl.Services, sd.Connections, pl.Design.Alpha, sd.ServicePower, 100*pl.Design.ServiceExcess, sd.PooledPower, 100*pl.Design.PooledExcess, pl.Design.Power, pl.ProbesPerService)
		}
		return
	}
}

// headlineRules shows the count a reader of this mode cares about most.
func headlineRules(rules map[string]int) string {
	// IPVS mode writes iptables rules too; its real servers say more.
	for _, k := range []string{"ipvs/realServers", "iptables/nat", "nftables/rules"} {
		if v, ok := rules[k]; ok {
			return fmt.Sprintf("%d %s", v, k)
		}
	}
	keys := countKeys(rules)
	if len(keys) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d %s", rules[keys[0]], keys[0])
}

func seconds(s float64) string {
	if s == 0 {
		return "-"
	}
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// wrap breaks text into lines of at most width runes, indenting
// continuation lines.
func wrap(text string, width int, indent string) string {
	var out, line strings.Builder
	for _, word := range strings.Fields(text) {
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			out.WriteString(line.String() + "\n")
			line.Reset()
			line.WriteString(indent)
		} else if line.Len() > 0 && strings.TrimSpace(line.String()) != "" {
			line.WriteString(" ")
		}
		line.WriteString(word)
	}
	out.WriteString(line.String())
	return out.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// newTable is a terminal table whose headers are printed as written.
func newTable(w io.Writer) *tablewriter.Table {
	return tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off))
}

// harnessCell is the harness's CPU time (node process, its programs,
// dataplane process) and the two processes' peak RSS; "-" when the run
// had none apart (schema v1alpha1 counted it in the node's).
func harnessCell(r Resources) string {
	if r.Harness == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs, %d+%d MiB", r.Harness.CPUSeconds(), r.Harness.NodeMaxRSSBytes>>20, r.Harness.DataplaneMaxRSSBytes>>20)
}
