package node

import (
	"testing"
	"time"
)

// The scenario's churn and probe steps are not a repeat's: it runs the
// first sync alone.
const repeatScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: repeat}
spec:
  modes:
    - {mode: iptables, backend: legacy}
  serviceGroups:
    - {name: web, count: 30, endpoints: 3}
  steps:
    - {name: initial, sync: {}}
    - {name: flaps, churn: {action: flap, group: web, count: 5}}
    - {name: probe, probe: {group: web, services: 2, connections: 30}}
`

// TestPrivilegedRepeatFirstSync: a repeat node (kpsim run --twin-repeats)
// times one first sync of a fresh proxier, with its time in timed calls by
// part, after calibrating, and neither starts fake pods nor runs the other
// steps.
func TestPrivilegedRepeatFirstSync(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore")
	mr := runTestNode(t, Input{ScenarioFile: "repeat.yaml", ScenarioYAML: []byte(repeatScenario), Mode: "iptables-legacy", Repeat: true}, 2*time.Minute)
	if len(mr.Syncs) == 0 || !mr.Syncs[0].Succeeded || !mr.Syncs[0].Full || mr.Syncs[0].Seconds <= 0 {
		t.Fatalf("syncs %+v: want a first sync that succeeded, full", mr.Syncs)
	}
	if mr.Syncs[0].Kernel["iptables-restore"] <= 0 {
		t.Errorf("first sync's parts %v: want its iptables-restore time", mr.Syncs[0].Kernel)
	}
	if len(mr.Steps) != 0 || len(mr.Probes) != 0 || mr.Resources.Harness.DataplaneCPUSeconds != 0 {
		t.Errorf("a repeat ran steps or started fake pods: %d steps, %d probes, dataplane CPU %v",
			len(mr.Steps), len(mr.Probes), mr.Resources.Harness.DataplaneCPUSeconds)
	}
	// Its own unit costs, taken just before its first sync.
	if c := mr.Calibration; c == nil || c.Kinds["cpu"].Median <= 0 || c.Kinds["iptables-restore"].Median <= 0 {
		t.Errorf("calibration %+v: want the CPU and table-restore unit costs", c)
	}
	if mr.Resources.CPUSeconds <= 0 {
		t.Errorf("kube-proxy's CPU time %v: want it measured", mr.Resources.CPUSeconds)
	}
}
