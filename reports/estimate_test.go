package reports

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func constantCal(ipset, ipt, cpu float64) *Calibration {
	return &Calibration{Kinds: map[string]CalibrationKind{
		"ipset":    {Median: ipset, Min: ipset, Max: ipset},
		"iptables": {Median: ipt, Min: ipt, Max: ipt},
		"cpu":      {Median: cpu, Min: cpu, Max: cpu},
	}}
}

// A VM sync of 10 s: 7 s in ipset program runs (35x slower in the VM), 2 s
// in iptables (20x), 1 s of the proxier's own work (8x): the host
// estimate is 0.2 + 0.1 + 0.125 = 0.425 s.
func TestEstimateNative(t *testing.T) {
	host, vm := constantCal(0.001, 0.002, 0.01), constantCal(0.035, 0.040, 0.08)
	m := &ModeResult{Syncs: []Sync{{Seconds: 10, Kernel: map[string]float64{"ipset": 7, "iptables": 2}}}}
	e := EstimateNative(m, MeasureSlowdowns(nil, nil, host, vm))
	if e == nil {
		t.Fatal("no estimate")
	}
	if got := e.FirstSync[0]; math.Abs(got-0.425) > 1e-9 {
		t.Errorf("first sync estimate %v, want 0.425", got)
	}
	if e.FirstSync[1] != e.FirstSync[0] || e.FirstSync[2] != e.FirstSync[0] {
		t.Errorf("no spread in the calibrations, but range %v", e.FirstSync)
	}
	// A kind the host did not calibrate: no estimate rather than a guess.
	delete(host.Kinds, "ipset")
	if e := EstimateNative(m, MeasureSlowdowns(nil, nil, host, vm)); e != nil {
		t.Errorf("estimate without the ipset calibration: %+v", e)
	}
}

// The twins' first syncs give the CPU slowdown (outside timed calls:
// 0.1 s on the host, 1.4 s in the VM, 14x, against 8x from the
// calibration); the timed calls keep the calibrations' slowdowns, from
// their samples with an interval; the check compares with the host.
func TestEstimateNativeFromTwins(t *testing.T) {
	samples := func(v float64) []float64 {
		var xs []float64
		for i := range 20 {
			xs = append(xs, v*(1+0.03*math.Cos(float64(i))))
		}
		return xs
	}
	host, vm := constantCal(0.001, 0.002, 0.01), constantCal(0.035, 0.040, 0.08)
	for kind, pair := range map[string][2]float64{"ipset": {0.001, 0.035}, "iptables": {0.002, 0.040}} {
		h, v := host.Kinds[kind], vm.Kinds[kind]
		h.Samples, v.Samples = samples(pair[0]), samples(pair[1])
		host.Kinds[kind], vm.Kinds[kind] = h, v
	}
	first := func(secs, restore float64) []Sync {
		return []Sync{{Seconds: secs, Full: true, Succeeded: true, Merged: 1, Kernel: map[string]float64{"iptables-restore": restore}}}
	}
	hostTwin := &ModeResult{Name: "iptables-legacy", Syncs: first(0.6, 0.5)}
	vmTwin := &ModeResult{Name: "iptables-legacy-vm", Syncs: first(11.4, 10)}
	sl := MeasureSlowdowns(hostTwin, vmTwin, host, vm)
	for kind, want := range map[string]float64{"iptables": 20, "cpu": 14, "ipset": 35} {
		f := sl.Factors[kind]
		if math.Abs(f[0]-want)/want > 0.02 {
			t.Errorf("%s slowdown %v, want about %v", kind, f, want)
		}
		if !(f[1] <= f[0] && f[0] <= f[2]) || f[2]/f[1] > 1.3 {
			t.Errorf("%s slowdown interval %v: want it around the estimate and narrow", kind, f)
		}
	}
	if f := sl.Factors["ipset"]; f[1] == f[2] {
		t.Errorf("ipset slowdown %v: samples with spread give an interval", f)
	}
	if f := sl.Factors["iptables"]; !strings.Contains(sl.Sources["iptables"], "iptables program runs in the first sync") || f[1] != f[2] {
		t.Errorf("iptables slowdown %v from %q: want the twins' first syncs, a point value", sl.Factors["iptables"], sl.Sources["iptables"])
	}
	if !strings.Contains(sl.Sources["cpu"], "iptables-legacy-vm in the VM 1.4s") || sl.Twin != [2]string{"iptables-legacy", "iptables-legacy-vm"} {
		t.Errorf("cpu source %q, twin %v: want the twins named", sl.Sources["cpu"], sl.Twin)
	}

	// An IPVS first sync of 100 s: 90 s of ipset (35x), 7 s of IPVS
	// netlink (no calibration here: no estimate), 3 s of its own (14x).
	ipvs := &ModeResult{Name: "ipvs", Syncs: []Sync{{Seconds: 100, Succeeded: true, Kernel: map[string]float64{"ipset": 90, "ipvs": 7}}}}
	if e := EstimateNative(ipvs, sl); e != nil {
		t.Errorf("estimate without an ipvs slowdown: %+v", e)
	}
	sl.Factors["ipvs"] = [3]float64{7, 7, 7}
	e := EstimateNative(ipvs, sl)
	if e == nil {
		t.Fatal("no estimate")
	}
	if want := 90/35.0 + 1 + 3/14.0; math.Abs(e.FirstSync[0]-want)/want > 0.02 {
		t.Errorf("first sync estimate %v, want about %v", e.FirstSync[0], want)
	}
	if Spread(e.FirstSync) <= 0 || Spread(e.FirstSync) > 0.3 {
		t.Errorf("range %v: ±%.0f%%, want some spread within ±30%%", e.FirstSync, 100*Spread(e.FirstSync))
	}

	// The twin checked against the host: 10 s of restore (20x) and 1.4 s
	// of its own (8x by the calibration) is 0.675 s, against 0.6 measured.
	e = EstimateNative(vmTwin, MeasureSlowdowns(nil, nil, host, vm))
	e.CheckAgainst(hostTwin)
	if e.Check == nil || e.Check.Covered {
		t.Errorf("check %+v: the host measured 0.6 s, outside %v", e.Check, e.FirstSync)
	}
	if !strings.Contains(e.String(), "does NOT cover it") {
		t.Errorf("summary %q hides the failed check", e.String())
	}
	hostTwin.Syncs[0].Seconds = e.FirstSync[0]
	e.CheckAgainst(hostTwin)
	if !e.Check.Covered {
		t.Errorf("check %+v: the host value is the estimate itself", e.Check)
	}

	// A twin whose first sync failed gives no CPU slowdown.
	vmTwin.Syncs[0].Succeeded = false
	if sl := MeasureSlowdowns(hostTwin, vmTwin, host, vm); sl.Factors["cpu"][0] != 8 || sl.Twin[0] != "" {
		t.Errorf("with a failed VM first sync: %+v, want the calibration's 8x", sl)
	}
}

