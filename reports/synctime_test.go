package reports

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestSyncSplits: the first sync, later full syncs and partial syncs are
// split apart; parts are means per sync, rest is what the timed parts
// leave, and a merged record counts as its syncs.
func TestSyncSplits(t *testing.T) {
	m := &ModeResult{Name: "nftables", Syncs: []Sync{
		{Seconds: 1.0, Full: true, Merged: 1, Kernel: map[string]float64{"nft-list": 0.5, "nft-transaction": 0.3}},
		{Seconds: 0.2, Full: false, Merged: 1, Kernel: map[string]float64{"nft-transaction": 0.1}},
		{Seconds: 0.4, Full: false, Merged: 2, Kernel: map[string]float64{"nft-transaction": 0.3}},
		{Seconds: 0.8, Full: true, Merged: 1, Kernel: map[string]float64{"nft-list": 0.2, "nft-transaction": 0.4}},
	}}
	got := SyncSplits(m)
	want := []SyncSplit{
		{Class: "first sync", Count: 1, Mean: 1.0, Parts: map[string]float64{"nft-list": 0.5, "nft-transaction": 0.3, PartRest: 0.2}},
		{Class: "full syncs", Count: 1, Mean: 0.8, Parts: map[string]float64{"nft-list": 0.2, "nft-transaction": 0.4, PartRest: 0.2}},
		{Class: "partial syncs", Count: 3, Mean: 0.2, Parts: map[string]float64{"nft-transaction": 0.4 / 3, PartRest: 0.2 / 3}},
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("SyncSplits (-want +got):\n%s", d)
	}
	if s := got[0].Share("nft-list"); math.Abs(s-0.5) > 1e-9 {
		t.Errorf("share of nft-list in the first sync = %v, want 0.5", s)
	}

	// Untimed syncs: no split, and the report says why when it knows.
	untimed := &ModeResult{Name: "nftables", Syncs: []Sync{{Seconds: 1, Full: true, Merged: 1}},
		ProgramTimer: &ProgramTimer{Missing: "no kpsim-exectimer beside kpsim"}}
	if s := SyncSplits(untimed); s != nil {
		t.Errorf("untimed syncs split: %+v", s)
	}
	tbl := syncTimeTable(&Result{Modes: []ModeResult{*m, *untimed}})
	if len(tbl.Rows) != 3 || !strings.Contains(strings.Join(tbl.Notes, "\n"), "no kpsim-exectimer") {
		t.Errorf("table rows %q, notes %q; want 3 rows for the timed mode and a note for the other", tbl.Rows, tbl.Notes)
	}
	if row := tbl.Rows[0]; row[4] != "nft-list 500ms (50%), nft-transaction 300ms (30%)" || row[5] != "200ms (20%)" {
		t.Errorf("first row %q", row)
	}
}

func TestSortedParts(t *testing.T) {
	got := SortedParts(map[string]float64{PartRest: 1, "ipvs": 1, "zz-new": 1, "iptables-restore": 1, "ipset": 1})
	want := []string{"iptables-restore", "ipset", "ipvs", "zz-new", PartRest}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("SortedParts (-want +got):\n%s", d)
	}
}

// TestSweepPartFits: a sweep fits each part of the first sync on its own.
// Here listing grows as services² and the transaction linearly.
func TestSweepPartFits(t *testing.T) {
	var modes []ModeResult
	for _, n := range []int{1000, 2000, 4000} {
		x := float64(n) / 1000
		list, tx, rest := 0.1*x*x, 0.2*x, 0.05
		modes = append(modes, ModeResult{Name: "nftables@" + fmt.Sprint(n), Mode: "nftables",
			Sweep: &SweepRun{Entry: "nftables", Count: n, Services: n},
			Syncs: []Sync{{Seconds: list + tx + rest, Full: true, Merged: 1, Kernel: map[string]float64{"nft-list": list, "nft-transaction": tx}}}})
	}
	sr := NewSweepResult("web", []int{1000, 2000, 4000}, modes, nil)
	sm := &sr.Modes[0]
	for metric, want := range map[string]float64{"firstSync/nft-list": 2, "firstSync/nft-transaction": 1, "firstSync/rest": 0} {
		f := sm.Fit(metric)
		if f == nil || math.Abs(f.Exponent-want) > 1e-9 || f.Points != 3 {
			t.Errorf("fit of %s: %+v, want exponent %v over 3 points", metric, f, want)
		}
	}
	tables := sweepTables(&Result{Sweep: sr})
	if got := fmt.Sprint(tables[1].Rows); !strings.Contains(got, "first sync: nft-list 2.00") {
		t.Errorf("fits table %s: want a row for the first sync's nft-list", got)
	}
}

