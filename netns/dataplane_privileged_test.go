package netns

import (
	"context"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const dataplaneNodeMain = "test-dataplane"

type dataplaneOutput struct {
	NodePid, DataplanePid int
	// Probes: from the client pod to each endpoint, from the node to the
	// second, and from the external client to the first (answered through
	// the node, which routes to pods).
	FromPod      []ProbeResult
	FromNode     ProbeResult
	Usage        DataplaneUsage
	DupErr       string
	PodNSAfter   bool // whether the dataplane's pods were still there after Close
	PodNSWhile   int  // network namespaces the dataplane held while running
	NodeNSShared bool // the dataplane ran in the node's network namespace
}

// runDataplaneNode starts a dataplane process, answers probes through it
// and closes it.
func runDataplaneNode(ctx context.Context, env *NodeEnv) error {
	d, err := env.StartDataplane(PodNetworkConfig{Ports: []Port{{TCP, 8080}, {UDP, 5353}}})
	if err != nil {
		return err
	}
	out := dataplaneOutput{NodePid: os.Getpid(), DataplanePid: d.Pid()}
	eps := addrs("10.244.0.1", "10.244.0.2")
	if err := d.AddEndpoints(eps); err != nil {
		return err
	}
	if err := d.AddEndpoints(eps[:1]); err != nil {
		out.DupErr = err.Error()
	}
	for _, a := range eps {
		r, err := d.Probe(ctx, ProbeSpec{From: ClientPod, Target: netip.AddrPortFrom(a, 8080), Protocol: TCP, Count: 20})
		if err != nil {
			return err
		}
		out.FromPod = append(out.FromPod, r)
	}
	if out.FromNode, err = d.Probe(ctx, ProbeSpec{From: ClientNode, Target: netip.AddrPortFrom(eps[1], 5353), Protocol: UDP, Count: 10}); err != nil {
		return err
	}
	if out.Usage, err = d.Usage(); err != nil {
		return err
	}
	nodeNS, _ := nsInode("/proc/self/ns/net")
	dpNS, _ := nsInode("/proc/" + strconv.Itoa(d.Pid()) + "/ns/net")
	out.NodeNSShared = nodeNS == dpNS
	out.PodNSWhile = heldNetNS(d.Pid())
	pid := d.Pid()
	if err := d.Close(); err != nil {
		return err
	}
	_, statErr := os.Stat("/proc/" + strconv.Itoa(pid))
	out.PodNSAfter = statErr == nil
	return env.SetResult(out)
}

// heldNetNS counts the network namespaces pid holds by file descriptor.
func heldNetNS(pid int) int {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "net:[") {
			n++
		}
	}
	return n
}

// TestPrivilegedDataplaneProcess: the fake pods and the prober live in a
// process of their own, in the node's namespace, and answer real packets
// from the node process's calls.
func TestPrivilegedDataplaneProcess(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out dataplaneOutput
	if err := RunNode(ctx, NodeOptions{Name: dataplaneNodeMain}, nil, &out); err != nil {
		t.Fatalf("dataplane node: %v", err)
	}
	if out.DataplanePid == out.NodePid || out.DataplanePid == 0 {
		t.Errorf("dataplane pid %d, node pid %d: want a process of its own", out.DataplanePid, out.NodePid)
	}
	if !out.NodeNSShared {
		t.Error("the dataplane process is not in the node's network namespace")
	}
	// The client pod's, the external one (by fd) and one per endpoint
	// (AddressesPerNamespace 1).
	if out.PodNSWhile < 3 {
		t.Errorf("the dataplane held %d network namespaces, want the client pod's and one per endpoint", out.PodNSWhile)
	}
	if !strings.Contains(out.DupErr, "10.244.0.1") {
		t.Errorf("adding an endpoint twice: error %q, want one naming it", out.DupErr)
	}
	for i, r := range out.FromPod {
		want := netip.AddrPortFrom(addrs("10.244.0.1", "10.244.0.2")[i], 8080)
		if r.OK != 20 || len(r.Endpoints) != 1 || r.Endpoints[want] == nil || r.Endpoints[want].Count != 20 {
			t.Errorf("pod -> %s: ok %d of %d, endpoints %v; want all 20 answered by it", want, r.OK, r.Sent, r.Endpoints)
		}
		if got := r.Endpoints[want]; got != nil && got.Sources[DefaultClientPodIP] != 20 {
			t.Errorf("pod -> %s: sources %v, want the client pod %s 20 times", want, got.Sources, DefaultClientPodIP)
		}
	}
	if r := out.FromNode; r.OK != 10 || r.Endpoints[netip.MustParseAddrPort("10.244.0.2:5353")] == nil {
		t.Errorf("node -> 10.244.0.2:5353/udp: ok %d of %d, endpoints %v; want all answered", r.OK, r.Sent, r.Endpoints)
	}
	if out.Usage.CPUSeconds <= 0 || out.Usage.MaxRSSBytes <= 0 {
		t.Errorf("dataplane usage %+v: want CPU time and a peak RSS", out.Usage)
	}
	if out.PodNSAfter {
		t.Error("the dataplane process outlived Close")
	}
}