// TestWiden: a twin whose calibration-only estimate missed the host's
// first sync by +13% raises the high ends by 13%; a covered twin changes
// nothing.
func TestWiden(t *testing.T) {
	twin := &NativeEstimate{FirstSync: [3]float64{0.573, 0.546, 0.599}, Check: &EstimateCheck{HostEntry: "iptables-legacy", HostFirstSync: 0.573 * 1.13}}
	e := &NativeEstimate{FirstSync: [3]float64{19, 18, 20}, SyncP50: [3]float64{4, 3.9, 4.1}}
	e.Widen(twin, "iptables-legacy-vm")
	if math.Abs(e.FirstSync[2]-20*1.13) > 1e-9 || e.FirstSync[1] != 18 || math.Abs(e.SyncP50[2]-4.1*1.13) > 1e-9 {
		t.Errorf("widened to %v and %v, want the high ends 13%% higher", e.FirstSync, e.SyncP50)
	}
	if e.Widened == nil || !strings.Contains(e.String(), "widened by the calibration's miss on iptables-legacy-vm (+13%)") {
		t.Errorf("summary %q does not say the ranges were widened", e.String())
	}
	twin.Check.HostFirstSync, twin.Check.Covered = 0.55, true
	e2 := &NativeEstimate{FirstSync: [3]float64{19, 18, 20}}
	if e2.Widen(twin, "iptables-legacy-vm"); e2.FirstSync != [3]float64{19, 18, 20} || e2.Widened != nil {
		t.Errorf("a covered twin widened the range to %v", e2.FirstSync)
	}
}

