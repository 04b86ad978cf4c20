package netns

import (
	"net/netip"
	"testing"
)

// TestPrivilegedProbeDirect checks the plumbing without any rules: every
// client reaches a pod IP directly, the pod names the address that was hit
// and sees the client's own address.
func TestPrivilegedProbeDirect(t *testing.T) {
	requireRoot(t)
	eps := []netip.Addr{netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("10.244.0.3"), netip.MustParseAddr("10.244.1.7")}
	in := fixtureInput{
		Pods:      PodNetworkConfig{Ports: []Port{{TCP, 8080}, {UDP, 5353}}, AddressesPerNamespace: 2},
		Endpoints: eps,
	}
	for _, from := range []ClientKind{ClientPod, ClientNode} {
		for _, ep := range eps {
			for _, proto := range []Protocol{TCP, UDP} {
				port := uint16(8080)
				if proto == UDP {
					port = 5353
				}
				in.Probes = append(in.Probes, ProbeSpec{From: from, Target: netip.AddrPortFrom(ep, port), Protocol: proto, Count: 20})
			}
		}
	}
	out := runFixture(t, in)
	if out.Namespaces != 2 {
		t.Errorf("namespaces = %d, want 2 (10.244.0.2/31 and 10.244.1.6/31)", out.Namespaces)
	}
	for _, r := range out.Probes {
		if r.OK != r.Spec.Count || len(r.Failures) != 0 {
			t.Errorf("%s %s from %s: ok %d/%d, failures %v %v", r.Spec.Protocol, r.Spec.Target, r.Spec.From, r.OK, r.Spec.Count, r.Failures, r.FailureSample)
			continue
		}
		if len(r.Endpoints) != 1 || r.Endpoints[r.Spec.Target] == nil {
			t.Errorf("%s %s from %s: answered by %v, want only the target", r.Spec.Protocol, r.Spec.Target, r.Spec.From, r.Endpoints)
		}
		if r.SourcePreserved != r.OK {
			t.Errorf("%s %s from %s: source preserved in %d of %d", r.Spec.Protocol, r.Spec.Target, r.Spec.From, r.SourcePreserved, r.OK)
		}
	}
}

// TestPrivilegedProbeConntrackFlushes: the prober flushes the node's
// conntrack table before the connections made since the last flush, by
// any probe, would pass the batch, between batches only, and every
// connection still gets its answer.
func TestPrivilegedProbeConntrackFlushes(t *testing.T) {
	requireRoot(t)
	ep := netip.MustParseAddr("10.244.0.2")
	in := fixtureInput{Pods: PodNetworkConfig{Ports: []Port{{TCP, 8080}}}, Endpoints: []netip.Addr{ep}}
	target := netip.AddrPortFrom(ep, 8080)
	for _, count := range []int{30, 30, 10, 120} {
		in.Probes = append(in.Probes, ProbeSpec{From: ClientPod, Target: target, Protocol: TCP, Count: count, ConntrackBatch: 50})
	}
	// Since the last flush: 30; 30+30 > 50, flush, 30; 30+10 = 40; then
	// batches of 50, 50, 20, each past 50 with what came before.
	want := []int{0, 1, 0, 3}
	out := runFixture(t, in)
	for i, r := range out.Probes {
		if r.OK != r.Spec.Count {
			t.Errorf("probe %d: ok %d/%d, failures %v %v", i, r.OK, r.Spec.Count, r.Failures, r.FailureSample)
		}
		if r.ConntrackFlushes != want[i] {
			t.Errorf("probe %d of %d connections: %d flushes, want %d", i, r.Spec.Count, r.ConntrackFlushes, want[i])
		}
	}
}
