package proxier

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
)

const startupCleanupNodeMain = "proxier-startup-cleanup"

func init() {
	// Registered here (not in TestMain) so this file stays self-contained;
	// package init runs before TestMain calls netns.Init.
	netns.RegisterNodeMain(startupCleanupNodeMain, runStartupCleanupNode)
}

// leftoverDNAT is where the other mode's leftover sends the first test
// Service: an address no pod holds.
const leftoverDNAT = "10.244.99.99:8080"

// startupCleanupOutput is what runStartupCleanupNode reports.
type startupCleanupOutput struct {
	// Before and After list the leftover (its table or chain) before
	// the proxier started and after its first sync.
	Before, After string
	Cleanup       *StartupCleanup
	Endpoints     map[netip.Addr][]netip.Addr
	Probes        []netns.ProbeResult
}

// runStartupCleanupNode leaves another mode's kube-proxy state in the node
// (a DNAT of the first Service to an address no pod holds, hooked before
// the mode under test), starts the proxier and probes every Service.
func runStartupCleanupNode(ctx context.Context, env *netns.NodeEnv) error {
	quietKlog()
	var in proxierInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	ip0 := testClusterIP(0).String()
	var leave [][]string
	var list []string
	switch in.Mode {
	case ModeIPTables:
		// nftables mode's table, as a previous nftables-mode kube-proxy
		// left it (its dstnat hook runs before iptables' nat PREROUTING).
		leave = [][]string{{"nft", "-f", "-", "table ip kube-proxy {\n chain nat-prerouting {\n  type nat hook prerouting priority dstnat - 10;\n  ip daddr " + ip0 + " tcp dport 80 dnat to " + leftoverDNAT + "\n }\n}\n"}}
		list = []string{"nft", "list", "tables"}
	case ModeNFTables:
		// iptables mode's chain and its jump, with the comment upstream's
		// cleanup looks for, in the default iptables backend.
		leave = [][]string{
			{"iptables", "-w", "-t", "nat", "-N", "KUBE-SERVICES"},
			{"iptables", "-w", "-t", "nat", "-A", "KUBE-SERVICES", "-d", ip0 + "/32", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", leftoverDNAT},
			{"iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
		}
		list = []string{"iptables", "-w", "-t", "nat", "-S"}
	default:
		return fmt.Errorf("mode %q: no leftover for it", in.Mode)
	}
	for _, c := range leave {
		cmd := exec.CommandContext(ctx, c[0], c[1:]...)
		if c[0] == "nft" {
			cmd = exec.CommandContext(ctx, "nft", "-f", "-")
			cmd.Stdin = strings.NewReader(c[3])
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("leaving %v: %v: %s", c, err, b)
		}
	}
	show := func() (string, error) {
		b, err := exec.CommandContext(ctx, list[0], list[1:]...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%v: %v: %s", list, err, b)
		}
		return string(b), nil
	}
	var out startupCleanupOutput
	var err error
	if out.Before, err = show(); err != nil {
		return err
	}
	objs, eps := testObjects(env.NodeIP)
	p, err := startTestProxier(ctx, env, in, fake.NewClientset(objs...))
	if err != nil {
		return err
	}
	if out.After, err = show(); err != nil {
		return err
	}
	out.Cleanup, out.Endpoints = p.Inputs().Cleanup, eps
	if out.Probes, err = probeTestServices(ctx, env, eps, testProbes); err != nil {
		return err
	}
	return env.SetResult(out)
}

// TestPrivilegedStartupCleanup: kube-proxy removes the other modes'
// leftovers before it builds its proxier (cmd/kube-proxy's
// platformCleanup). Another mode's DNAT of a Service to a dead address,
// hooked ahead of the mode under test, is gone after the start, and every
// connection reaches the Service's own endpoints.
func TestPrivilegedStartupCleanup(t *testing.T) {
	cases := []struct {
		name      string
		in        proxierInput
		binaries  []string
		leftover  string
		wantModes string
	}{
		{name: "iptables-legacy after nftables", in: proxierInput{Mode: ModeIPTables, Backend: BackendLegacy},
			binaries: []string{"iptables-legacy-restore", "nft"}, leftover: "table ip kube-proxy", wantModes: "nftables"},
		{name: "nftables after iptables", in: proxierInput{Mode: ModeNFTables},
			binaries: []string{"nft", "iptables"}, leftover: "KUBE-SERVICES", wantModes: "iptables"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireRoot(t, tc.binaries...)
			var out startupCleanupOutput
			runTestNode(t, startupCleanupNodeMain, tc.in, &out)
			t.Logf("cleanup: %+v", out.Cleanup)
			if !strings.Contains(out.Before, tc.leftover) {
				t.Fatalf("the leftover %q was not in place before the start:\n%s", tc.leftover, out.Before)
			}
			if strings.Contains(out.After, tc.leftover) {
				t.Errorf("the leftover %q is still there after the start:\n%s", tc.leftover, out.After)
			}
			if out.Cleanup == nil || !strings.HasPrefix(strings.Join(out.Cleanup.Modes, ","), tc.wantModes) {
				t.Errorf("startup cleanup %+v: want the %s leftovers cleaned", out.Cleanup, tc.wantModes)
			}
			dead := netip.MustParseAddrPort(leftoverDNAT)
			for i, r := range out.Probes {
				valid := map[netip.AddrPort]bool{}
				for _, ep := range out.Endpoints[testClusterIP(i)] {
					valid[netip.AddrPortFrom(ep, testTargetPort)] = true
				}
				if r.OK != testProbes {
					t.Errorf("%s: %d/%d connections answered; failures %v %v", r.Spec.Target, r.OK, testProbes, r.Failures, r.FailureSample)
				}
				for ep := range r.Endpoints {
					if !valid[ep] || ep == dead {
						t.Errorf("%s: answered by %s, not an endpoint of the Service %v", r.Spec.Target, ep, out.Endpoints[testClusterIP(i)])
					}
				}
			}
		})
	}
}
