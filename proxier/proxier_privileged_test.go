package proxier

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
)

const (
	proxierNodeMain = "proxier-test"
	testNodeName    = "kpsim-node"
	testClusterCIDR = "10.244.0.0/16"
	testServices    = 3
	testEndpoints   = 3
	testProbes      = 30
	testPort        = 80
	testTargetPort  = 8080
)

// proxierInput drives runProxierNode.
type proxierInput struct {
	Mode    string `json:"mode"`
	Backend string `json:"backend"`
	// ExecTimer is Options.ExecTimer (buildExecTimer).
	ExecTimer string `json:"execTimer,omitempty"`
}

// proxierOutput is what runProxierNode reports.
type proxierOutput struct {
	Tools       Tools               `json:"tools"`
	Syncs       []Sync              `json:"syncs"`
	Totals      Totals              `json:"totals"`
	Programming []Programming       `json:"programming"`
	Rules       string              `json:"rules"`
	Probes      []netns.ProbeResult `json:"probes"`
	// Endpoints of each service at probe time, by ClusterIP.
	Endpoints map[netip.Addr][]netip.Addr `json:"endpoints"`
}

func testClusterIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 96, 0, byte(10 + i)}) }
func testEndpoint(svc, ep int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(svc), byte(10 + ep)})
}

func testSlice(svc int, eps []netip.Addr) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("svc%d", svc)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-abcde", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr("http"), Port: ptr(int32(testTargetPort)), Protocol: ptr(v1.ProtocolTCP),
		}},
	}
	for _, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ep.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		})
	}
	return s
}

// testService is the ClusterIP Service svc<i>.
func testService(i int) *v1.Service {
	ip := testClusterIP(i)
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc%d", i), Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: ip.String(), ClusterIPs: []string{ip.String()},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports:      []v1.ServicePort{{Name: "http", Port: testPort, TargetPort: intstr.FromInt32(testTargetPort), Protocol: v1.ProtocolTCP}},
		},
	}
}

// testObjects is the initial API state: the node, Services and slices.
func testObjects(nodeIP netip.Addr) ([]runtime.Object, map[netip.Addr][]netip.Addr) {
	objs := []runtime.Object{&v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNodeName},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeIP.String()}}},
	}}
	eps := map[netip.Addr][]netip.Addr{}
	for i := range testServices {
		ip := testClusterIP(i)
		objs = append(objs, testService(i))
		for j := range testEndpoints {
			eps[ip] = append(eps[ip], testEndpoint(i, j))
		}
		objs = append(objs, testSlice(i, eps[ip]))
	}
	return objs, eps
}

// runProxierNode runs in the node process: proxier, a change, rules, probes.
func runProxierNode(ctx context.Context, env *netns.NodeEnv) error {
	quietKlog()
	var in proxierInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	objs, eps := testObjects(env.NodeIP)
	client := fake.NewClientset(objs...)
	p, err := startTestProxier(ctx, env, in, client)
	if err != nil {
		return err
	}

	// One change: a fourth endpoint for svc0, stamped for kube-proxy's
	// network programming latency.
	ip0 := testClusterIP(0)
	eps[ip0] = append(eps[ip0], testEndpoint(0, testEndpoints))
	slice := testSlice(0, eps[ip0])
	slice.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return err
	}
	// The stamped change is programmed when kube-proxy has observed its
	// network programming latency and the sync that did it is recorded.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := wait.PollUntilContextCancel(wctx, pollInterval, true, func(context.Context) (bool, error) {
		var n uint64
		for _, s := range p.Syncs() {
			n += uint64(s.Merged)
		}
		tot := p.Totals()
		return tot.ProgrammingCount > 0 && n == tot.SyncCount, nil
	}); err != nil {
		return fmt.Errorf("waiting for the update to be programmed: %w", err)
	}

	out := proxierOutput{Tools: p.Tools(), Endpoints: eps}
	dump := exec.CommandContext(ctx, "nft", "list", "ruleset")
	if in.Mode == ModeIPTables {
		dump = exec.CommandContext(ctx, "iptables-"+in.Backend+"-save", "-t", "nat")
	}
	b, err := dump.Output()
	if err != nil {
		return fmt.Errorf("%s: %w", dump, err)
	}
	out.Rules = string(b)

	if out.Probes, err = probeTestServices(ctx, env, eps, testProbes); err != nil {
		return err
	}
	// Let a last poll pass so Totals and Syncs agree.
	time.Sleep(3 * pollInterval)
	out.Syncs, out.Totals, out.Programming = p.Syncs(), p.Totals(), p.Programming()
	return env.SetResult(out)
}

