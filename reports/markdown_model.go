package reports

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The Markdown and HTML reports render the same content: the facts about
// the environment, a few tables and the notes on how every figure was
// obtained. They are built here once, from the result schema only, so the
// two formats cannot drift apart.

// fact is one line of a report's header.
type fact struct{ Name, Value string }

// reportTable is a titled table of text cells.
type reportTable struct {
	Title string
	// Lead is a line printed between the title and the table.
	Lead   string
	Header []string
	Rows   [][]string
	// Notes follow the table (failed modes, the host diff, ...).
	Notes []string
	// Folded tables are detail: the HTML page folds them away, Markdown
	// puts them in a <details> block, the terminal summary leaves them
	// out.
	Folded bool
}

// methodNote says how one column or figure was obtained.
type methodNote struct{ What, How string }

// MethodNotes say how the summary's figures were obtained. Every report
// format prints them; the wording is the terminal summary's.
var methodNotes = []methodNote{
	{"syncs, first sync, p50..max", "every sync's exact duration, the change of kube-proxy's own " +
		"kubeproxy_sync_proxy_rules_duration_seconds histogram sum between polls 5 ms apart (full vs partial " +
		"from the sync_full/sync_partial histograms); quantiles are " + SummaryMethod + ". " +
		"When several syncs end between two polls their summed duration is split evenly."},
	{"where sync time goes", SyncTimeMethod},
	{"prog. latency, kube-proxy", "its kubeproxy_network_programming_duration_seconds histogram (sum / count), " +
		"fed by the last-change-trigger-time annotation kpsim stamps on every EndpointSlice write; " +
		"the histogram keeps only a count and a sum, so only the mean is exact."},
	{"prog. latency, end to end", "for up to 10 sampled mutations per churn step, the time from that trigger " +
		"time until real connections to the ClusterIP first reach a new ready endpoint, or stop reaching a " +
		"flapped one (absent from enough consecutive probes to be seen with probability 0.999 if present); " +
		"resolution one probe batch (about 2-3 ms), in result.json per sample."},
	{"rules", "counted from iptables-save / nft -j list ruleset (and ipvsadm / ipset for IPVS) in the node " +
		"namespace after the first sync and at the end of the run; the raw dumps are saved beside result.json."},
	{"probes", "real connections (each a new socket and source port) from a fake client pod, an outside " +
		"client or the node through the node's kernel, answered by fake pods that name the endpoint they are; " +
		"stray = replies from an endpoint the API state and kube-proxy's semantics do not allow for that probe."},
	{"distribution", "per probe step: Pearson chi-square of per-endpoint counts against equal shares of the " +
		"eligible endpoints, Holm-corrected across Services, plus a test pooled by chain position; the " +
		"probe count comes from a power calculation (power 0.9 for +20% on one endpoint, +2% at one " +
		"position, or both: the probe step's powerFor) unless the scenario sets it (connections, and " +
		"vmConnections for modes in a VM); rule-implied shares are computed exactly from the live rules."},
	{"oracle", "after churn, the node's dataplane, normalized, against what a fresh proxier of the same mode " +
		"builds from the final API state in one full sync in a second node process."},
	{"kube-proxy cpu, rss", "getrusage(2) read inside kube-proxy's own process in the node (the upstream proxier, its " +
		"informers, its API client, kpsim's sync recorder), its whole life: cpu user+system, the programs it ran " +
		"included (iptables-restore, nft, ipset); rss its peak, of which the process held startRSSBytes in result.json " +
		"before the proxier started (kpsim's binary: Go runtime, package initialisation)."},
	{"harness cpu, rss", "the rest, never counted as kube-proxy's: getrusage(2) of the node process (the fake API server " +
		"kube-proxy watches, churn, steps), wait4's CPU time of each program it ran (calibration, iptables-save, nft " +
		"list, ipset save), and getrusage(2) read inside the dataplane process (fake pods' responders, prober); rss " +
		"as node+dataplane."},
}

// comparabilityNote is the design's rule on timings.
const comparabilityNote = "A timing is only comparable with a timing taken on the same kernel and machine " +
	"(and, to be safe, in the same run): compare modes within one report, not across reports from different machines."

