package reports

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kpsim/kpsim/scenarios"
)

// lifecycleWatch is a watch of n buckets of 0.5 s at 20/s, with the
// phases and marks given; the bucket at empty sends nothing.
func lifecycleWatch(t0 time.Time, empty int, phases []WatchPhase, marks ...WatchMark) *Watch {
	w := &Watch{Start: t0, End: t0.Add(6 * time.Second), Services: []string{"default/svc-1", "default/svc-2"}, Rate: 20,
		BucketSeconds: 0.5, Phases: phases, Marks: marks}
	for _, p := range phases {
		w.Sent += p.Sent
		w.OK += p.OK
		w.Stale += p.Stale
		w.Failed += p.Failed
	}
	for i := range 12 {
		b := WatchBucket{Sent: 10, OK: 10}
		switch {
		case i == empty:
			b = WatchBucket{}
		case i >= 4 && i < 7:
			b = WatchBucket{Sent: 10, OK: 2, Stale: 3, Failed: 5}
		}
		w.Buckets = append(w.Buckets, b)
	}
	return w
}

// lifecycleFixture is a run with every kind of lifecycle step: iptables
// restarted (killed during a sync), tampered (repaired, then not),
// migrated to nftables with leftovers and cleaned up; nftables whose
// restart failed and whose cleanup left a table; ipvs without any.
func lifecycleFixture() *Result {
	t0 := time.Unix(1000, 0)
	restart := lifecycleWatch(t0, 5, []WatchPhase{
		{Name: "before", Seconds: 2, Sent: 40, OK: 40},
		{Name: "down", Seconds: 1.5, Sent: 30, OK: 2, Stale: 3, Failed: 25},
		{Name: "starting", Seconds: 0.62, Sent: 12, OK: 7, Failed: 5},
		{Name: "after", Seconds: 1, Sent: 20, OK: 20},
	}, WatchMark{"stop", 2}, WatchMark{"start", 3.5}, WatchMark{"first sync", 3.95}, WatchMark{"programmed", 4.12})
	restart.Failures = map[string]int{"timeout": 28, "refused": 2}
	restart.StaleTo = map[string]int{"default/svc-1 -> 10.244.0.5:8080": 3}
	iptables := ModeResult{Name: "iptables-legacy", Mode: scenarios.ModeIPTables, Backend: "legacy",
		FinalMode: scenarios.ModeNFTables,
		Syncs: []Sync{
			{Seconds: 0.41234, Full: true, Merged: 1, Succeeded: true},
			{Seconds: 0.05, Merged: 1, Succeeded: true},
			{Seconds: 0.3, Full: true, Merged: 1, Succeeded: true, Process: 1},
		},
		Lifecycle: []Lifecycle{
			{Step: "restart-1", Action: "restart", Mode: "iptables (legacy)",
				Stop: &Stop{At: t0.Add(2 * time.Second), Signal: "SIGKILL", WaitedSeconds: 0.8, DelaySeconds: 0.012,
					Programs: []string{"iptables-restore (4242)"}, SyncsBefore: 14},
				Started: t0.Add(3500 * time.Millisecond), DownSeconds: 1.5, MutationsWhileDown: 12,
				FirstSync: &Sync{Seconds: 0.3, Full: true, Merged: 1, Succeeded: true, Process: 1}, FirstSyncEndSeconds: 0.45,
				ProgrammedSeconds: 0.62, GapSeconds: 2.12,
				Startup: &LeftoverCleanup{Modes: []string{"nftables", "ipvs"}, Seconds: 0.12},
				Watch:   restart},
			{Step: "tamper-2", Action: "tamper", Mode: "iptables (legacy)",
				Tamper:   []string{"iptables-legacy -w -t nat -F KUBE-SERVICES"},
				Repaired: true, RepairSeconds: 1.2, RepairTimeoutSeconds: 14, RepairSyncs: 2, RepairFull: 1,
				Watch: lifecycleWatch(t0, -1, []WatchPhase{
					{Name: "before", Seconds: 1, Sent: 20, OK: 20},
					{Name: "tampered", Seconds: 1.2, Sent: 24, OK: 10, Failed: 14},
					{Name: "repaired", Seconds: 1, Sent: 20, OK: 20},
				}, WatchMark{"tamper", 1}, WatchMark{"repaired", 2.2})},
			{Step: "flush-filter", Action: "tamper", Mode: "iptables (legacy)",
				Tamper:               []string{"iptables-legacy -w -t filter -F", "iptables-legacy -w -t filter -X"},
				RepairTimeoutSeconds: 14,
				Unrepaired:           "- :KUBE-FIREWALL - [0:0]\n- -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP"},
			{Step: "migrate-4", Action: "migrate", Mode: "iptables (legacy)", To: "nftables",
				Stop:        &Stop{Signal: "SIGTERM", Graceful: true, SyncsBefore: 3},
				DownSeconds: 0.05, ProgrammedSeconds: 0.9, GapSeconds: 0.95,
				Startup:        &LeftoverCleanup{Modes: []string{"iptables", "ipvs"}, Seconds: 0.2},
				Leftovers:      []string{"iptables-legacy: nat/KUBE-SERVICES", "iptables-legacy: nat/KUBE-SVC-ABC"},
				LeftoverCounts: map[string]int{"iptables-legacy/chains": 2, "iptables-legacy/rules": 7},
				Watch: lifecycleWatch(t0, -1, []WatchPhase{{Name: "before", Seconds: 1, Sent: 20, OK: 20},
					{Name: "down", Seconds: 0.05, Sent: 1, OK: 1}}, WatchMark{"stop", 1})},
			{Step: "cleanup-5", Action: "cleanup", Mode: "nftables",
				Stop:      &Stop{Signal: "SIGTERM", Graceful: true, SyncsBefore: 4},
				Cleanup:   &LeftoverCleanup{Modes: []string{"iptables", "ipvs", "nftables"}, Seconds: 0.3},
				Remaining: map[string]int{"iptables-legacy/chains": 0, "nftables/tables": 0, "link/kube-ipvs0": 0},
				Watch: lifecycleWatch(t0, -1, []WatchPhase{{Name: "before", Seconds: 1, Sent: 20, OK: 20},
					{Name: "cleaned", Seconds: 1, Sent: 20, Failed: 20}}, WatchMark{"stop", 1}, WatchMark{"cleanup", 1.1}, WatchMark{"cleaned", 1.4})},
		}}
	nftables := ModeResult{Name: "nftables", Mode: scenarios.ModeNFTables,
		Syncs: []Sync{{Seconds: 0.2, Full: true, Merged: 1, Succeeded: true}},
		Lifecycle: []Lifecycle{
			{Step: "kill", Action: "restart", Mode: "nftables", Error: "stopping kube-proxy: no such process\nsecond line"},
			{Step: "cleanup-2", Action: "cleanup", Mode: "nftables",
				Cleanup:   &LeftoverCleanup{Modes: []string{"nftables"}, Seconds: 0.1},
				Remaining: map[string]int{"nftables/tables": 1, "ipset/sets": 0},
				Leftovers: []string{"nftables: table ip kube-proxy"},
				Watch: lifecycleWatch(t0, -1, []WatchPhase{{Name: "before", Seconds: 1, Sent: 20, OK: 20},
					{Name: "cleaned", Seconds: 1, Sent: 10, OK: 3, Failed: 7}}, WatchMark{"cleaned", 1})},
		}}
	ipvs := ModeResult{Name: "ipvs", Mode: scenarios.ModeIPVS, Syncs: []Sync{{Seconds: 0.25, Full: true, Merged: 1, Succeeded: true}}}
	return &Result{SchemaVersion: SchemaVersion, RunID: "lifecycle", Modes: []ModeResult{iptables, nftables, ipvs}}
}

