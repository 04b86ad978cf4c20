package netns

import (
	"net/netip"
	"testing"
)

// TestPrivilegedServiceDNAT50x5 loads a kube-proxy-style DNAT fixture for
// 50 Services x 5 endpoints (TCP and UDP) into a node namespace and probes
// every service from the client pod (PREROUTING) and from the node (nat
// OUTPUT), plus a NodePort from the external client: every connection must
// reach an endpoint of its service, be attributed to it, and carry the
// client's own source address (the fixture does not masquerade).
func TestPrivilegedServiceDNAT50x5(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore")
	tcp := makeServices(50, 5, TCP, 80, 8080)
	udp := make([]fixtureService, len(tcp))
	for i, s := range tcp {
		s.Protocol, s.Port, s.TargetPort = UDP, 53, 5353
		udp[i] = s // same endpoints, another port
	}
	tcp[0].NodePort, udp[0].NodePort = 30080, 30053
	const count = 40
	in := fixtureInput{
		Pods:       PodNetworkConfig{Ports: []Port{{TCP, 8080}, {UDP, 5353}}},
		Endpoints:  allEndpoints(tcp),
		RestoreCmd: "iptables-legacy-restore",
		Rules:      iptablesFixture(DefaultNodeIP.Addr(), tcp, udp),
	}
	// expect maps each probe (in order) to the service it targets.
	var expect []fixtureService
	for _, svcs := range [][]fixtureService{tcp, udp} {
		for _, s := range svcs {
			for _, from := range []ClientKind{ClientPod, ClientNode} {
				in.Probes = append(in.Probes, ProbeSpec{From: from, Target: netip.AddrPortFrom(s.ClusterIP, s.Port), Protocol: s.Protocol, Count: count})
				expect = append(expect, s)
			}
		}
		s := svcs[0]
		for _, from := range []ClientKind{ClientExternal, ClientPod} {
			in.Probes = append(in.Probes, ProbeSpec{From: from, Target: netip.AddrPortFrom(DefaultNodeIP.Addr(), s.NodePort), Protocol: s.Protocol, Count: count})
			expect = append(expect, s)
		}
	}

	out := runFixture(t, in)
	t.Logf("set up %d endpoints in %d namespaces in %.3fs", out.Endpoints, out.Namespaces, out.SetupSeconds)
	if len(out.Probes) != len(expect) {
		t.Fatalf("got %d probe results, want %d", len(out.Probes), len(expect))
	}
	clientIP := map[ClientKind]netip.Addr{ClientPod: DefaultClientPodIP, ClientNode: DefaultNodeIP.Addr(), ClientExternal: DefaultExternalClientIP}
	total := 0
	for i, r := range out.Probes {
		s := expect[i]
		name := string(r.Spec.Protocol) + " " + r.Spec.Target.String() + " from " + string(r.Spec.From)
		total += r.OK
		if r.OK != count || len(r.Failures) != 0 {
			t.Errorf("%s: %d/%d answered; failures %v %v", name, r.OK, count, r.Failures, r.FailureSample)
		}
		valid := map[netip.AddrPort]bool{}
		for _, ep := range s.Endpoints {
			valid[netip.AddrPortFrom(ep, s.TargetPort)] = true
		}
		for ep, tally := range r.Endpoints {
			if !valid[ep] {
				t.Errorf("%s: answered by %s, not an endpoint of the service (%v)", name, ep, s.Endpoints)
			}
			for src := range tally.Sources {
				if src != clientIP[r.Spec.From] {
					t.Errorf("%s: endpoint %s saw source %s, want the client's own %s", name, ep, src, clientIP[r.Spec.From])
				}
			}
		}
		if r.SourcePreserved != r.OK {
			t.Errorf("%s: source address and port preserved in %d of %d replies", name, r.SourcePreserved, r.OK)
		}
		// 40 draws over 5 endpoints all landing on one: p = 5*0.2^40.
		if r.OK == count && len(r.Endpoints) < 2 {
			t.Errorf("%s: all %d connections reached %v: the random cascade is not spreading", name, count, r.Endpoints)
		}
	}
	t.Logf("%d probes, %d connections attributed", len(out.Probes), total)
}