func reportFacts(r *Result) []fact {
	env := r.Environment
	facts := []fact{
		{"run", r.RunID},
		{"scenario", fmt.Sprintf("%s (%s), seed %d", r.Scenario.Name, r.Scenario.File, r.Scenario.Seed)},
		{"scenario sha256", r.Scenario.SHA256},
		{"kernel", fmt.Sprintf("%s (%s)", env.KernelRelease, env.Kernel)},
		{"cpus", fmt.Sprint(env.CPUs)},
		{"kube-proxy", env.KubeProxyVersion},
		{"go", env.GoVersion},
	}
	facts = append(facts, toolFacts(r)...)
	if !r.Started.IsZero() {
		when := r.Started.UTC().Format(time.RFC3339)
		if !r.Finished.IsZero() {
			when += fmt.Sprintf(" (took %s)", r.Finished.Sub(r.Started).Round(time.Second))
		}
		facts = append(facts, fact{"started", when})
	}
	if l := r.Lanes; l != nil {
		facts = append(facts, fact{"shared machine", laneFact(l)})
	}
	facts = append(facts, fact{"host namespace", hostVerdict(r.Host)})
	verdict := "FAILED (a mode failed or an expectation was missed)"
	if r.Passed {
		verdict = "passed"
	}
	return append(facts, fact{"verdict", verdict})
}

// laneFact says which entries ran beside which, for how long, and what
// the sharing cost each side's unit costs.
func laneFact(l *Lanes) string {
	var parts []string
	for _, lane := range []struct {
		name    string
		entries []LaneEntry
	}{{"host", l.Host}, {"VM", l.VM}} {
		var es []string
		for _, e := range lane.entries {
			es = append(es, fmt.Sprintf("%s (%s, %s of it beside the other lane)", e.Name,
				e.Finished.Sub(e.Started).Round(time.Second), (time.Duration(e.Beside*float64(time.Second))).Round(time.Second)))
		}
		parts = append(parts, lane.name+" lane: "+strings.Join(es, ", "))
	}
	out := "the VM entries ran in a lane beside the host entries' (spec.vmLane: beside), so their timings were taken while the other lane used the CPUs too: " +
		strings.Join(parts, "; ") + "."
	costs := func(m map[string]RatioShift) string {
		var cs []string
		for _, kind := range slices.Sorted(maps.Keys(m)) {
			c := m[kind]
			cs = append(cs, fmt.Sprintf("%s %+.0f%% [%+.0f%%, %+.0f%%]", kind, 100*(c.Ratio-1), 100*(c.Low-1), 100*(c.High-1)))
		}
		return strings.Join(cs, ", ")
	}
	out += " What sharing cost, from the unit costs every node measures before its proxier starts (ratio beside/alone, 95% CI):"
	if len(l.HostCost) > 0 {
		out += fmt.Sprintf(" host (%s's nodes beside the VM lane, against the calibration node alone after both lanes): %s;",
			strings.Join(l.HostCostEntries, ", "), costs(l.HostCost))
	} else {
		out += " host: not measured (no host node calibrated beside the VM lane);"
	}
	if len(l.VMCost) > 0 {
		out += fmt.Sprintf(" VM (%s's node beside the host lane, against %s's after it): %s.",
			strings.Join(l.VMCostEntries[0], ", "), strings.Join(l.VMCostEntries[1], ", "), costs(l.VMCost))
	} else {
		out += " VM: not measured (no VM node calibrated both beside the host lane and after it)."
	}
	return out + " kpsim run --vm-lane after runs one entry at a time."
}

// toolFacts are the versions of what kube-proxy ran, one line per kernel
// the modes ran on (the host's, a VM's).
func toolFacts(r *Result) []fact {
	type place struct{ name, kernel string }
	var order []place
	versions := map[place]map[string]string{}
	for _, m := range measured(r) {
		if len(m.ToolVersions) == 0 {
			continue
		}
		pl := place{"host", r.Environment.KernelRelease}
		if m.Placement != nil && m.Placement.Kernel == "vm" {
			pl = place{"VM", m.Placement.KernelRelease}
		}
		if versions[pl] == nil {
			versions[pl] = map[string]string{}
			order = append(order, pl)
		}
		maps.Copy(versions[pl], m.ToolVersions)
	}
	var facts []fact
	for _, pl := range order {
		var vs []string
		for _, prog := range slices.Sorted(maps.Keys(versions[pl])) {
			vs = append(vs, prog+": "+versions[pl][prog])
		}
		facts = append(facts, fact{fmt.Sprintf("tools (%s, kernel %s)", pl.name, pl.kernel), strings.Join(vs, "; ")})
	}
	return facts
}

