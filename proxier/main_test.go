package proxier

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/netns"
)

// Test conventions (as in kube-proxy's proxier_test.go): ClusterIPs in
// 10.96.0.0/12, endpoints in 10.244.0.0/16 (the cluster CIDR), the client
// pod at 10.244.255.254, the node at netns' default 172.18.0.2. All of them
// exist only inside the node process's namespaces.

func TestMain(m *testing.M) {
	quietKlog()
	netns.RegisterNodeMain(proxierNodeMain, runProxierNode)
	if netns.Init() {
		return // never reached: Init exits in a node process
	}
	os.Exit(m.Run())
}

// quietKlog drops the upstream proxiers' klog output so test output stays
// readable.
func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

// startTestProxier starts the proxier of in's mode on client inside a
// node, with the test conventions, and waits for its first sync: a minute,
// or four in IPVS mode, whose every ipset call is a program run (slow in
// an emulated VM). A timeout reports the kernel calls made so far.
func startTestProxier(ctx context.Context, env *netns.NodeEnv, in proxierInput, client kubernetes.Interface) (*Proxier, error) {
	cfg, err := DefaultConfiguration()
	if err != nil {
		return nil, err
	}
	cfg.MinSyncPeriod.Duration = 100 * time.Millisecond
	begin := time.Now()
	p, err := Start(ctx, Options{
		Mode: in.Mode, Backend: in.Backend, ToolsDir: "/run", Config: cfg, Client: client,
		NodeName: testNodeName, NodeIP: net.IP(env.NodeIP.AsSlice()), ClusterCIDR: testClusterCIDR,
		ExecTimer: in.ExecTimer,
	})
	if err != nil {
		return nil, err
	}
	wait := time.Minute
	if in.Mode == ModeIPVS {
		wait = 4 * time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if _, err := p.WaitForSync(wctx, begin); err != nil {
		calls := p.KernelCalls()
		var b strings.Builder
		for _, c := range calls {
			if c.Err != "" && b.Len() < 4000 {
				fmt.Fprintf(&b, "\n  %s: %s", c.Method, c.Err)
			}
		}
		return nil, fmt.Errorf("first sync: %w (totals %+v; %d kernel calls %v; errors:%s)", err, p.Totals(), len(calls), SumKernelCalls(calls, time.Time{}, time.Time{}), b.String())
	}
	return p, nil
}

// probeTestServices puts eps behind fake pods and sends count connections
// from the client pod to each test ClusterIP.
func probeTestServices(ctx context.Context, env *netns.NodeEnv, eps map[netip.Addr][]netip.Addr, count int) ([]netns.ProbeResult, error) {
	pn, err := env.NewPodNetwork(netns.PodNetworkConfig{Ports: []netns.Port{{Protocol: netns.TCP, Port: testTargetPort}}})
	if err != nil {
		return nil, err
	}
	defer pn.Close()
	var all []netip.Addr
	for _, e := range eps {
		all = append(all, e...)
	}
	if err := pn.AddEndpoints(all); err != nil {
		return nil, err
	}
	var out []netns.ProbeResult
	for i := range testServices {
		r, err := pn.Probe(ctx, netns.ProbeSpec{
			From: netns.ClientPod, Target: netip.AddrPortFrom(testClusterIP(i), testPort),
			Protocol: netns.TCP, Count: count,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// runTestNode runs the registered node main with input in and decodes
// its result into out.
func runTestNode(t *testing.T, nodeMain string, in, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := netns.RunNode(ctx, netns.NodeOptions{Name: nodeMain}, in, out); err != nil {
		t.Fatalf("node: %v", err)
	}
}
