package reports

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kpsim/kpsim/scenarios"
)

// lifecycleNote says how the lifecycle tables and charts were obtained.
var lifecycleNote = methodNote{"lifecycle", "watch probes: one connection at a time, at the step's rate, to sampled " +
	"Services' ClusterIPs from the client pod, judged against the API at send time: ok = reached an endpoint the API " +
	"holds and kube-proxy would route to; stale = answered by an endpoint the API no longer holds (removed pods keep " +
	"answering); failed = no answer within 1 s, or refused. Cold first sync and a new process's first sync: kube-proxy's " +
	"own kubeproxy_sync_proxy_rules_duration_seconds histogram (exact). down: from the stop until the new process " +
	"started; first sync end and programmed: wall clock from the new process's start until the end of its first sync, " +
	"and of the first sync that covered every API change (changes made while it was down included), bounded by 5 ms " +
	"polling; gap: from the stop until programmed. repair time: from the tamper until the first poll of the normalized " +
	"rules (normalized as the oracle's dumps, with the chains no packet reaches kept, since canaries are such chains, " +
	"and IPVS real servers draining at weight 0 left out) equal to before the tamper, polled every max(200 ms, 3x read time): " +
	"an upper bound. leftovers and what a cleanup left: kube-proxy's state read with iptables-save (both backends), " +
	"nft list tables, ipset save, /proc/net/ip_vs and the kube-ipvs0 link."}

// lifecycleHeader is the lifecycle tables' header in every format.
var lifecycleHeader = []string{"step", "mode", "down (API changes)", "first sync (end)", "programmed", "gap",
	"probes failed/stale/sent", "while down/tampered", "result"}

// lifecycleTables are one table per mode that ran lifecycle steps: a row
// per step, the mode's cold first sync in the lead, details in notes.
func lifecycleTables(r *Result) []reportTable {
	var out []reportTable
	for i := range r.Modes {
		m := &r.Modes[i]
		if len(m.Lifecycle) == 0 {
			continue
		}
		t := reportTable{Title: "Lifecycle: " + modeLabel(m), Lead: coldLead(m), Header: lifecycleHeader}
		for j := range m.Lifecycle {
			lc := &m.Lifecycle[j]
			t.Rows = append(t.Rows, lifecycleRow(lc))
			t.Notes = append(t.Notes, lifecycleNotes(lc)...)
		}
		out = append(out, t)
	}
	return out
}

// coldLead names the first kube-proxy process's first sync and, after a
// migration, the mode kube-proxy ran last.
func coldLead(m *ModeResult) string {
	lead := "Cold first sync (the first kube-proxy process's first sync): "
	if s := m.ColdFirstSync(); s != nil && s.Seconds > 0 {
		lead += seconds(s.Seconds)
		if !s.Succeeded {
			lead += " (failed)"
		}
		lead += "."
	} else {
		lead += "none recorded."
	}
	if m.FinalMode != "" {
		final := m.FinalMode
		if m.FinalBackend != "" && m.FinalMode != scenarios.ModeNFTables {
			final += " (" + m.FinalBackend + ")"
		}
		lead += " kube-proxy ran " + final + " at the end."
	}
	return lead
}

// stepLabel is the step's name, and its action when the name does not
// begin with it: "restart-1", "kill-mid-sync (restart)".
func stepLabel(lc *Lifecycle) string {
	if lc.Action != "" && !strings.HasPrefix(lc.Step, lc.Action) {
		return lc.Step + " (" + lc.Action + ")"
	}
	return lc.Step
}

func lifecycleRow(lc *Lifecycle) []string {
	mode := lc.Mode
	if lc.To != "" {
		mode += " -> " + lc.To
	}
	down := "-"
	if lc.DownSeconds > 0 {
		down = fmt.Sprintf("%s (%d)", seconds(lc.DownSeconds), lc.MutationsWhileDown)
	}
	first := "-"
	if fs := lc.FirstSync; fs != nil && fs.Seconds > 0 {
		first = seconds(fs.Seconds)
		if lc.FirstSyncEndSeconds > 0 {
			first += " (" + seconds(lc.FirstSyncEndSeconds) + ")"
		}
		if !fs.Succeeded {
			first += " failed"
		}
	}
	phase := "down"
	if lc.Action == "tamper" {
		phase = "tampered"
	}
	all, broken := "-", "-"
	if w := lc.Watch; w != nil {
		all = failedStaleSent(w.Failed, w.Stale, w.Sent)
		if p := w.Phase(phase); p != nil {
			broken = failedStaleSent(p.Failed, p.Stale, p.Sent)
		}
	}
	return []string{stepLabel(lc), mode, down, first, seconds(lc.ProgrammedSeconds), seconds(lc.GapSeconds), all, broken, lifecycleResult(lc)}
}

// failedStaleSent is "failed/stale/sent", or "-" when none was sent.
func failedStaleSent(failed, stale, sent int) string {
	if sent == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", failed, stale, sent)
}