// A calibration kind named after a part (the table restore's
// "iptables-restore") scales that part alone; the part's kind scales the
// other parts of that kind. A twin's iptables slowdown replaces both.
func TestEstimateNativeTableRestore(t *testing.T) {
	host, vm := constantCal(0.001, 0.001, 0.01), constantCal(0.035, 0.014, 0.14)
	host.Kinds["iptables-restore"] = CalibrationKind{Median: 0.03, Min: 0.03, Max: 0.03}
	vm.Kinds["iptables-restore"] = CalibrationKind{Median: 0.33, Min: 0.33, Max: 0.33}
	// 11 s of restore (11x: 1 s on the host), 1.4 s of other iptables runs
	// (14x: 0.1 s), 1.4 s of its own (14x: 0.1 s).
	m := &ModeResult{Name: "iptables-legacy-vm", Syncs: []Sync{{Seconds: 13.8, Succeeded: true, Kernel: map[string]float64{"iptables-restore": 11, "iptables": 1.4}}}}
	e := EstimateNative(m, MeasureSlowdowns(nil, nil, host, vm))
	if e == nil {
		t.Fatal("no estimate")
	}
	if got, want := e.FirstSync[0], 1.2; math.Abs(got-want) > 1e-9 {
		t.Errorf("first sync estimate %v, want %v (restore by the table's 11x, the rest by 14x)", got, want)
	}
	hostTwin := &ModeResult{Name: "iptables-legacy", Syncs: []Sync{{Seconds: 1.5, Succeeded: true, Kernel: map[string]float64{"iptables-restore": 1.24}}}}
	sl := MeasureSlowdowns(hostTwin, m, host, vm)
	if _, ok := sl.Factors["iptables-restore"]; ok {
		t.Errorf("the twins gave the iptables slowdown, but the table restore's calibration still scales a part: %v", sl.Factors)
	}
	if f := sl.Factors["iptables"]; math.Abs(f[0]-12.4/1.24) > 1e-9 {
		t.Errorf("iptables slowdown %v, want the twins' 10x", f)
	}
}

// With repeated first syncs, the estimate is the median of the draws'
// estimates and its range spans them all; the check compares it with the
// median of the host twin's first syncs, so one slow draw on either side
// neither moves the centre nor decides the check.
func TestEstimateNativeRepeats(t *testing.T) {
	// Constant calibrations: iptables 10x slower in the VM, CPU 10x.
	host, vm := constantCal(0.001, 0.001, 0.01), constantCal(0.01, 0.01, 0.1)
	draw := func(secs float64) Sync {
		return Sync{Seconds: secs, Full: true, Succeeded: true, Kernel: map[string]float64{"iptables": secs * 0.8}}
	}
	m := &ModeResult{Name: "iptables-legacy-vm", Syncs: []Sync{draw(8)}, FirstSyncRepeats: []Sync{draw(12), draw(7.6), {Seconds: 1, Succeeded: false}}}
	e := EstimateNative(m, MeasureSlowdowns(nil, nil, host, vm))
	if e == nil {
		t.Fatal("no estimate")
	}
	if want := [3]float64{0.8, 0.76, 1.2}; math.Abs(e.FirstSync[0]-want[0]) > 1e-9 || math.Abs(e.FirstSync[1]-want[1]) > 1e-9 || math.Abs(e.FirstSync[2]-want[2]) > 1e-9 {
		t.Errorf("first sync %v, want %v: the median draw, the range over the succeeded draws", e.FirstSync, want)
	}
	if e.FirstSyncDraws != 3 {
		t.Errorf("draws %d, want 3 (the failed repeat left out)", e.FirstSyncDraws)
	}
	twin := &ModeResult{Name: "iptables-legacy", Syncs: []Sync{{Seconds: 1.3, Succeeded: true}}, FirstSyncRepeats: []Sync{{Seconds: 0.7, Succeeded: true}, {Seconds: 0.82, Succeeded: true}}}
	e.CheckAgainst(twin)
	if c := e.Check; c == nil || c.HostFirstSync != 0.82 || !c.Covered || len(c.HostFirstSyncs) != 3 {
		t.Fatalf("check %+v, want the host's median 0.82 s, covered", e.Check)
	}
	if s := e.String(); !strings.Contains(s, "over 3 first syncs") || !strings.Contains(s, "the median of 3 first syncs, 700ms-1.3s") {
		t.Errorf("summary %q does not say what the range and the check rest on", s)
	}
	// The run's first sync alone: 1.3 s, outside the range.
	twin.FirstSyncRepeats = nil
	if e.CheckAgainst(twin); e.Check.Covered || e.Check.HostFirstSyncs != nil {
		t.Errorf("one host first sync of 1.3 s: check %+v, want not covered", e.Check)
	}
}

