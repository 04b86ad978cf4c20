package reports

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
)

// kind is a DataPathKind of n connections in secs, with kernel and idle
// ticks on the pinned CPU and proc seconds of the dataplane process.
func kind(n int, secs float64, kernel, user, idle uint64, proc float64) DataPathKind {
	return DataPathKind{Sent: n, OK: n, Seconds: secs, CPU: CPUTicks{System: kernel / 2, SoftIRQ: kernel - kernel/2, User: user, Idle: idle},
		ProcessSeconds: proc, ProcessSystemSeconds: proc * 0.8, Windows: 1}
}

func TestNewDataPathFigures(t *testing.T) {
	// Two rounds of 10,000 connections per kind. Round 1: service 2 s,
	// 150 kernel ticks (1.5 s); direct 1.6 s, 120 ticks. Round 2:
	// service 2 s, 170 ticks; direct 1.6 s, 130 ticks.
	r1 := DataPathRound{Service: kind(10000, 2, 150, 40, 10, 1.9), Direct: kind(10000, 1.6, 120, 30, 10, 1.5)}
	r2 := DataPathRound{Service: kind(10000, 2, 170, 30, 0, 2.1), Direct: kind(10000, 1.6, 130, 30, 0, 1.7)}
	dp := &DataPath{ByRound: []DataPathRound{r1, r2}, ChainRules: 1001,
		Services: []DataPathService{{Position: 100, Stray: 1}, {Position: 301}, {}}}
	// Three Services at 100, 300 and 500, 2 ns per rule over 100 µs, the
	// middle one 1 µs high: slope 2 ns, se 1e-3/sqrt(80000)/... below.
	for i, p := range []int{100, 300, 500} {
		us := 100 + 0.002*float64(p)
		if i == 1 {
			us++
		}
		sv := DataPathService{Position: p, Service: DataPathKind{Sent: 1000, ProcessSystemSeconds: us * 1e-3}}
		if i < 2 {
			dp.Services[i].Position, dp.Services[i].Service = sv.Position, sv.Service
		} else {
			dp.Services[2] = sv
		}
	}
	for _, r := range dp.ByRound {
		dp.Service.Add(r.Service)
		dp.Direct.Add(r.Direct)
	}
	dp.Direct.OK -= 3
	dp.Direct.Failures = map[string]int{"timeout": 3}
	f := NewDataPathFigures(dp)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %.12g, want %.12g", name, got, want)
		}
	}
	near("ServiceRate", f.ServiceRate, 5000)
	near("DirectRate", f.DirectRate, 6250)
	near("RateRatio", f.RateRatio, 0.8)
	near("RateRatioSE", f.RateRatioSE, 0) // both rounds 0.8
	// 320 ticks = 3.2 s over 20,000 connections: 160 µs; direct 2.5 s: 125.
	near("ServiceKernelMicros", f.ServiceKernelMicros, 160)
	near("DirectKernelMicros", f.DirectKernelMicros, 125)
	near("KernelDeltaMicros", f.KernelDeltaMicros, 35)
	// Round deltas 30 and 40 µs: sd 7.071, se 5.
	near("KernelDeltaSE", f.KernelDeltaSE, 5)
	near("ServiceProcessMicros", f.ServiceProcessMicros, 200)
	near("DirectProcessMicros", f.DirectProcessMicros, 160)
	near("ProcessDeltaSE", f.ProcessDeltaSE, 0)
	// System time 80% of it: 160 and 128 µs, 32 in both rounds.
	near("ServiceOwnKernelMicros", f.ServiceOwnKernelMicros, 160)
	near("DirectOwnKernelMicros", f.DirectOwnKernelMicros, 128)
	near("OwnKernelDeltaMicros", f.OwnKernelDeltaMicros, 32)
	near("OwnKernelDeltaSE", f.OwnKernelDeltaSE, 0)
	// Per CPU-second: 160/200; rounds 150/190 and 170/210.
	near("CPURateRatio", f.CPURateRatio, 0.8)
	near("CPURateRatioSE", f.CPURateRatioSE, (170.0/210-150.0/190)/2)
	// One tick (10 ms) per window, two windows, 20,000 connections.
	near("KernelResolutionMicros", f.KernelResolutionMicros, 1)
	// Ticks: service 320+70+10 idle, direct 250+60+10 idle: 700/720 busy.
	near("Busy", f.Busy, 700.0/720)
	// 7.2 s of dataplane CPU over 7.0 s busy: the sampled ticks can
	// undercount; a share near 1.
	near("DataplaneShare", f.DataplaneShare, 7.2/7.0)
	near("MeanPosition", f.MeanPosition, 300)
	// Residuals -1/3, 2/3, -1/3: SSR 2/3 over 1 degree of freedom, Sxx
	// 80,000: se sqrt(2/3/80000) µs per rule.
	near("NanosPerRule", f.NanosPerRule, 2)
	near("NanosPerRuleSE", f.NanosPerRuleSE, math.Sqrt(2.0/3/80000)*1e3)
	if f.Connections != 20000 || f.Failed != 3 || f.Stray != 1 || f.ChainRules != 1001 {
		t.Errorf("connections %d, failed %d, stray %d, chain rules %d; want 20000, 3, 1, 1001", f.Connections, f.Failed, f.Stray, f.ChainRules)
	}
	if z := NewDataPathFigures(&DataPath{}); z.RateRatio != 0 || z.KernelDeltaSE != 0 || z.Busy != 0 {
		t.Errorf("empty: %+v, want zeros (no division by zero)", z)
	}
}