func hostVerdict(h HostCheck) string {
	switch {
	case !h.Checked:
		return "not checked: " + firstLine(h.Error)
	case h.Unchanged:
		return "unchanged (before/after snapshot of rules, links and sysctls)"
	}
	return "CHANGED during the run"
}

// reportTables are the tables every report format shows, in order.
func reportTables(r *Result) []reportTable {
	tables := []reportTable{glanceTable(r), syncTable(r)}
	if st := syncTimeTable(r); len(st.Rows) > 0 || len(st.Notes) > 0 {
		tables = append(tables, st)
	}
	tables = append(tables, programmingTable(r))
	if dt := distributionTable(r); len(dt.Rows) > 0 {
		tables = append(tables, dt)
	}
	if rt := rulesTable(r, false); len(rt.Rows) > 0 {
		tables = append(tables, rt)
	}
	if rt := rulesTable(r, true); len(rt.Rows) > 0 {
		tables = append(tables, rt)
	}
	tables = append(tables, sweepTables(r)...)
	tables = append(tables, dataPathTables(r)...)
	tables = append(tables, variantTables(r)...)
	if ft := faultsTable(r); len(ft.Rows) > 0 {
		tables = append(tables, ft)
	}
	tables = append(tables, lifecycleTables(r)...)
	if len(r.Expectations) > 0 {
		tables = append(tables, expectationsTable(r))
	}
	return tables
}

func modeLabel(m *ModeResult) string {
	if m.Error != "" {
		return m.Name + " (FAILED)"
	}
	return m.Name
}

// skippedRow stands for a mode that did not run; the reason, often long,
// goes in a note under the first table (why).
func skippedRow(t *reportTable, m *ModeResult, why bool) {
	row := make([]string, len(t.Header))
	row[0], row[1] = m.Name, "skipped"
	if why {
		row[1] = "skipped (see below)"
		t.Notes = append(t.Notes, fmt.Sprintf("%s skipped: %s", m.Name, m.Skipped))
	}
	t.Rows = append(t.Rows, row)
}

func syncTable(r *Result) reportTable {
	t := reportTable{
		Title:  "Syncs",
		Header: []string{"mode", "first sync", "syncs (full/partial)", "p50", "p90", "p99", "max", "partial p50", "kube-proxy cpu", "kube-proxy rss", "harness cpu, rss"},
	}
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Skipped != "" {
			skippedRow(&t, m, true)
			continue
		}
		first := "-"
		if f := m.FirstSync(); f != nil {
			first = seconds(f.Seconds)
		}
		full, partial := true, false
		ps := m.SyncSeconds(&partial)
		sm := Summarize(m.SyncSeconds(nil))
		t.Rows = append(t.Rows, []string{modeLabel(m), first,
			fmt.Sprintf("%d (%d/%d)", sm.Count, len(m.SyncSeconds(&full)), len(ps)),
			seconds(sm.P50), seconds(sm.P90), seconds(sm.P99), seconds(sm.Max), seconds(Summarize(ps).P50),
			fmt.Sprintf("%.1fs", m.Resources.KubeProxyCPUSeconds()),
			fmt.Sprintf("%d MiB", m.Resources.MaxRSSBytes>>20), harnessCell(m.Resources)})
		if m.Error != "" {
			t.Notes = append(t.Notes, fmt.Sprintf("%s failed: %s", m.Name, firstLine(m.Error)))
		}
	}
	t.Notes = append(t.Notes, vmNotes(r)...)
	t.Notes = append(t.Notes, startupNotes(r)...)
	return t
}

// vmNotes say, per mode that ran in a VM, where and how, and its timings'
// calibrated host estimate.
func vmNotes(r *Result) []string {
	var out []string
	for _, m := range r.Modes {
		pl := m.Placement
		if pl == nil || pl.Kernel != "vm" {
			continue
		}
		n := fmt.Sprintf("%s ran in a VM (kernel %s, %s%s, boot %.1fs): its timings are only comparable with other modes of the same VM.",
			m.Name, pl.KernelRelease, pl.Accel, map[bool]string{true: ": software emulation, about 10-35x slower than the host", false: ""}[pl.Accel == "tcg"], pl.BootSeconds)
		if c := pl.GuestClock; c != nil {
			n += " Clock check: " + c.String() + "."
		}
		if e := m.NativeEstimate; e != nil {
			n += fmt.Sprintf(" %s %s.", m.Name, e)
		}
		out = append(out, n)
	}
	return out
}