// markdownRows maps the first cell of each Markdown table row to its
// cells, within the section titled title.
func markdownRows(t *testing.T, md, title string) map[string][]string {
	t.Helper()
	_, section, ok := strings.Cut(md, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("report.md has no section %q", title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows[cells[0]] = cells
	}
	return rows
}

func TestLifecycleMarkdown(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, lifecycleFixture()); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	rows := markdownRows(t, md, "Lifecycle: iptables-legacy")
	header := rows["step"]
	if len(header) != len(lifecycleHeader) {
		t.Fatalf("header %q, want %d cells", header, len(lifecycleHeader))
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, c := range []struct{ row, column, want string }{
		{"restart-1", "down (API changes)", "1.5s (12)"},
		{"restart-1", "first sync (end)", "300ms (450ms)"},
		{"restart-1", "programmed", "620ms"},
		{"restart-1", "gap", "2.12s"},
		{"restart-1", "probes failed/stale/sent", "30/3/102"},
		{"restart-1", "while down/tampered", "25/3/30"},
		{"restart-1", "result", "SIGKILL during a sync (killed iptables-restore)"},
		// A tamper stops nothing: no down time, first sync or gap, never 0s.
		{"tamper-2", "down (API changes)", "-"},
		{"tamper-2", "first sync (end)", "-"},
		{"tamper-2", "gap", "-"},
		{"tamper-2", "while down/tampered", "14/0/24"},
		{"tamper-2", "result", "iptables-legacy -w -t nat -F KUBE-SERVICES; repaired within 1.2s (2 syncs, 1 full)"},
		{"flush-filter (tamper)", "probes failed/stale/sent", "-"},
		{"flush-filter (tamper)", "result", "iptables-legacy -w -t filter -F (+1 more); not repaired within 14s (no sync seen)"},
		{"migrate-4", "mode", "iptables (legacy) -&gt; nftables"},
		{"migrate-4", "gap", "950ms"},
		{"migrate-4", "result", "startup cleanup (iptables, ipvs) 200ms; left: 2 iptables-legacy/chains, 7 iptables-legacy/rules"},
		{"cleanup-5", "mode", "nftables"},
		{"cleanup-5", "while down/tampered", "-"},
		{"cleanup-5", "result", "--cleanup (iptables, ipvs, nftables) 300ms; clean"},
	} {
		row, ok := rows[c.row]
		if !ok {
			t.Errorf("no row %q in %v", c.row, rows)
			continue
		}
		if got := row[col[c.column]]; got != c.want {
			t.Errorf("%s, %s: %q, want %q", c.row, c.column, got, c.want)
		}
	}
	nft := markdownRows(t, md, "Lifecycle: nftables")
	for row, want := range map[string]string{
		"kill (restart)": "FAILED (see below)",
		"cleanup-2":      "--cleanup (nftables) 100ms; not clean, left: 1 nftables/tables; 3 of 10 connections answered after it",
	} {
		if got := nft[row]; len(got) == 0 || got[len(got)-1] != want {
			t.Errorf("nftables %s: result %q, want %q", row, got, want)
		}
	}
	for _, want := range []string{
		"Cold first sync (the first kube-proxy process's first sync): 412.34ms. kube-proxy ran nftables at the end.",
		"restart-1: kube-proxy was stopped with SIGKILL after 14 syncs, during a sync (kpsim waited 800ms for it to run a program that writes rules, then a random 12ms), killing iptables-restore (4242).",
		"restart-1: the new kube-proxy's startup cleanup ran for (nftables, ipvs) 120ms.",
		"restart-1 probes: 20/s to 2 Services over 6s; by phase (failed/stale/sent): before 0/0/40, down 25/3/30, starting 5/0/12, after 0/0/20; failures: timeout 28, refused 2; stale answers: default/svc-1 -&gt; 10.244.0.5:8080 3.",
		"flush-filter changed kube-proxy's rules: iptables-legacy -w -t filter -F, iptables-legacy -w -t filter -X.",
		"flush-filter: what kube-proxy had not put back at the timeout (- before the tamper, + at the timeout):\n\n```\n- :KUBE-FIREWALL - [0:0]\n- -A KUBE-FORWARD",
		"migrate-4: the old mode's state still in the node: iptables-legacy: nat/KUBE-SERVICES, iptables-legacy: nat/KUBE-SVC-ABC.",
		"cleanup-2: kube-proxy's state left after kube-proxy --cleanup: nftables: table ip kube-proxy.",
		"kill failed: stopping kube-proxy: no such process\n",
		"- **lifecycle**: watch probes: one connection at a time",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(md, "## Lifecycle: ipvs") {
		t.Error("report.md has a lifecycle table for ipvs, which ran no lifecycle step")
	}
	if strings.Contains(md, "second line") {
		t.Error("a step's error is shown beyond its first line")
	}
	// The migrate step's startup cleanup is in its row, not again in a note.
	if strings.Contains(md, "migrate-4: the new kube-proxy's startup cleanup") {
		t.Error("the migration's startup cleanup is noted twice")
	}

	// A run without lifecycle steps has no section and no note.
	buf.Reset()
	r := lifecycleFixture()
	r.Modes = r.Modes[2:]
	if err := WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Lifecycle") || strings.Contains(buf.String(), "**lifecycle**") {
		t.Error("a run without lifecycle steps has a lifecycle section or note")
	}
}

func TestLifecycleSummary(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSummary(&buf, lifecycleFixture()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"Lifecycle: iptables-legacy\nCold first sync", "Lifecycle: nftables\n",
		"not repaired within 14s", "repaired within 1.2s", "nat/KUBE-SVC-ABC", "; clean", "not clean", "1 nftables/tables",
		"kill failed: stopping kube-proxy: no such process", "    - -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
		"lifecycle: watch probes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(out, "Lifecycle: ipvs") {
		t.Error("summary has a lifecycle table for ipvs")
	}
	// The lifecycle tables fit a terminal: no line of theirs is wider
	// than 120 columns.
	_, section, _ := strings.Cut(out, "Lifecycle: iptables-legacy")
	section, _, _ = strings.Cut(section, "How these were obtained")
	tableLines := 0
	for _, l := range strings.Split(section, "\n") {
		if n := len([]rune(l)); n > 120 {
			t.Errorf("line of %d columns: %q", n, l)
		}
		if strings.ContainsAny(l, "│|") {
			tableLines++
		}
	}
	if tableLines < 10 {
		t.Errorf("%d table lines in the lifecycle section, want the rows of both tables:\n%s", tableLines, section)
	}
}

func TestLifecycleHTML(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, lifecycleFixture()); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	// A chart per step with a watch: flush-filter and kill had none.
	for _, title := range []string{"iptables-legacy: restart-1", "iptables-legacy: tamper-2", "iptables-legacy: migrate-4",
		"iptables-legacy: cleanup-5", "nftables: cleanup-2"} {
		if strings.Count(page, "<strong>Lifecycle "+title+".</strong>") != 1 {
			t.Errorf("page lacks the chart of %s", title)
		}
	}
	if got := strings.Count(page, "<strong>Lifecycle "); got != 5 {
		t.Errorf("%d lifecycle charts, want 5", got)
	}
	for _, no := range []string{"<strong>Lifecycle ipvs", "flush-filter.</strong>", "kill.</strong>", "<h2>Lifecycle: ipvs"} {
		if strings.Contains(page, no) {
			t.Errorf("page has %q", no)
		}
	}
	for _, want := range []string{"<h2>Lifecycle: iptables-legacy</h2>", "<p>Cold first sync", "not repaired within 14s",
		"<pre>- :KUBE-FIREWALL"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if got, n := strings.Count(page, "<svg"), strings.Count(page, "<figcaption>"); got != n {
		t.Errorf("%d <svg> elements, %d captions", got, n)
	}

	charts, err := lifecycleCharts(lifecycleFixture())
	if err != nil {
		t.Fatal(err)
	}
	svg := string(charts[0].SVG)
	for _, mark := range []string{"stop", "start", "first sync", "programmed"} {
		if !strings.Contains(svg, ">"+mark+"<") {
			t.Errorf("restart-1's chart lacks the mark %q", mark)
		}
	}
	for _, want := range []string{"stop (kube-proxy stopped)", "programmed (the first sync that covered every API change ended)",
		"In all 102 sent, 69 ok, 3 stale, 30 failed", "20/s", "2 sampled Services"} {
		if !strings.Contains(charts[0].Caption, want) {
			t.Errorf("restart-1's caption lacks %q: %s", want, charts[0].Caption)
		}
	}
}

// An empty bucket is a gap in the lines, not 0% answered.
func TestLifecycleChartGaps(t *testing.T) {
	w := lifecycleWatch(time.Unix(0, 0), 5, nil)
	ok, answered := shareSegments(w)
	if len(ok) != 2 || len(answered) != 2 {
		t.Fatalf("%d and %d segments, want 2 each: bucket 5 sent nothing", len(ok), len(answered))
	}
	if len(ok[0]) != 5 || len(ok[1]) != 6 {
		t.Errorf("segments of %d and %d points, want 5 and 6", len(ok[0]), len(ok[1]))
	}
	for _, seg := range ok {
		for _, p := range seg {
			if p.X == 2.75 {
				t.Errorf("the empty bucket is plotted: %v", p)
			}
		}
	}
	if got := ok[0][4]; got.X != 2.25 || got.Y != 0.2 {
		t.Errorf("bucket 4 (2 ok of 10) at %v, want (2.25, 0.2)", got)
	}
	if got := answered[0][4]; got.Y != 0.5 {
		t.Errorf("bucket 4 (2 ok + 3 stale of 10) answered %v, want 0.5", got.Y)
	}

	// A watch that sent nothing draws no chart.
	empty := &Watch{BucketSeconds: 0.5, Buckets: make([]WatchBucket, 4)}
	c, err := lifecycleChart(&ModeResult{Name: "x"}, &Lifecycle{Step: "s", Watch: empty})
	if err != nil || c != nil {
		t.Errorf("lifecycleChart of an empty watch = %v, %v; want no chart", c, err)
	}
}

// TestLifecycleExpectations: a failed connection while kube-proxy was down
// (after it had synced) or an answer after --cleanup misses; a kill before
// the first sync and findings (leftovers) do not.
func TestLifecycleExpectations(t *testing.T) {
	watch := func(phase string, sent, ok, failed int) *Watch {
		return &Watch{Phases: []WatchPhase{{Name: phase, Sent: sent, OK: ok, Failed: failed}}}
	}
	m := &ModeResult{Name: "iptables-legacy", Lifecycle: []Lifecycle{
		{Step: "kill", Action: "restart", Stop: &Stop{SyncsBefore: 2}, Watch: watch("down", 10, 9, 1)},
		{Step: "early", Action: "restart", Stop: &Stop{SyncsBefore: 0}, Watch: watch("down", 10, 0, 10)},
		{Step: "rebuild", Action: "restart", Stop: &Stop{SyncsBefore: 3}, Watch: watch("down", 10, 10, 0)},
		{Step: "flush", Action: "tamper", Repaired: false, Watch: watch("tampered", 10, 0, 10)},
		{Step: "after-flush", Action: "restart", Stop: &Stop{SyncsBefore: 3}, Watch: watch("down", 10, 0, 10)},
		{Step: "cleanup", Action: "cleanup", Leftovers: []string{"iptables-legacy: filter/KUBE-FIREWALL"}, Watch: watch("cleaned", 20, 1, 19)},
	}}
	got := lifecycleExpectations(m)
	if len(got) != 3 {
		t.Fatalf("%d expectations, want 3 (none for a kill before the first sync, none while an unrepaired tamper broke the rules): %+v", len(got), got)
	}
	for i, want := range []bool{false, true, false} {
		if got[i].Passed != want {
			t.Errorf("%s: passed %v, want %v (%s)", got[i].Name, got[i].Passed, want, got[i].Got)
		}
	}
}

// TestLifecycleRepairedBeforeFirstRead: a tamper kube-proxy had undone by
// the end of kpsim's first read says so, since its time is that read's.
func TestLifecycleRepairedBeforeFirstRead(t *testing.T) {
	lc := &Lifecycle{Step: "delete-virtual-server", Action: "tamper", Tamper: []string{"ipvsadm -D -t 10.96.0.11:80 (netlink)"},
		Repaired: true, RepairSeconds: 2.1, RepairedBeforeFirstRead: true, RepairSyncs: 1, RepairFull: 1}
	want := "ipvsadm -D -t 10.96.0.11:80 (netlink); repaired within 2.1s, before kpsim's first read (1 syncs, 1 full)"
	if got := lifecycleResult(lc); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestLifecycleRepairedBySyncStillRunning: a repair with no sync ended
// by the step's end was made by one still running, not by none.
func TestLifecycleRepairedBySyncStillRunning(t *testing.T) {
	lc := &Lifecycle{Action: "tamper", Tamper: []string{"ipvsadm -D -t 10.96.0.21:80 (netlink)"}, Repaired: true, RepairSeconds: 2.56}
	want := "ipvsadm -D -t 10.96.0.21:80 (netlink); repaired within 2.56s (by a sync that had not ended when the step did)"
	if got := lifecycleResult(lc); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
