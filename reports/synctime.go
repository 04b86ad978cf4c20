package reports

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Where a sync's time goes: kube-proxy's own sync time split into the
// timed calls it made (Sync.Kernel, by part) and the rest, its own work.

// PartRest names what is left of a sync's time after its timed parts.
const PartRest = "rest"

// partOrder is the order parts are shown in: listing before the
// transaction it feeds, then the other program runs, netlink last.
var partOrder = []string{
	"nft-list", "nft-transaction", "nft",
	"iptables-save", "iptables-restore", "iptables",
	"ipset", "ipvs",
}

// SyncTimeMethod says how a split is obtained.
const SyncTimeMethod = "each sync's duration is kube-proxy's own (its sync histogram's sum); the timed parts are the " +
	"calls that began within the sync's bounds: iptables-save, iptables-restore and the other iptables runs, ipset " +
	"runs and IPVS netlink requests timed around kube-proxy's calls into its interfaces; nft runs timed by " +
	"kpsim-exectimer around the real nft (nft-list: nft list, nft-transaction: nft -f, nft: checks). " +
	"rest = the sync's duration minus its timed parts: kube-proxy's own work, and in nftables mode from v1.37 " +
	"(NFTablesNetlink, on by default) its listing of chains and sets over netlink, which runs inside kube-proxy."

// SyncSplit is where the time of one class of syncs went, as means per
// sync.
type SyncSplit struct {
	// Class is "first sync", "full syncs" (after the first) or "partial
	// syncs".
	Class string
	// Count is how many syncs (a merged record counts as its Merged).
	Count int
	// Mean is the mean sync duration in seconds.
	Mean float64
	// Parts are mean seconds per sync by part, PartRest included.
	Parts map[string]float64
}

// Share is a part's share of the mean sync.
func (s SyncSplit) Share(part string) float64 {
	if s.Mean <= 0 {
		return 0
	}
	return s.Parts[part] / s.Mean
}

// SyncSplits returns m's syncs split by part for the first sync, the
// other full syncs and the partial syncs; nil when none was timed.
func SyncSplits(m *ModeResult) []SyncSplit {
	timed := false
	for _, s := range m.Syncs {
		timed = timed || len(s.Kernel) > 0
	}
	if !timed {
		return nil
	}
	classes := []struct {
		name string
		in   func(i int, s Sync) bool
	}{
		{"first sync", func(i int, _ Sync) bool { return i == 0 }},
		{"full syncs", func(i int, s Sync) bool { return i > 0 && s.Full }},
		{"partial syncs", func(_ int, s Sync) bool { return !s.Full }},
	}
	var out []SyncSplit
	for _, c := range classes {
		sp := SyncSplit{Class: c.name, Parts: map[string]float64{}}
		var total float64
		for i, s := range m.Syncs {
			if !c.in(i, s) {
				continue
			}
			sp.Count += max(s.Merged, 1)
			total += s.Seconds
			rest := s.Seconds
			for part, secs := range s.Kernel {
				sp.Parts[part] += secs
				rest -= secs
			}
			// A sync can only be shorter than its calls through the
			// bounds' slack: never a negative rest.
			sp.Parts[PartRest] += max(rest, 0)
		}
		if sp.Count == 0 {
			continue
		}
		sp.Mean = total / float64(sp.Count)
		for part := range sp.Parts {
			sp.Parts[part] /= float64(sp.Count)
		}
		out = append(out, sp)
	}
	return out
}

// SortedParts returns parts in display order, PartRest last and parts
// kpsim does not know sorted before it.
func SortedParts(parts map[string]float64) []string {
	var out []string
	for _, p := range partOrder {
		if _, ok := parts[p]; ok {
			out = append(out, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		if !slices.Contains(partOrder, p) && p != PartRest {
			out = append(out, p)
		}
	}
	if _, ok := parts[PartRest]; ok {
		out = append(out, PartRest)
	}
	return out
}

// syncTimeTable: one row per mode and class of syncs, with each part's
// mean and share.
func syncTimeTable(r *Result) reportTable {
	t := reportTable{
		Title: "Where sync time goes",
		Lead: "Mean per sync. Timed calls and program runs by part; rest is kube-proxy's own work " +
			"(see How these numbers were obtained).",
		Header: []string{"mode", "syncs", "n", "mean", "timed parts: mean (share)", "rest (share)"},
	}
	for _, m := range measured(r) {
		splits := SyncSplits(m)
		if pt := m.ProgramTimer; len(splits) == 0 && pt != nil && pt.Missing != "" {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: %s.", m.Name, pt.Missing))
		}
		for _, sp := range splits {
			var cells []string
			for _, part := range SortedParts(sp.Parts) {
				if part != PartRest {
					cells = append(cells, fmt.Sprintf("%s %s (%.0f%%)", part, seconds(sp.Parts[part]), 100*sp.Share(part)))
				}
			}
			t.Rows = append(t.Rows, []string{modeLabel(m), sp.Class, fmt.Sprint(sp.Count), seconds(sp.Mean),
				strings.Join(cells, ", "), fmt.Sprintf("%s (%.0f%%)", seconds(sp.Parts[PartRest]), 100*sp.Share(PartRest))})
		}
		if lr := m.ListReplay; lr != nil && lr.Error != "" {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: kpsim's replay of the listing failed: %s", m.Name, firstLine(lr.Error)))
		} else if lr != nil {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: kpsim's replay of the listing on the table at the end (%d chains, %d sets; median of %d, "+
				"measured beside kube-proxy): over netlink as v1.37+ lists each sync, chains %s + sets %s; nft list table as v1.36 did, %s.",
				m.Name, lr.Chains, lr.Sets, lr.Runs, seconds(lr.NetlinkChainsSeconds), seconds(lr.NetlinkSetsSeconds), seconds(lr.NFTListTableSeconds)))
		}
		if pt := m.ProgramTimer; pt != nil && pt.OverheadSeconds > 0 {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: %s ran through kpsim-exectimer, which adds about %s to each run (in rest).",
				m.Name, strings.Join(pt.Programs, ", "), seconds(pt.OverheadSeconds)))
		}
	}
	return t
}