// dataPathResult is a run of a datapath sweep: iptables-legacy and
// nftables on the host at 100 and 10,000 Services, ipvs in a VM at 100
// (1,000 skipped), built as kpsim run builds it (NewSweepResult).
func dataPathResult() *Result {
	fig := func(svc, dir float64) DataPathFigures {
		return DataPathFigures{Connections: 60000, ServiceRate: 1e6 / (svc + 40), DirectRate: 1e6 / (dir + 40),
			RateRatio: (dir + 40) / (svc + 40), RateRatioSE: 0.01, ServiceKernelMicros: svc, DirectKernelMicros: dir,
			KernelDeltaMicros: svc - dir, KernelDeltaSE: 2, Busy: 0.99, KernelResolutionMicros: 0.08,
			ServiceOwnKernelMicros: svc, DirectOwnKernelMicros: dir, CPURateRatio: (dir + 40) / (svc + 40)}
	}
	ipt10k := fig(200, 225)
	ipt10k.ChainRules, ipt10k.MeanPosition = 10001, 4870
	run := func(entry, mode string, count int, f DataPathFigures, vm bool) ModeResult {
		m := ModeResult{Name: entry + "@" + strconv.Itoa(count), Mode: mode,
			Sweep:     &SweepRun{Entry: entry, Group: "svc", Count: count, Services: count, Endpoints: 10 * count},
			DataPaths: []DataPath{{Step: "datapath", Figures: f}}}
		if vm {
			m.Placement = &Placement{Kernel: "vm"}
		}
		return m
	}
	modes := []ModeResult{
		run("iptables-legacy", "iptables", 100, fig(170, 160), false),
		run("iptables-legacy", "iptables", 10000, ipt10k, false),
		run("nftables", "nftables", 100, fig(175, 160), false),
		run("nftables", "nftables", 10000, fig(176, 161), false),
		run("ipvs", "ipvs", 100, fig(2000, 1900), true),
		{Name: "ipvs@10000", Mode: "ipvs", Skipped: "above maxCount", Sweep: &SweepRun{Entry: "ipvs", Group: "svc", Count: 10000}},
	}
	return &Result{
		RunID:    "kpsim-test",
		Scenario: ScenarioInfo{Name: "datapath"},
		Modes:    modes,
		Sweep:    NewSweepResult("svc", []int{100, 10000}, modes, map[string]int{"ipvs": 1000}),
	}
}

func TestDataPathSweepReport(t *testing.T) {
	r := dataPathResult()
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Sweep: data path by size of group svc: connection rates, through the Service and straight to a pod",
		"## Sweep: data path by size of group svc: CPU per new connection",
		"| iptables-legacy | 10000    | host  | 60000",
		"| iptables-legacy | 10000    | host  | 200.0 / 225.0",
		"1.104 ± 0.010", // (225+40)/(200+40) at 10,000: the Service is cheaper than direct
		"-25.0 ± 2.0",
		"4870 / 10001",
		"| ipvs            | 100      | vm",
		"Rows that ran in a VM",
		"**data path**: per datapath step",
		"data path: dataplane's kernel CPU per connection, via Service",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	sm := r.Sweep.Modes[0]
	if f := sm.Fit(SweepDataPathDirectKernel); f == nil || f.Points != 2 || f.Exponent <= 0 {
		t.Errorf("iptables-legacy's direct kernel CPU per connection: fit %+v, want a positive exponent over 2 points", f)
	}
	charts, err := dataPathCharts(r)
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, c := range charts {
		titles = append(titles, c.Title)
		if !bytes.Contains(c.SVG, []byte("<svg")) {
			t.Errorf("%s: no SVG", c.Title)
		}
	}
	want := []string{
		"Data path: connection rate through the Service / direct, vs Services",
		"Data path: kernel CPU per new connection vs Services, host",
		"Data path: kernel CPU per new connection vs Services, in a VM",
	}
	if strings.Join(titles, "\n") != strings.Join(want, "\n") {
		t.Errorf("charts %q, want %q", titles, want)
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "nftables via Service") || !strings.Contains(html.String(), "ipvs per CPU-second [VM]") {
		t.Error("report.html lacks the data-path charts' legends")
	}
}

// TestDataPathRunTable: without a sweep, one row per mode and datapath
// step; without a datapath step, no table, chart or note.
func TestDataPathRunTable(t *testing.T) {
	dp := dataPathResult().Modes[1].DataPaths[0]
	r := &Result{RunID: "kpsim-test", Modes: []ModeResult{
		{Name: "iptables-legacy", Mode: "iptables", DataPaths: []DataPath{dp}},
		{Name: "nftables", Mode: "nftables"},
	}}
	tables := dataPathTables(r)
	if len(tables) != 2 {
		t.Fatalf("%d tables, want rates and CPU", len(tables))
	}
	for _, tb := range tables {
		if len(tb.Rows) != 1 || tb.Rows[0][0] != "iptables-legacy" || tb.Rows[0][1] != "datapath" || tb.Rows[0][2] != "host" {
			t.Errorf("%s: rows %q: want iptables-legacy's datapath row", tb.Title, tb.Rows)
		}
	}
	r.Modes[0].DataPaths = nil
	if tables := dataPathTables(r); len(tables) != 0 {
		t.Errorf("no datapath step: %d tables", len(tables))
	}
	for _, n := range notesFor(r) {
		if n.What == "data path" {
			t.Error("no datapath step: the method note is there")
		}
	}
}

func TestLinearTicks(t *testing.T) {
	var labels []string
	for _, tk := range (linearTicks{}).Ticks(0, 312.5) {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, " "); got != "0 100 200 300" {
		t.Errorf("ticks over [0, 312.5]: %s", got)
	}
	labels = nil
	for _, tk := range (linearTicks{}).Ticks(0, 1.375) {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, " "); got != "0 0.5 1" {
		t.Errorf("ticks over [0, 1.375]: %s", got)
	}
}