// TestPoolCalibrations: the twin check's unit costs over every node's
// calibration: the samples together, their median, the extremes; a kind
// one node lacks keeps the others'. With the host half as fast in one of
// three calibrations, the pooled slowdown moves from 10x toward it, not
// to it.
func TestPoolCalibrations(t *testing.T) {
	cal := func(restore, cpu []float64) *Calibration {
		return &Calibration{Kinds: map[string]CalibrationKind{
			"iptables-restore": {Op: "restore", Runs: len(restore), Median: median(restore), Min: slices.Min(restore), Max: slices.Max(restore), Samples: restore},
			"cpu":              {Op: "cpu", Runs: len(cpu), Median: median(cpu), Min: slices.Min(cpu), Max: slices.Max(cpu), Samples: cpu},
		}}
	}
	fast := cal([]float64{0.030, 0.031, 0.032, 0.030, 0.031}, []float64{0.10, 0.11, 0.10, 0.12, 0.10})
	slow := cal([]float64{0.060, 0.062, 0.061, 0.060, 0.063}, []float64{0.20, 0.21, 0.22, 0.20, 0.20})
	ipset := &Calibration{Kinds: map[string]CalibrationKind{"ipset": {Op: "ipset", Runs: 1, Median: 0.004, Min: 0.004, Max: 0.004}}}
	p := PoolCalibrations(fast, nil, slow, fast, ipset)
	r := p.Kinds["iptables-restore"]
	if r.Runs != 15 || len(r.Samples) != 15 || r.Median != 0.031 || r.Min != 0.030 || r.Max != 0.063 {
		t.Errorf("pooled restore %+v: want 15 runs, median 31ms, 30-63ms", r)
	}
	if k := p.Kinds["ipset"]; k.Median != 0.004 || k.Runs != 1 {
		t.Errorf("pooled ipset %+v: want the one node's", k)
	}
	if PoolCalibrations(nil, nil) != nil {
		t.Error("pooling nothing gave a calibration")
	}
	vm := cal([]float64{0.30, 0.31, 0.32, 0.30, 0.31}, []float64{1.0, 1.1, 1.0, 1.2, 1.0})
	one := MeasureSlowdowns(nil, nil, fast, vm).Factors["iptables-restore"][0]
	pooled := MeasureSlowdowns(nil, nil, PoolCalibrations(fast, slow, fast), PoolCalibrations(vm, vm, vm)).Factors["iptables-restore"][0]
	if !(pooled < one && pooled > one/2) {
		t.Errorf("restore slowdown %.2fx pooled, %.2fx from one fast host calibration: want it lower, above half", pooled, one)
	}
}

// TestNodeSpeeds: with repeats, the check keeps the table restore's
// calibration of each twin node, in order, nil nodes and nodes without
// that kind left out, and says how far it moved; one node a side records
// nothing.
func TestNodeSpeeds(t *testing.T) {
	restore := func(secs float64) *Calibration {
		return &Calibration{Kinds: map[string]CalibrationKind{restoreKind: {Median: secs}}}
	}
	noRestore := constantCal(0.001, 0.001, 0.01)
	c := &EstimateCheck{HostEntry: "iptables-legacy", HostFirstSync: 0.99, Covered: true}
	c.NodeSpeeds([]*Calibration{restore(0.0315), nil, restore(0.0478), restore(0.035)}, []*Calibration{restore(0.41), noRestore, restore(0.355)})
	if !slices.Equal(c.HostRestores, []float64{0.0315, 0.0478, 0.035}) || !slices.Equal(c.VMRestores, []float64{0.41, 0.355}) {
		t.Fatalf("host %v, VM %v: want each node's median in order, the nil and the restore-less node left out", c.HostRestores, c.VMRestores)
	}
	e := &NativeEstimate{FirstSync: [3]float64{0.9, 0.8, 1.1}, Check: c}
	want := "the table restore's calibration from node to node: host 31.5ms-47.8ms (3 nodes, +52%), VM 355ms-410ms (2 nodes, +15%)"
	if s := e.String(); !strings.Contains(s, want) {
		t.Errorf("summary %q\nlacks %q", s, want)
	}

	// A repeat's node that failed on one side leaves it a single node:
	// only the other side is told.
	lopsided := &EstimateCheck{}
	lopsided.NodeSpeeds([]*Calibration{restore(0.03), nil}, []*Calibration{restore(0.4), restore(0.5)})
	if s := (&NativeEstimate{Check: lopsided}).String(); !strings.Contains(s, "node to node: VM 400ms-500ms (2 nodes, +25%)") || strings.Contains(s, "host 30ms") {
		t.Errorf("one host node, two VM nodes: summary %q, want the VM's alone", s)
	}

	single := &EstimateCheck{}
	single.NodeSpeeds([]*Calibration{restore(0.03)}, []*Calibration{restore(0.4)})
	if single.HostRestores != nil || single.VMRestores != nil {
		t.Errorf("one node a side: %+v, want nothing recorded", single)
	}
	if s := (&NativeEstimate{Check: single}).String(); strings.Contains(s, "node to node") {
		t.Errorf("one node a side, yet the summary says %q", s)
	}
}
