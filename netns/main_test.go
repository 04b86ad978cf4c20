package netns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Test conventions (as in kube-proxy's proxier_test.go): ClusterIPs in
// 10.96.0.0/12, endpoints in 10.244.0.0/16, the client pod at
// 10.244.255.254, the node at 172.18.0.2, the external client at
// 203.0.113.10. All of them exist only inside the node process's namespaces.

func TestMain(m *testing.M) {
	RegisterNodeMain(fixtureNodeMain, runFixtureNode)
	RegisterNodeMain(phaseNodeMain, runPhaseNode)
	RegisterNodeMain(churnNodeMain, runChurnNode)
	RegisterNodeMain(dataplaneNodeMain, runDataplaneNode)
	RegisterNodeMain(dataPathNodeMain, runDataPathNode)
	if Init() {
		return // never reached: Init exits in a node process
	}
	os.Exit(m.Run())
}

// requireRoot skips privileged tests unless they can run, saying why.
func requireRoot(t testing.TB, binaries ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates network and mount namespaces)")
	}
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s in PATH (Debian package iptables/nftables): %v", b, err)
		}
	}
}

// fixtureService is one service of an iptables test fixture.
type fixtureService struct {
	ClusterIP  netip.Addr   `json:"clusterIP"`
	Port       uint16       `json:"port"`
	TargetPort uint16       `json:"targetPort"`
	Protocol   Protocol     `json:"protocol"`
	NodePort   uint16       `json:"nodePort,omitempty"`
	Endpoints  []netip.Addr `json:"endpoints"`
}

// fixtureInput drives runFixtureNode: build pods, load rules, probe.
type fixtureInput struct {
	Pods      PodNetworkConfig `json:"pods"`
	Endpoints []netip.Addr     `json:"endpoints"`
	// RestoreCmd and Rules: a ruleset loaded in the node namespace (a test
	// fixture, not kube-proxy's).
	RestoreCmd string      `json:"restoreCmd,omitempty"`
	Rules      string      `json:"rules,omitempty"`
	Probes     []ProbeSpec `json:"probes"`
	// FlushConntrack before every probe: keeps the table small and the
	// probes independent (benchmarks).
	FlushConntrack bool `json:"flushConntrack,omitempty"`
}

type fixtureOutput struct {
	SetupSeconds float64       `json:"setupSeconds"`
	Namespaces   int           `json:"namespaces"`
	Endpoints    int           `json:"endpoints"`
	Probes       []ProbeResult `json:"probes"`
}

const fixtureNodeMain = "test-fixture"

func runFixtureNode(ctx context.Context, env *NodeEnv) error {
	var in fixtureInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	start := time.Now()
	pn, err := env.NewPodNetwork(in.Pods)
	if err != nil {
		return err
	}
	if err := pn.AddEndpoints(in.Endpoints); err != nil {
		return err
	}
	out := fixtureOutput{SetupSeconds: time.Since(start).Seconds(), Namespaces: pn.Namespaces(), Endpoints: len(pn.Endpoints())}
	if err := env.Emit("pods-ready", out); err != nil {
		return err
	}
	if in.Rules != "" {
		cmd := exec.CommandContext(ctx, in.RestoreCmd)
		cmd.Stdin = strings.NewReader(in.Rules)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", in.RestoreCmd, err, b)
		}
	}
	for _, spec := range in.Probes {
		if in.FlushConntrack {
			if err := env.FlushConntrack(); err != nil {
				return err
			}
		}
		r, err := pn.Probe(ctx, spec)
		if err != nil {
			return err
		}
		out.Probes = append(out.Probes, r)
	}
	return env.SetResult(out)
}

// runFixture runs a fixture node to completion and returns its output.
func runFixture(t testing.TB, in fixtureInput) fixtureOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out fixtureOutput
	if err := RunNode(ctx, NodeOptions{Name: fixtureNodeMain}, in, &out); err != nil {
		t.Fatalf("fixture node: %v", err)
	}
	return out
}
