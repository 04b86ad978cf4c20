package proxier

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
)

const topologyNodeMain = "proxier-topology-test"

func init() { netns.RegisterNodeMain(topologyNodeMain, runTopologyNode) }

// topologyDelay holds the node's zone back from the proxier much longer
// than its first sync takes, as a loaded machine sometimes does.
const topologyDelay = 1500 * time.Millisecond

// topologyOutput is what runTopologyNode reports.
type topologyOutput struct {
	Syncs  []Sync            `json:"syncs"`
	Inputs Inputs            `json:"inputs"`
	Waited Sync              `json:"waited"`
	Probe  netns.ProbeResult `json:"probe"`
	// SameZone are the endpoints hinted for the node's zone.
	SameZone []netip.Addr `json:"sameZone"`
}

// runTopologyNode starts a proxier whose node is in zone-a, with one
// PreferClose Service of two endpoints in zone-a and two in zone-b, and
// the node's topology labels delivered late; it waits with WaitForAPI
// and probes at once.
func runTopologyNode(ctx context.Context, env *netns.NodeEnv) error {
	quietKlog()
	var in proxierInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	objs, _ := testObjects(env.NodeIP)
	node := objs[0].(*v1.Node) // the node only
	node.Labels = map[string]string{v1.LabelTopologyZone: "zone-a"}
	ip := testClusterIP(0)
	svc := testService(0)
	svc.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferClose)
	zones := []string{"zone-a", "zone-a", "zone-b", "zone-b"}
	var all []netip.Addr
	for j := range zones {
		all = append(all, testEndpoint(0, j))
	}
	slice := testSlice(0, all)
	out := topologyOutput{}
	for j, zone := range zones {
		slice.Endpoints[j].Zone = ptr(zone)
		slice.Endpoints[j].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}
		if zone == "zone-a" {
			out.SameZone = append(out.SameZone, all[j])
		}
	}
	client := fake.NewClientset(node, svc, slice)

	cfg, err := DefaultConfiguration()
	if err != nil {
		return err
	}
	cfg.MinSyncPeriod.Duration = 100 * time.Millisecond
	// A failed sync is retried after syncPeriod: on a loaded machine an
	// nft run sometimes fails, and the retry should come within the wait.
	cfg.SyncPeriod.Duration = 2 * time.Second
	begin := time.Now()
	p, err := Start(ctx, Options{
		Mode: in.Mode, Backend: in.Backend, ToolsDir: "/run", Config: cfg, Client: client,
		NodeName: testNodeName, NodeIP: net.IP(env.NodeIP.AsSlice()), ClusterCIDR: testClusterCIDR,
		topologyDelay: topologyDelay,
	})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if out.Waited, err = p.WaitForAPI(wctx, begin); err != nil {
		return fmt.Errorf("WaitForAPI: %w (syncs %+v, handed %+v)", err, p.Syncs(), p.Inputs())
	}

	pn, err := env.NewPodNetwork(netns.PodNetworkConfig{Ports: []netns.Port{{Protocol: netns.TCP, Port: testTargetPort}}})
	if err != nil {
		return err
	}
	defer pn.Close()
	if err := pn.AddEndpoints(all); err != nil {
		return err
	}
	if out.Probe, err = pn.Probe(ctx, netns.ProbeSpec{
		From: netns.ClientPod, Target: netip.AddrPortFrom(ip, testPort), Protocol: netns.TCP, Count: 200,
	}); err != nil {
		return err
	}
	time.Sleep(3 * pollInterval)
	out.Syncs, out.Inputs = p.Syncs(), p.Inputs()
	return env.SetResult(out)
}

// TestPrivilegedTopologyArrivesLate: kube-proxy's first sync runs before
// the node's zone reaches the proxier (held back here, as a loaded machine
// sometimes does), so it spreads a PreferClose Service over every zone.
// WaitForAPI must not return that sync: every connection made right after
// it must reach an endpoint of the node's own zone.
func TestPrivilegedTopologyArrivesLate(t *testing.T) {
	cases := []struct {
		name     string
		in       proxierInput
		binaries []string
	}{
		{name: "iptables-legacy", in: proxierInput{Mode: ModeIPTables, Backend: BackendLegacy}, binaries: []string{"iptables-legacy-restore", "iptables-legacy-save"}},
		{name: "nftables", in: proxierInput{Mode: ModeNFTables}, binaries: []string{"nft"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireRoot(t, tc.binaries...)
			var out topologyOutput
			runTestNode(t, topologyNodeMain, tc.in, &out)

			if len(out.Inputs.NotHanded) > 0 {
				// A separate finding (see inputsWait): kube-proxy was
				// never handed the labels, so nothing here was late.
				t.Skipf("kube-proxy was not handed the node's topology labels within %s (NodeTopologyConfig never called OnTopologyChange); the report names this case", inputsWait)
			}
			same := map[netip.Addr]bool{}
			for _, a := range out.SameZone {
				same[a] = true
			}
			if out.Probe.OK != out.Probe.Sent {
				t.Errorf("%d of %d connections answered: %v", out.Probe.OK, out.Probe.Sent, out.Probe.FailureSample)
			}
			for ep, tally := range out.Probe.Endpoints {
				if !same[ep.Addr()] {
					t.Errorf("%d connections reached %v in the other zone right after WaitForAPI", tally.Count, ep)
				}
			}
			if len(out.Syncs) == 0 || !out.Syncs[0].Start.Before(out.Inputs.TopologyAt) {
				t.Errorf("the first sync did not run before the zone arrived (syncs %+v, zone at %v): the test did not make the race happen", out.Syncs, out.Inputs.TopologyAt)
			}
			if got := out.Inputs.TopologyLabels[v1.LabelTopologyZone]; got != "zone-a" {
				t.Errorf("topology labels handed to the proxier = %v, want zone zone-a", out.Inputs.TopologyLabels)
			}
			if !out.Waited.Synced.After(out.Syncs[0].Synced) {
				t.Errorf("WaitForAPI returned the first sync (%+v), which ran before the zone arrived at %v", out.Waited, out.Inputs.TopologyAt)
			}
		})
	}
}
