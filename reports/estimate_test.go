package reports

import (
	"math"
	"testing"
)

// A VM sync of 10 s: 7 s in ipset program runs (35x slower in the VM), 2 s
// in iptables (20x), 1 s of the proxier's own work (8x): the host
// estimate is 0.2 + 0.1 + 0.125 = 0.425 s.
func TestEstimateNative(t *testing.T) {
	cal := func(ipset, ipt, cpu float64) *Calibration {
		return &Calibration{Kinds: map[string]CalibrationKind{
			"ipset":    {Median: ipset, Min: ipset, Max: ipset},
			"iptables": {Median: ipt, Min: ipt, Max: ipt},
			"cpu":      {Median: cpu, Min: cpu, Max: cpu},
		}}
	}
	host, vm := cal(0.001, 0.002, 0.01), cal(0.035, 0.040, 0.08)
	m := &ModeResult{Syncs: []Sync{{Seconds: 10, Kernel: map[string]float64{"ipset": 7, "iptables": 2}}}}
	e := EstimateNative(m, host, vm)
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
	if e := EstimateNative(m, host, vm); e != nil {
		t.Errorf("estimate without the ipset calibration: %+v", e)
	}
}
