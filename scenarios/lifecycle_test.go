package scenarios

import "testing"

// TestModeAt: a migrate step changes the mode an entry runs from the step
// after it on, only for the entries it applies to, and keeps the entry's
// name (its results' key).
func TestModeAt(t *testing.T) {
	s, err := Load("lifecycle.yaml", []byte(`apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: lc}
spec:
  modes:
    - {mode: iptables, backend: nft}
    - {mode: ipvs}
  serviceGroups:
    - {name: web, count: 2}
  steps:
    - sync: {}
    - migrate: {mode: nftables, modes: [ipvs]}
    - migrate: {mode: iptables, backend: legacy, modes: [iptables-nft]}
    - restart: {}
    - cleanup: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	ipt, ipvs := s.Spec.Modes[0], s.Spec.Modes[1]
	for _, c := range []struct {
		m       ModeSpec
		step    int
		mode    string
		backend string
	}{
		{ipvs, 0, ModeIPVS, BackendLegacy},
		{ipvs, 1, ModeIPVS, BackendLegacy}, // the migrate step itself starts in the old mode
		{ipvs, 2, ModeNFTables, ""},
		{ipvs, 5, ModeNFTables, ""},
		{ipt, 2, ModeIPTables, BackendNFT},
		{ipt, 3, ModeIPTables, BackendLegacy},
	} {
		got := s.ModeAt(c.m, c.step)
		if got.Mode != c.mode || got.Backend != c.backend || got.Name != c.m.Name {
			t.Errorf("ModeAt(%s, %d) = %s/%s %q, want %s/%s %q", c.m.Name, c.step, got.Mode, got.Backend, got.Name, c.mode, c.backend, c.m.Name)
		}
	}
	if got := s.FinalMode(ipvs); got.Mode != ModeNFTables || got.Scheduler != "" {
		t.Errorf("FinalMode(ipvs) = %+v, want nftables without a scheduler", got)
	}
	r := s.Spec.Steps[3].Restart
	if r.Timeout.Duration != DefaultLifecycleWait || r.Probes.Services != DefaultWatchServices || r.Probes.Rate != DefaultWatchRate || r.Within != nil {
		t.Errorf("restart defaults: %+v", r)
	}
	if g := s.Spec.Steps[1].Migrate.Graceful; g == nil || !*g {
		t.Error("a migration stops kube-proxy gracefully by default")
	}
}
