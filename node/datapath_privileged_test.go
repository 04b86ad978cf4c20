package node

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kpsim/kpsim/scenarios"
)

const dataPathScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: datapath}
spec:
  modes:
    - {mode: iptables, backend: legacy}
    - {mode: nftables}
  serviceGroups:
    - {name: web, count: 20, endpoints: 3}
  steps:
    - {name: initial, sync: {}}
    - {name: dp, datapath: {group: web, services: 4, connections: 1200, rounds: 3, concurrency: 2}}
`

// TestPrivilegedDataPathStep runs a datapath step in a real node, in
// iptables (legacy) and nftables mode: every connection of both kinds is
// made and answered by an endpoint of its Service (the one connected to,
// direct), the rates and CPU times are there, and in iptables mode each
// sampled Service is placed in KUBE-SERVICES.
func TestPrivilegedDataPathStep(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "nft")
	s, err := scenarios.Load("datapath.yaml", []byte(dataPathScenario))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Spec.Modes {
		t.Run(m.Name, func(t *testing.T) {
			mr := runTestNode(t, Input{ScenarioFile: "datapath.yaml", ScenarioYAML: []byte(dataPathScenario), Mode: m.Name}, 3*time.Minute)
			if len(mr.DataPaths) != 1 {
				t.Fatalf("%d datapath results, want 1", len(mr.DataPaths))
			}
			dp := mr.DataPaths[0]
			per := 1200 / (4 * 3)
			if dp.Step != "dp" || dp.Rounds != 3 || dp.ConnectionsPerRound != per || len(dp.Services) != 4 || len(dp.ByRound) != 3 {
				t.Errorf("step %q, %d rounds, %d per round, %d Services, %d round sums; want dp, 3, %d, 4, 3",
					dp.Step, dp.Rounds, dp.ConnectionsPerRound, len(dp.Services), len(dp.ByRound), per)
			}
			for _, k := range []struct {
				name string
				k    int
			}{{"service sent", dp.Service.Sent}, {"service ok", dp.Service.OK}, {"direct sent", dp.Direct.Sent}, {"direct ok", dp.Direct.OK}} {
				if k.k != 1200 {
					t.Errorf("%s: %d, want 1200", k.name, k.k)
				}
			}
			f := dp.Figures
			if f.ServiceRate <= 0 || f.DirectRate <= 0 || f.RateRatio <= 0 || dp.Service.ProcessSeconds <= 0 || dp.Direct.ProcessSeconds <= 0 || dp.Service.CPU.Total() == 0 {
				t.Errorf("figures %+v: want rates, a ratio and CPU times", f)
			}
			if f.Stray != 0 || f.Failed != 0 {
				t.Errorf("%d stray replies, %d failed connections: want none", f.Stray, f.Failed)
			}
			// Sampled evenly over web-00..web-19: the middles of 4 parts.
			var names []string
			for _, sv := range dp.Services {
				names = append(names, sv.Name)
				if sv.Service.OK != 3*per || sv.Direct.OK != 3*per || sv.Endpoints != 3 {
					t.Errorf("%s: %d through it, %d direct, %d endpoints; want %d, %d, 3", sv.Name, sv.Service.OK, sv.Direct.OK, sv.Endpoints, 3*per, 3*per)
				}
				if _, err := netip.ParseAddrPort(sv.Target); err != nil {
					t.Errorf("%s: target %q: %v", sv.Name, sv.Target, err)
				}
				if m.Mode == scenarios.ModeIPTables && (sv.Position < 1 || sv.Position > dp.ChainRules) {
					t.Errorf("%s: KUBE-SERVICES position %d of %d", sv.Name, sv.Position, dp.ChainRules)
				}
			}
			if want := "default/web-02:http default/web-07:http default/web-12:http default/web-17:http"; joinSpace(names) != want {
				t.Errorf("sampled %q, want %q", joinSpace(names), want)
			}
			if m.Mode == scenarios.ModeIPTables && (dp.ChainRules < 20 || dp.PositionError != "") {
				t.Errorf("KUBE-SERVICES: %d rules (%s): want the 20 Services' and more", dp.ChainRules, dp.PositionError)
			}
			t.Logf("%s: service %.0f/s, direct %.0f/s, ratio %.3f; kernel µs/conn %.1f / %.1f; dataplane µs/conn %.1f / %.1f; busy %.0f%% on cpu %d",
				m.Name, f.ServiceRate, f.DirectRate, f.RateRatio, f.ServiceKernelMicros, f.DirectKernelMicros,
				f.ServiceProcessMicros, f.DirectProcessMicros, f.Busy*100, dp.CPU)
		})
	}
}

func joinSpace(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
