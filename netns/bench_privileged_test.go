package netns

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkPrivilegedDataplaneSetup2000x10 sets up the fake pods of a
// 2000 Services x 10 endpoints scenario: 20,000 endpoint addresses packed
// 256 per namespace, veths, routes and TCP+UDP responders. Target: <= 1 s.
func BenchmarkPrivilegedDataplaneSetup2000x10(b *testing.B) {
	requireRoot(b)
	svcs := makeServices(2000, 10, TCP, 80, 8080)
	in := fixtureInput{
		Pods:      PodNetworkConfig{Ports: []Port{{TCP, 8080}, {UDP, 5353}}, AddressesPerNamespace: 256},
		Endpoints: allEndpoints(svcs),
	}
	var total float64
	var out fixtureOutput
	for b.Loop() {
		out = runFixture(b, in)
		total += out.SetupSeconds
	}
	b.ReportMetric(total/float64(b.N), "setup-s")
	b.ReportMetric(float64(out.Endpoints), "endpoints")
	b.ReportMetric(float64(out.Namespaces), "namespaces")
	if s := total / float64(b.N); s > 1 {
		b.Logf("setup took %.3f s, above the 1 s target", s)
	}
}

// BenchmarkPrivilegedProbeThroughput measures new connections per second
// through a kube-proxy-style DNAT fixture (100 Services x 10 endpoints)
// and directly to a pod IP, in the same node, alternating (DNAT, direct,
// DNAT, direct) so drift hits both alike; for TCP and UDP, from the client
// pod and from the node. Target: DNAT/direct >= 0.9.
func BenchmarkPrivilegedProbeThroughput(b *testing.B) {
	requireRoot(b, "iptables-legacy-restore")
	tcp := makeServices(100, 10, TCP, 80, 8080)
	udp := make([]fixtureService, len(tcp))
	for i, s := range tcp {
		s.Protocol, s.Port, s.TargetPort = UDP, 53, 5353
		udp[i] = s
	}
	const count, rounds = 5000, 4
	in := fixtureInput{
		Pods:           PodNetworkConfig{Ports: []Port{{TCP, 8080}, {UDP, 5353}}, AddressesPerNamespace: 16},
		Endpoints:      allEndpoints(tcp),
		RestoreCmd:     "iptables-legacy-restore",
		Rules:          iptablesFixture(DefaultNodeIP.Addr(), tcp, udp),
		FlushConntrack: true,
	}
	type key struct {
		proto Protocol
		from  ClientKind
	}
	var keys []key
	for _, svcs := range [][]fixtureService{tcp, udp} {
		s := svcs[0]
		for _, from := range []ClientKind{ClientPod, ClientNode} {
			keys = append(keys, key{s.Protocol, from})
			for range rounds {
				in.Probes = append(in.Probes,
					ProbeSpec{From: from, Target: netip.AddrPortFrom(s.ClusterIP, s.Port), Protocol: s.Protocol, Count: count},
					ProbeSpec{From: from, Target: netip.AddrPortFrom(s.Endpoints[0], s.TargetPort), Protocol: s.Protocol, Count: count})
			}
		}
	}
	type agg struct{ dnatN, dnatS, directN, directS float64 }
	sums := map[key]*agg{}
	for b.Loop() {
		out := runFixture(b, in)
		for i, r := range out.Probes {
			if r.OK != r.Spec.Count {
				b.Errorf("%s %s from %s: %d/%d answered, failures %v %v", r.Spec.Protocol, r.Spec.Target, r.Spec.From, r.OK, r.Spec.Count, r.Failures, r.FailureSample)
			}
			k := key{r.Spec.Protocol, r.Spec.From}
			if sums[k] == nil {
				sums[k] = &agg{}
			}
			if i%2 == 0 {
				sums[k].dnatN += float64(r.Sent)
				sums[k].dnatS += r.Duration.Seconds()
			} else {
				sums[k].directN += float64(r.Sent)
				sums[k].directS += r.Duration.Seconds()
			}
		}
	}
	for _, k := range keys {
		a := sums[k]
		dnat, direct := a.dnatN/a.dnatS, a.directN/a.directS
		name := fmt.Sprintf("%s-%s", k.proto, k.from)
		b.ReportMetric(dnat, name+"-dnat-conn/s")
		b.ReportMetric(direct, name+"-direct-conn/s")
		b.ReportMetric(dnat/direct, name+"-ratio")
	}
}
