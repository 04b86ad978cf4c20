package reports

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// faultsNote says how the faults table was obtained.
var faultsNote = methodNote{"faults", "command faults: a wrapper script first in the node's PATH fails the " +
	"program's next runs that change rules (exit 1, input discarded) and counts them; API faults: reactors at " +
	"the front of the fake clientset fail (HTTP 500) or hold matching calls; kube-proxy's own counters " +
	"(sync_proxy_rules_iptables_restore_failures_total, _iptables_partial_restore_failures_total, " +
	"_nftables_sync_failures_total, _nftables_cleanup_failures_total) say what it saw; churn writes that " +
	"met an injected error were retried; whether the dataplane recovered is the oracle's verdict."}

// notesFor is methodNotes, plus the faults note when r injected faults
// and the lifecycle note when it ran lifecycle steps.
func notesFor(r *Result) []methodNote {
	notes := methodNotes
	if slices.ContainsFunc(r.Modes, func(m ModeResult) bool { return len(m.Faults) > 0 }) {
		notes = append(slices.Clip(notes), faultsNote)
	}
	if slices.ContainsFunc(r.Modes, func(m ModeResult) bool { return len(m.Lifecycle) > 0 }) {
		notes = append(slices.Clip(notes), lifecycleNote)
	}
	if hasDataPath(r) {
		notes = append(slices.Clip(notes), methodNote{"data path", DataPathMethod})
	}
	return notes
}

// faultsTable lists every injected fault per mode, with kube-proxy's
// failure counters; empty when the run injected none.
func faultsTable(r *Result) reportTable {
	t := reportTable{Title: "Faults", Header: []string{"mode", "armed at", "fault", "asked", "injected", "delayed", "kube-proxy failures", "write retries"}}
	for i := range r.Modes {
		m := &r.Modes[i]
		if len(m.Faults) == 0 {
			continue
		}
		kp := kubeProxyFailures(m.KubeProxyTotals)
		for j, f := range m.Faults {
			asked := fmt.Sprint(f.Armed)
			if f.Armed == 0 {
				asked = "-"
			}
			delayed := "-"
			if f.Delayed > 0 || f.Kind == "api" && f.Armed == 0 {
				delayed = fmt.Sprint(f.Delayed)
			}
			injected := fmt.Sprint(f.Injected)
			if len(f.ByVerb) > 0 {
				var by []string
				for _, v := range slices.Sorted(maps.Keys(f.ByVerb)) {
					by = append(by, fmt.Sprintf("%s %d", v, f.ByVerb[v]))
				}
				injected += " (" + strings.Join(by, ", ") + ")"
			}
			row := []string{m.Name, f.Where, f.Kind + " " + f.Target, asked, injected, delayed, "", ""}
			if j == 0 {
				row[6], row[7] = kp, fmt.Sprint(m.WriteRetries)
			}
			t.Rows = append(t.Rows, row)
		}
	}
	return t
}

func kubeProxyFailures(t Totals) string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{t.RestoreFailures, "iptables-restore"},
		{t.PartialRestoreFailures, "partial syncs"},
		{t.NFTablesSyncFailures, "nft syncs"},
		{t.NFTablesCleanupFailures, "nft cleanups"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
