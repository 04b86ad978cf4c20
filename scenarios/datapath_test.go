package scenarios

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDataPathDefaults(t *testing.T) {
	doc := []byte(`apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: dp}
spec:
  serviceGroups: [{name: svc, count: 100, endpoints: 10}]
  steps:
    - sync: {}
    - datapath: {}
    - datapath: {group: svc, services: 3, connections: 300, vmConnections: 30, rounds: 2, concurrency: 1, cpu: 0}
`)
	s, err := Load("dp.yaml", doc)
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	want := []*DataPathStep{
		{Services: 10, Connections: 60000, Rounds: 5, Concurrency: 4},
		{Group: "svc", Services: 3, Connections: 300, VMConnections: 30, Rounds: 2, Concurrency: 1, CPU: &zero},
	}
	got := []*DataPathStep{s.Spec.Steps[1].DataPath, s.Spec.Steps[2].DataPath}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
	if a := s.Spec.Steps[1].Action(); a != "datapath" || s.Spec.Steps[1].Name != "datapath-1" {
		t.Errorf("action %q, name %q; want datapath, datapath-1", a, s.Spec.Steps[1].Name)
	}
	for _, tc := range []struct {
		step int
		vm   bool
		want int
	}{{1, false, 60000}, {1, true, 60000}, {2, false, 300}, {2, true, 30}} {
		if got := s.Spec.Steps[tc.step].DataPath.ConnectionsFor(tc.vm); got != tc.want {
			t.Errorf("steps[%d].ConnectionsFor(vm %v) = %d, want %d", tc.step, tc.vm, got, tc.want)
		}
	}
}