func requireRoot(t *testing.T, binaries ...string) {
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

// TestPrivilegedProxier runs the upstream iptables (legacy backend) and
// nftables proxiers, each in its own node process, against a fake
// clientset with 3 Services x 3 endpoints, changes one slice, and checks
// the sync record against kube-proxy's own histogram, the rules in the
// kernel, and real connections from a client pod to every ClusterIP.
func TestPrivilegedProxier(t *testing.T) {
	cases := []struct {
		name     string
		in       proxierInput
		binaries []string
	}{
		{name: "iptables-legacy", in: proxierInput{Mode: ModeIPTables, Backend: BackendLegacy}, binaries: []string{"iptables-legacy-restore", "iptables-legacy-save", "ip6tables-legacy-restore"}},
		{name: "nftables", in: proxierInput{Mode: ModeNFTables}, binaries: []string{"nft"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireRoot(t, tc.binaries...)
			out := runProxierTest(t, tc.in)
			checkSyncs(t, out)
			checkRules(t, tc.in.Mode, out.Rules)
			checkProbes(t, out)
		})
	}
}

func runProxierTest(t *testing.T, in proxierInput) proxierOutput {
	t.Helper()
	var out proxierOutput
	runTestNode(t, proxierNodeMain, in, &out)
	t.Logf("tools: %+v", out.Tools)
	return out
}

func checkSyncs(t *testing.T, out proxierOutput) {
	t.Helper()
	var n uint64
	var sum time.Duration
	for i, s := range out.Syncs {
		n += uint64(s.Merged)
		sum += s.Duration
		t.Logf("sync %d: %v full=%v merged=%d (end-start bound %v)", i, s.Duration, s.Full, s.Merged, s.End.Sub(s.Start))
	}
	if n < 2 {
		t.Errorf("recorded %d syncs, want at least 2 (initial and after the update)", n)
	}
	if n != out.Totals.SyncCount {
		t.Errorf("recorded %d syncs, kube-proxy's histogram counts %d", n, out.Totals.SyncCount)
	}
	own := out.Totals.SyncSeconds
	if got := sum.Seconds(); own <= 0 || got < own*0.99 || got > own*1.01 {
		t.Errorf("recorded durations sum to %.6fs, kube-proxy's histogram sum is %.6fs (want within 1%%)", got, own)
	}
	if len(out.Syncs) > 0 && !out.Syncs[0].Full {
		t.Errorf("first sync not full: %+v", out.Syncs[0])
	}
	if out.Totals.ProgrammingCount == 0 {
		t.Errorf("no network programming latency observed after a stamped slice update")
	}
	t.Logf("syncs: %d, sum %.6fs (histogram: %d, %.6fs); programming latency: %d observations, %.6fs",
		n, sum.Seconds(), out.Totals.SyncCount, own, out.Totals.ProgrammingCount, out.Totals.ProgrammingSeconds)
}

func checkRules(t *testing.T, mode, rules string) {
	t.Helper()
	for i := range testServices {
		name := fmt.Sprintf("default/svc%d", i)
		found := false
		for _, line := range strings.Split(rules, "\n") {
			switch mode {
			case ModeIPTables:
				found = found || (strings.Contains(line, name+":http cluster IP") && strings.Contains(line, "-j KUBE-SVC-"))
			case ModeNFTables:
				found = found || (strings.Contains(line, "chain service-") && strings.Contains(line, name+"/tcp/http"))
			}
		}
		if !found {
			t.Errorf("no service chain for %s in the %s rules", name, mode)
		}
	}
	if t.Failed() {
		t.Logf("rules:\n%s", rules)
	}
}

func checkProbes(t *testing.T, out proxierOutput) {
	t.Helper()
	for i, r := range out.Probes {
		ip := testClusterIP(i)
		valid := map[netip.AddrPort]bool{}
		for _, ep := range out.Endpoints[ip] {
			valid[netip.AddrPortFrom(ep, testTargetPort)] = true
		}
		if r.OK != testProbes {
			t.Errorf("%s: %d/%d connections answered; failures %v %v", r.Spec.Target, r.OK, testProbes, r.Failures, r.FailureSample)
		}
		for ep, tally := range r.Endpoints {
			if !valid[ep] {
				t.Errorf("%s: answered by %s, not an endpoint of the service %v", r.Spec.Target, ep, out.Endpoints[ip])
			}
			t.Logf("%s -> %s: %d", r.Spec.Target, ep, tally.Count)
		}
		// The endpoint added by the update must be in the rules: 30 draws
		// over 4 endpoints all miss it with p = 0.75^30 = 1.8e-4.
		if added := netip.AddrPortFrom(testEndpoint(0, testEndpoints), testTargetPort); i == 0 && r.Endpoints[added] == nil {
			t.Errorf("%s: the endpoint %s added by the update never answered", r.Spec.Target, added)
		}
	}
}
