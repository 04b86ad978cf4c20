package node

import (
	"testing"
	"time"
)

// A long syncPeriod: no periodic sync comes to the rescue of a sync step
// that stopped waiting too early.
const handledScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: handled}
spec:
  modes:
    - {mode: iptables, backend: legacy}
  proxy: {minSyncPeriod: 100ms, syncPeriod: 1m}
  serviceGroups:
    - {name: web, count: 3, endpoints: 4}
  steps:
    - {name: initial, sync: {}}
    - {name: flaps, churn: {action: flap, group: web, rate: 50, count: 20}}
    - {name: synced, sync: {}}
    - {name: probe, probe: {group: web, services: 3, connections: 60}}
`

// TestPrivilegedSyncAfterHandled: with every watch event reaching
// kube-proxy's informers 100 ms after it was handed over (a loaded
// machine, exaggerated), a sync step still waits for a sync that has the
// last flap, so the probe after it meets only ready endpoints. Waiting
// for handed events alone failed this every time: kube-proxy's first
// handlers queued syncs that began before the last flaps were handled
// (a CI run's faults.yaml, once).
func TestPrivilegedSyncAfterHandled(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore")
	mr := runTestNode(t, Input{ScenarioFile: "handled.yaml", ScenarioYAML: []byte(handledScenario), Mode: "iptables-legacy",
		EventLag: 100 * time.Millisecond}, 2*time.Minute)
	if len(mr.Probes) == 0 {
		t.Fatal("no probes")
	}
	for _, p := range mr.Probes {
		if p.Stray > 0 || p.OK != p.Sent {
			t.Errorf("%s: %d of %d answered, %d by endpoints not ready (replies %v, expected %v)", p.Target, p.OK, p.Sent, p.Stray, p.Endpoints, p.Expected)
		}
	}
}