// TestToolFacts: one header line per kernel, the programs sorted.
func TestToolFacts(t *testing.T) {
	r := &Result{Environment: Environment{KernelRelease: "6.18.44"}, Modes: []ModeResult{
		{Name: "nftables", ToolVersions: map[string]string{"nft": "nftables v1.1.3"}},
		{Name: "iptables-legacy", ToolVersions: map[string]string{"iptables-legacy": "iptables v1.8.11 (legacy)"}},
		{Name: "ipvs", Placement: &Placement{Kernel: "vm", KernelRelease: "6.1.0-41-cloud-amd64"},
			ToolVersions: map[string]string{"ipset": "ipset v7.17", "iptables-legacy": "iptables v1.8.9 (legacy)"}},
		{Name: "skipped", Skipped: "no", ToolVersions: map[string]string{"x": "y"}},
	}}
	want := []fact{
		{"tools (host, kernel 6.18.44)", "iptables-legacy: iptables v1.8.11 (legacy); nft: nftables v1.1.3"},
		{"tools (VM, kernel 6.1.0-41-cloud-amd64)", "ipset: ipset v7.17; iptables-legacy: iptables v1.8.9 (legacy)"},
	}
	if d := cmp.Diff(want, toolFacts(r)); d != "" {
		t.Errorf("toolFacts (-want +got):\n%s", d)
	}
}

// TestListReplayNote: the replay is reported beside the split, with what
// it measured and that kpsim measured it.
func TestListReplayNote(t *testing.T) {
	m := ModeResult{Name: "nftables", Syncs: []Sync{{Seconds: 1, Full: true, Merged: 1, Kernel: map[string]float64{"nft-transaction": 0.5}}},
		ListReplay: &ListReplay{Runs: 3, Chains: 90002, Sets: 2, NetlinkChainsSeconds: 0.25, NetlinkSetsSeconds: 0.001, NFTListTableSeconds: 40}}
	notes := strings.Join(syncTimeTable(&Result{Modes: []ModeResult{m}}).Notes, "\n")
	for _, want := range []string{"90002 chains", "chains 250ms + sets 1ms", "nft list table as v1.36 did, 40s", "measured beside kube-proxy"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q: want %q", notes, want)
		}
	}
}

// TestListReplayFailedNote: a replay that failed says so, and the sweep
// fits leave it out.
func TestListReplayFailedNote(t *testing.T) {
	m := ModeResult{Name: "nftables", Syncs: []Sync{{Seconds: 1, Full: true, Merged: 1, Kernel: map[string]float64{"nft-transaction": 0.5}}},
		ListReplay: &ListReplay{Runs: 3, Error: "listing replay: could not run nftables command: boom"}}
	notes := strings.Join(syncTimeTable(&Result{Modes: []ModeResult{m}}).Notes, "\n")
	if !strings.Contains(notes, "nftables: kpsim's replay of the listing failed: listing replay: could not run nftables command: boom") {
		t.Errorf("notes %q: want the replay's failure", notes)
	}
}

// TestDistributionTable: each probe step's verdicts with their power, low
// power marked and explained.
func TestDistributionTable(t *testing.T) {
	rep := &DistributionReport{Services: []ServiceDistribution{{Verdict: VerdictOK}, {Verdict: VerdictSkewed}, {Verdict: VerdictUntested}},
		Pooled: &PooledDistribution{Verdict: VerdictOK, PValue: 0.25, AdjustedPValue: 0.5}}
	r := &Result{Modes: []ModeResult{
		{Name: "iptables-legacy", Mode: "iptables", Distributions: []StepDistribution{{Step: "probe", Connections: 9000, ServicePower: 0.93, PooledPower: 0.0034, Report: rep}}},
		{Name: "nftables", Mode: "nftables", Distributions: []StepDistribution{{Step: "probe", Connections: 9000, ServicePower: 0.95, PooledPower: 0.91, Report: rep}}},
	}}
	tbl := distributionTable(r)
	want := [][]string{
		{"nftables", "probe", "2 x 9000", "FLAGGED 1 of 2", "0.95", "ok (p 0.25, Bonferroni-adjusted 0.5)", "0.91"},
		{"iptables-legacy", "probe", "2 x 9000", "FLAGGED 1 of 2", "0.93", "ok (p 0.25, Bonferroni-adjusted 0.5)", "0.0034 (low)"},
	}
	if d := cmp.Diff(want, tbl.Rows); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
	if len(tbl.Notes) != 1 {
		t.Errorf("notes %q: want the low-power note", tbl.Notes)
	}
}
