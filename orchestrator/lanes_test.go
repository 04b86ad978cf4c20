package orchestrator

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// TestLaneEntries: each entry's time beside the other lane is its overlap
// with every entry of that lane; entries that did not run are left out.
func TestLaneEntries(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	modes := []scenarios.ModeSpec{{Name: "nftables"}, {Name: "iptables-legacy"}, {Name: "ipvs"}, {Name: "iptables-legacy-vm"}, {Name: "never"}}
	windows := [][2]time.Time{{at(0), at(60)}, {at(60), at(100)}, {at(10), at(300)}, {at(300), at(400)}, {}}
	host := laneEntries(modes, []int{0, 1, 4}, []int{2, 3}, windows)
	vm := laneEntries(modes, []int{2, 3}, []int{0, 1, 4}, windows)
	want := map[string]float64{"nftables": 50, "iptables-legacy": 40, "ipvs": 90, "iptables-legacy-vm": 0}
	if len(host) != 2 || len(vm) != 2 {
		t.Fatalf("host lane %v, VM lane %v: want 2 entries each", host, vm)
	}
	for _, e := range append(host, vm...) {
		if e.Beside != want[e.Name] {
			t.Errorf("%s beside the other lane %vs, want %vs", e.Name, e.Beside, want[e.Name])
		}
	}
}

// TestMeasureLaneCost: host entries that calibrated while the VM lane ran
// are pooled against the calibration alone, one that calibrated after it
// is not, and a different operation (iptables-nft's restores) is left out;
// on the VM side, the entry that calibrated beside the host lane is
// compared with the one that calibrated after it.
func TestMeasureLaneCost(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cal := func(taken int, cpu float64, iptablesOp string) *reports.Calibration {
		samples := func(v float64) []float64 {
			var xs []float64
			for i := range 20 {
				xs = append(xs, v*(1+0.02*math.Sin(float64(i))))
			}
			return xs
		}
		return &reports.Calibration{Taken: at(taken), Kinds: map[string]reports.CalibrationKind{
			"cpu":      {Op: "work", Median: cpu, Min: cpu, Max: cpu, Samples: samples(cpu)},
			"iptables": {Op: iptablesOp, Median: 0.001, Min: 0.001, Max: 0.001, Samples: samples(0.001)},
		}}
	}
	res := &reports.Result{
		HostCalibration: cal(400, 0.010, "legacy"),
		Modes: []reports.ModeResult{
			{Name: "nftables", Calibration: cal(5, 0.015, "legacy")},
			{Name: "iptables-nft", Calibration: cal(125, 0.050, "nft")},
			{Name: "iptables-legacy-vm", Calibration: cal(10, 0.260, "legacy")},
			{Name: "ipvs", Calibration: cal(310, 0.200, "legacy")},
		},
		Lanes: &reports.Lanes{
			Host: []reports.LaneEntry{{Name: "nftables", Started: at(0), Finished: at(60)}, {Name: "iptables-nft", Started: at(120), Finished: at(200)}},
			VM:   []reports.LaneEntry{{Name: "iptables-legacy-vm", Started: at(0), Finished: at(100)}, {Name: "ipvs", Started: at(300), Finished: at(500)}},
		},
	}
	measureLaneCost(res)
	l := res.Lanes
	for _, c := range []struct {
		name string
		cost map[string]reports.RatioShift
		want float64
	}{{"host", l.HostCost, 1.5}, {"VM", l.VMCost, 1.3}} {
		r, ok := c.cost["cpu"]
		if !ok {
			t.Errorf("%s: no cpu cost measured", c.name)
			continue
		}
		if math.Abs(r.Ratio-c.want) > 0.05 || !(r.Low <= r.Ratio && r.Ratio <= r.High) {
			t.Errorf("%s cpu cost %+v, want a ratio of about %v within its interval", c.name, r, c.want)
		}
	}
	if r := l.HostCost["iptables"]; math.Abs(r.Ratio-1) > 0.01 {
		t.Errorf("host iptables cost %+v: only the legacy restores compare, and they cost the same", r)
	}
	if len(l.HostCostEntries) != 1 || l.HostCostEntries[0] != "nftables" {
		t.Errorf("host entries pooled %v, want [nftables]", l.HostCostEntries)
	}
	if fmt.Sprint(l.VMCostEntries) != "[[iptables-legacy-vm] [ipvs]]" {
		t.Errorf("VM entries compared %v", l.VMCostEntries)
	}
}

// TestHasHostTwin: the VM's iptables entry (legacy by default) has a twin
// in the host's iptables-legacy, IPVS has none, iptables-nft in the VM
// none either.
func TestHasHostTwin(t *testing.T) {
	modes := []scenarios.ModeSpec{
		{Name: "nftables", Mode: "nftables"},
		{Name: "iptables-legacy", Mode: "iptables", Backend: "legacy"},
		{Name: "iptables-vm", Mode: "iptables"},
		{Name: "iptables-nft-vm", Mode: "iptables", Backend: "nft"},
		{Name: "ipvs", Mode: "ipvs"},
	}
	placement := map[string]string{"nftables": "host", "iptables-legacy": "host", "iptables-vm": "vm", "iptables-nft-vm": "vm", "ipvs": "vm"}
	for i, want := range []bool{true, true, true, false, false} {
		if got := hasHostTwin(modes, placement, modes[i]); got != want {
			t.Errorf("%s: has a host twin %v, want %v", modes[i].Name, got, want)
		}
	}
}