func programmingTable(r *Result) reportTable {
	t := reportTable{
		Title:  "Network programming, rules and traffic",
		Header: []string{"mode", "prog. latency: kube-proxy mean (n)", "end-to-end p50/p99 (n)", "rules", "probes ok/sent (stray)", "oracle"},
	}
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Skipped != "" {
			skippedRow(&t, m, false)
			continue
		}
		np := "-"
		if m.NetworkProgramming.Count > 0 {
			np = fmt.Sprintf("%s (%d)", seconds(m.NetworkProgramming.MeanSeconds), m.NetworkProgramming.Count)
		}
		e2e := "-"
		if xs := m.EndToEndSeconds(); len(xs) > 0 {
			es := Summarize(xs)
			e2e = fmt.Sprintf("%s/%s (%d)", seconds(es.P50), seconds(es.P99), es.Count)
		}
		if failed := len(m.EndToEnd) - len(m.EndToEndSeconds()); failed > 0 {
			e2e += fmt.Sprintf(", %d unsettled or superseded", failed)
		}
		probes := probeCell(m)
		t.Rows = append(t.Rows, []string{modeLabel(m), np, e2e, headlineRules(m.Rules), probes, oracleVerdict(m.Oracle)})
	}
	return t
}

func oracleVerdict(o *Oracle) string {
	switch {
	case o == nil:
		return "-"
	case o.Skipped != "":
		return "not run: " + o.Skipped
	case !o.Checked:
		return "not checked: " + firstLine(o.Error)
	case o.Equal:
		return fmt.Sprintf("equal (%d lines)", o.Lines)
	}
	n := 0
	for _, l := range strings.Split(o.Diff, "\n") {
		if strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+") {
			n++
		}
	}
	return fmt.Sprintf("DIFFERENT (%d of %d lines)", n, o.Lines)
}

// rulesTable has one row per rule count key and one column per mode that
// ran; a count that changed since the first sync shows both. The members of
// each ipset ("ipset/set/<name>") are detail: perSet gives those rows alone,
// folded, and otherwise they are left out.
func rulesTable(r *Result, perSet bool) reportTable {
	t := reportTable{Title: "Rules at the end (after the first sync)", Header: []string{"count"}}
	if perSet {
		t.Title, t.Folded = "IPVS: members of each ipset at the end (after the first sync)", true
	}
	var counts []map[string]int
	var modes []*ModeResult
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Skipped != "" || (len(m.Rules) == 0 && len(m.RulesAfterFirstSync) == 0) {
			continue
		}
		modes = append(modes, m)
		t.Header = append(t.Header, m.Name)
		counts = append(counts, m.Rules, m.RulesAfterFirstSync)
	}
	for _, k := range countKeys(counts...) {
		if strings.HasPrefix(k, "ipset/set/") != perSet {
			continue
		}
		row := []string{k}
		for _, m := range modes {
			end, okEnd := m.Rules[k]
			first, okFirst := m.RulesAfterFirstSync[k]
			cell := "-"
			switch {
			case okEnd && okFirst && end != first:
				cell = fmt.Sprintf("%d (%d)", end, first)
			case okEnd:
				cell = fmt.Sprint(end)
			case okFirst:
				cell = fmt.Sprintf("- (%d)", first)
			}
			row = append(row, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func expectationsTable(r *Result) reportTable {
	t := reportTable{Title: "Expectations", Header: []string{"expectation", "mode", "want", "got", "verdict", "detail"}}
	for _, e := range r.Expectations {
		verdict := "MISSED"
		if e.Passed {
			verdict = "ok"
		}
		t.Rows = append(t.Rows, []string{e.Name, e.Mode, e.Want, e.Got, verdict, firstLine(e.Detail)})
	}
	if r.Host.Checked && !r.Host.Unchanged {
		t.Notes = append(t.Notes, "THE HOST CHANGED during the run:\n"+r.Host.Diff)
	}
	return t
}