// lifecycleResult is what the step found, in a few words.
func lifecycleResult(lc *Lifecycle) string {
	var parts []string
	if lc.Error != "" {
		parts = append(parts, "FAILED (see below)")
	}
	switch lc.Action {
	case "restart":
		if lc.Stop != nil {
			parts = append(parts, stopCell(lc.Stop))
		}
	case "tamper":
		if len(lc.Tamper) > 0 {
			parts = append(parts, shortCommands(lc.Tamper))
		}
		switch {
		case lc.Repaired && lc.RepairedBeforeFirstRead:
			parts = append(parts, fmt.Sprintf("repaired within %s, before kpsim's first read (%s)", seconds(lc.RepairSeconds), repairSyncs(lc)))
		case lc.Repaired:
			parts = append(parts, fmt.Sprintf("repaired within %s (%s)", seconds(lc.RepairSeconds), repairSyncs(lc)))
		case lc.Error == "" && lc.RepairTimeoutSeconds > 0:
			parts = append(parts, fmt.Sprintf("not repaired within %s (%s)", seconds(lc.RepairTimeoutSeconds), repairSyncs(lc)))
		}
	case "migrate":
		if st := lc.Startup; st != nil {
			parts = append(parts, "startup cleanup "+cleanupCell(st))
		}
		switch {
		case countsText(lc.LeftoverCounts) != "":
			parts = append(parts, "left: "+countsText(lc.LeftoverCounts))
		case lc.Error == "":
			parts = append(parts, "nothing left")
		}
	case "cleanup":
		if c := lc.Cleanup; c != nil {
			parts = append(parts, "--cleanup "+cleanupCell(c))
		}
		switch {
		case countsText(lc.Remaining) != "":
			parts = append(parts, "not clean, left: "+countsText(lc.Remaining))
		case lc.Remaining != nil:
			parts = append(parts, "clean")
		}
		if p := lc.Watch.Phase("cleaned"); p != nil && p.OK+p.Stale > 0 {
			parts = append(parts, fmt.Sprintf("%d of %d connections answered after it", p.OK+p.Stale, p.Sent))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// repairSyncs counts the syncs between a tamper and its repair or timeout.
func repairSyncs(lc *Lifecycle) string {
	switch {
	case lc.RepairSyncs == 0 && lc.Repaired:
		// IPVS mode in a VM: a periodic sync puts a virtual server back
		// seconds before it ends, and the next step may stop it first.
		return "by a sync that had not ended when the step did"
	case lc.RepairSyncs == 0:
		return "no sync seen"
	}
	return fmt.Sprintf("%d syncs, %d full", lc.RepairSyncs, lc.RepairFull)
}

// stopCell is how kube-proxy was stopped, in a few words.
func stopCell(s *Stop) string {
	c := s.Signal
	if s.WaitedSeconds > 0 || s.DelaySeconds > 0 {
		c += " during a sync"
	}
	if len(s.Programs) > 0 {
		var names []string
		for _, p := range s.Programs {
			name, _, _ := strings.Cut(p, " (")
			names = append(names, name)
		}
		c += " (killed " + strings.Join(names, ", ") + ")"
	}
	return c
}

// cleanupCell is a cleanup's modes and duration: "(iptables, ipvs) 120ms".
func cleanupCell(c *LeftoverCleanup) string {
	modes := "no mode"
	if len(c.Modes) > 0 {
		modes = strings.Join(c.Modes, ", ")
	}
	s := "(" + modes + ")"
	if c.Seconds > 0 {
		s += " " + seconds(c.Seconds)
	}
	if c.Failed {
		s += ", failed"
	}
	return s
}

// countsText lists the non-zero counts by key: "12 iptables-legacy/chains,
// 30 iptables-legacy/rules"; "" when all are zero.
func countsText(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if counts[k] != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// maxCommandCell bounds the tamper command shown in a table cell.
const maxCommandCell = 48

// shortCommands is the first command, cut to maxCommandCell runes, and
// how many followed.
func shortCommands(cmds []string) string {
	s := cmds[0]
	if utf8.RuneCountInString(s) > maxCommandCell {
		s = string([]rune(s)[:maxCommandCell-3]) + "..."
	}
	if len(cmds) > 1 {
		s += fmt.Sprintf(" (+%d more)", len(cmds)-1)
	}
	return s
}

// maxNoteNames bounds the commands and names a note lists.
const maxNoteNames = 10

// lifecycleNotes say what a step's row leaves out: its error, how
// kube-proxy was stopped, the startup cleanup, what was left and where,
// the tamper's commands and what it left unrepaired, and the probes by
// phase.
func lifecycleNotes(lc *Lifecycle) []string {
	var out []string
	if lc.Error != "" {
		out = append(out, fmt.Sprintf("%s failed: %s", lc.Step, firstLine(lc.Error)))
	}
	if s := lc.Stop; s != nil {
		syncs := "syncs"
		if s.SyncsBefore == 1 {
			syncs = "sync"
		}
		n := fmt.Sprintf("%s: kube-proxy was stopped with %s after %d %s", lc.Step, s.Signal, s.SyncsBefore, syncs)
		if s.WaitedSeconds > 0 || s.DelaySeconds > 0 {
			n += fmt.Sprintf(", during a sync (kpsim waited %s for it to run a program that writes rules, then a random %s)",
				seconds(s.WaitedSeconds), seconds(s.DelaySeconds))
		}
		if len(s.Programs) > 0 {
			n += ", killing " + strings.Join(s.Programs, ", ")
		}
		out = append(out, n+".")
	}
	if st := lc.Startup; st != nil && (lc.Action != "migrate" || st.Skipped != "" || st.Failed) {
		n := fmt.Sprintf("%s: the new kube-proxy's startup cleanup ran for %s", lc.Step, cleanupCell(st))
		if st.Failed {
			n += " and reported an error (kube-proxy logs it and goes on)"
		}
		if st.Skipped != "" {
			n += "; kpsim did not run: " + st.Skipped
		}
		out = append(out, n+".")
	}
	if len(lc.Leftovers) > 0 {
		what := "the old mode's state still in the node"
		if lc.Action == "cleanup" {
			what = "kube-proxy's state left after kube-proxy --cleanup"
		}
		out = append(out, fmt.Sprintf("%s: %s: %s.", lc.Step, what, listSome(lc.Leftovers)))
	}
	if len(lc.Tamper) > 0 && (len(lc.Tamper) > 1 || shortCommands(lc.Tamper) != lc.Tamper[0] || lc.TamperTarget != "") {
		n := lc.Step + " changed kube-proxy's rules"
		if lc.TamperTarget != "" {
			n += " (Service " + lc.TamperTarget + ")"
		}
		out = append(out, n+": "+listSome(lc.Tamper)+".")
	}
	if lc.Unrepaired != "" {
		out = append(out, fmt.Sprintf("%s: what kube-proxy had not put back at the timeout (- before the tamper, + at the timeout):\n%s",
			lc.Step, strings.TrimRight(lc.Unrepaired, "\n")))
	}
	if w := lc.Watch; w != nil && w.Sent > 0 {
		n := fmt.Sprintf("%s probes: %g/s to %d Services over %s", lc.Step, w.Rate, len(w.Services), seconds(w.End.Sub(w.Start).Seconds()))
		var phases []string
		for _, p := range w.Phases {
			if p.Sent > 0 {
				phases = append(phases, fmt.Sprintf("%s %d/%d/%d", p.Name, p.Failed, p.Stale, p.Sent))
			}
		}
		if len(phases) > 0 {
			n += "; by phase (failed/stale/sent): " + strings.Join(phases, ", ")
		}
		if len(w.Failures) > 0 {
			n += "; failures: " + kindCounts(w.Failures, maxNoteNames)
		}
		if len(w.StaleTo) > 0 {
			n += "; stale answers: " + kindCounts(w.StaleTo, 3)
		}
		out = append(out, n+".")
	}
	return out
}

// listSome joins up to maxNoteNames names and says how many more there
// are.
func listSome(names []string) string {
	if len(names) <= maxNoteNames {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:maxNoteNames], ", ") + fmt.Sprintf(" and %d more", len(names)-maxNoteNames)
}

// kindCounts lists up to n counts, largest first: "timeout 38, refused 2".
func kindCounts(counts map[string]int, n int) string {
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for i, k := range keys {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(keys)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// lifecycleTermWidths are the widths the lifecycle table's columns are
// wrapped to in the terminal, result excepted: it is printed below the
// table, so the table fits 120 columns.
var lifecycleTermWidths = []int{16, 17, 10, 10, 10, 8, 17, 13}

// writeLifecycleSummary prints the lifecycle tables in the terminal
// summary: each step's result goes below its table, and the other cells
// wrap, so a table fits a terminal of 120 columns.
func writeLifecycleSummary(w io.Writer, r *Result) error {
	for _, lt := range lifecycleTables(r) {
		fmt.Fprintf(w, "\n%s\n%s\n", lt.Title, wrap(lt.Lead, 108, "  "))
		cut := len(lt.Header) - 1
		wrapRow := func(row []string) []string {
			out := make([]string, cut)
			for i := range out {
				out[i] = wrap(row[i], lifecycleTermWidths[i], "")
			}
			return out
		}
		t := newTable(w)
		t.Header(wrapRow(lt.Header))
		for _, row := range lt.Rows {
			_ = t.Append(wrapRow(row))
		}
		if err := t.Render(); err != nil {
			return err
		}
		for i, row := range lt.Rows {
			if res := row[cut]; res != "-" {
				fmt.Fprintln(w, wrap(lt.Rows[i][0]+" result: "+res, 108, "  "))
			}
		}
		for _, n := range lt.Notes {
			head, rest, multi := strings.Cut(n, "\n")
			fmt.Fprintln(w, wrap(head, 108, "  "))
			if multi {
				for _, l := range strings.Split(rest, "\n") {
					fmt.Fprintln(w, "    "+l)
				}
			}
		}
	}
	return nil
}
