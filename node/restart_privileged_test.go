package node

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
	"github.com/kpsim/kpsim/toolexec"
)

const restartNodeMain = "test-restart"

func init() { netns.RegisterNodeMain(restartNodeMain, runRestartNode) }

const restartScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: restart}
spec:
  modes:
    - {mode: iptables, backend: legacy}
  serviceGroups:
    - {name: web, count: 1, endpoints: 3}
`

// restartPhase is what one phase saw: kube-proxy's pid, its syncs, and
// a probe of the Service's ClusterIP.
type restartPhase struct {
	Phase     string
	Pid       int
	Syncs     int
	FirstFull bool
	OK, Sent  int
	Answered  int // endpoints that answered
}

// runRestartNode runs kube-proxy, stops it and starts a new one on the
// same API, probing the Service through the dataplane process, which
// runs throughout.
func runRestartNode(ctx context.Context, env *netns.NodeEnv) error {
	s, err := scenarios.Load("restart.yaml", []byte(restartScenario))
	if err != nil {
		return err
	}
	ms := &s.Spec.Modes[0]
	n := &node{env: env, s: s, entry: ms, ms: ms, res: &reports.ModeResult{}, tools: &toolexec.Exec{}, probeTimeout: 2 * time.Second,
		scenarioFile: "restart.yaml", scenarioYAML: []byte(restartScenario)}
	if n.cluster, err = sim.New(s); err != nil {
		return err
	}
	if err := n.startPods(); err != nil {
		return err
	}
	svc := n.cluster.Snapshot().Services[0]
	target := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Ports[0].Port))
	var out []restartPhase
	record := func(phase string, kp *kubeProxy) error {
		r, err := n.pods.Probe(ctx, netns.ProbeSpec{From: netns.ClientPod, Target: target, Protocol: netns.TCP, Count: 60, Timeout: time.Second})
		if err != nil {
			return fmt.Errorf("%s: %w", phase, err)
		}
		p := restartPhase{Phase: phase, OK: r.OK, Sent: r.Sent, Answered: len(r.Endpoints)}
		if kp != nil {
			syncs := kp.Syncs()
			p.Pid, p.Syncs = kp.Pid(), len(syncs)
			p.FirstFull = len(syncs) > 0 && syncs[0].Full
		}
		out = append(out, p)
		return nil
	}

	for _, phase := range []string{"first", "restarted"} {
		if err := n.startProxier(ctx, n.cluster.Clientset); err != nil {
			return fmt.Errorf("%s: %w", phase, err)
		}
		if _, err := n.waitSynced(ctx, time.Minute); err != nil {
			return fmt.Errorf("%s: %w", phase, err)
		}
		if err := record(phase, n.proxier); err != nil {
			return err
		}
		if phase == "first" {
			if err := n.proxier.stop(); err != nil {
				return fmt.Errorf("stopping kube-proxy: %w", err)
			}
			// Down: its rules stay in the kernel, as on a real node.
			if err := record("down", nil); err != nil {
				return err
			}
		}
	}
	return env.SetResult(out)
}

// TestPrivilegedKubeProxyRestart: kube-proxy is a process of its own that
// can be stopped and started again in the node while the fake pods and
// the prober (the dataplane process) keep running; a new one lists the
// same API and syncs in full.
func TestPrivilegedKubeProxyRestart(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var phases []restartPhase
	if err := netns.RunNode(ctx, netns.NodeOptions{Name: restartNodeMain}, nil, &phases); err != nil {
		t.Fatal(err)
	}
	if len(phases) != 3 {
		t.Fatalf("phases %+v, want first, down, restarted", phases)
	}
	for _, p := range phases {
		if p.OK != p.Sent || p.Answered != 3 {
			t.Errorf("%s: %d/%d connections answered by %d endpoints, want all by 3", p.Phase, p.OK, p.Sent, p.Answered)
		}
	}
	first, restarted := phases[0], phases[2]
	if first.Pid == 0 || restarted.Pid == first.Pid {
		t.Errorf("kube-proxy pids %d then %d: want a new process", first.Pid, restarted.Pid)
	}
	if !first.FirstFull || !restarted.FirstFull || restarted.Syncs == 0 {
		t.Errorf("syncs: first %+v, restarted %+v: want each process's own, a full one first", first, restarted)
	}
}
