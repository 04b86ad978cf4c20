package netns

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const phaseNodeMain = "test-phases"

// Phases a phase node reports, in order.
const (
	phasePodsReady = "pods-ready"
	phaseProbing   = "probing"
	phaseResultSet = "result-set"
)

// runPhaseNode goes through the phases of a run and reports each; it leaves
// state everywhere a crash could (rules, pods, conntrack, sockets) and
// waits for the orchestrator to close its input before returning.
func runPhaseNode(ctx context.Context, env *NodeEnv) error {
	pn, err := env.NewPodNetwork(PodNetworkConfig{Ports: []Port{{TCP, 8080}}, AddressesPerNamespace: 4})
	if err != nil {
		return err
	}
	svcs := makeServices(4, 4, TCP, 80, 8080)
	if err := pn.AddEndpoints(allEndpoints(svcs)); err != nil {
		return err
	}
	if _, err := exec.LookPath("iptables-legacy-restore"); err == nil {
		cmd := exec.CommandContext(ctx, "iptables-legacy-restore")
		cmd.Stdin = strings.NewReader(iptablesFixture(env.NodeIP, svcs))
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-legacy-restore: %w: %s", err, b)
		}
	}
	if err := env.Emit(phasePodsReady, nil); err != nil {
		return err
	}
	probeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		// Long and paced: the orchestrator kills the node in the middle.
		_, err := pn.Probe(probeCtx, ProbeSpec{From: ClientPod, Target: netip.AddrPortFrom(svcs[0].ClusterIP, 80), Protocol: TCP, Count: 100000, Rate: 2000})
		done <- err
	}()
	// Announce the probe once it has answers in flight.
	select {
	case <-time.After(100 * time.Millisecond):
	case err := <-done:
		return err
	}
	if err := env.Emit(phaseProbing, nil); err != nil {
		return err
	}
	cancel()
	<-done
	if err := env.SetResult(map[string]string{"phase": "done"}); err != nil {
		return err
	}
	if err := env.Emit(phaseResultSet, nil); err != nil {
		return err
	}
	// Hold here until told to finish (or killed).
	_, _ = io.Copy(io.Discard, env.Input())
	return nil
}

// TestPrivilegedKillNode kills a node process with SIGKILL at five phases
// and checks the host is unchanged and nothing of the runs remains.
func TestPrivilegedKillNode(t *testing.T) {
	requireRoot(t)
	before, err := TakeHostSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host snapshot: %d rulesets (missing %v), %d links, %d routes, %d sysctls", len(before.Rulesets), before.Missing, len(before.Links), len(before.Routes), len(before.Sysctls))
	phases := []string{"start", EventNodeReady, phasePodsReady, phaseProbing, phaseResultSet}
	for _, phase := range phases {
		t.Run(phase, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p, err := StartNode(ctx, NodeOptions{Name: phaseNodeMain})
			if err != nil {
				t.Fatal(err)
			}
			if phase != "start" {
				if _, err := p.WaitEvent(ctx, phase); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Kill(); err != nil {
				t.Fatal(err)
			}
			res, err := p.Wait()
			if err == nil {
				t.Errorf("killed at %s: node ended without error", phase)
			}
			if ws, ok := res.ProcessState.Sys().(interface{ Signaled() bool }); !ok || !ws.Signaled() {
				t.Errorf("killed at %s: process state %v, want killed by a signal", phase, res.ProcessState)
			}
			if pids, err := RunProcesses(p.RunID()); err != nil || len(pids) > 0 {
				t.Errorf("killed at %s: node processes of run %s remain: %v %v", phase, p.RunID(), pids, err)
			}
			if left, err := Leftovers(p.RunID()); err != nil || len(left) > 0 {
				t.Errorf("killed at %s: leftovers of run %s: %v %v", phase, p.RunID(), left, err)
			}
		})
	}
	if m, _ := filepath.Glob("/run/netns/kpsim-*"); len(m) > 0 {
		t.Errorf("named namespaces left: %v", m)
	}
	after, err := TakeHostSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(before, after); d != "" {
		t.Errorf("host changed:\n%s", d)
	}
	if _, err := os.Stat("/run/xtables.lock"); err == nil {
		t.Logf("note: /run/xtables.lock exists on the host (it may predate this test)")
	}
}
