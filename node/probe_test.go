package node

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/sim"
)

// An IPVS table (hex as /proc/net/ip_vs prints it): a ClusterIP with three
// real servers, one draining; a NodePort on the node address with the
// node-local one only; a UDP port on the same ClusterIP.
const ipvsTable = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A60000A:0050 rr 
  -> 0AF4000A:1F90      Masq    1      0          0         
  -> 0AF4000B:1F90      Masq    1      0          0         
  -> 0AF4000C:1F90      Masq    0      3          0         
TCP  AC120002:7530 rr 
  -> 0AF4000A:1F90      Masq    1      0          0         
UDP  0A60000A:0035 rr 
  -> 0AF4000A:0035      Masq    1      0          0         
`

func TestIPVSSharesByTarget(t *testing.T) {
	byVS, err := rules.ImpliedIPVS([]byte(ipvsTable))
	if err != nil {
		t.Fatal(err)
	}
	svc := sim.Service{Namespace: "ns", Name: "web", ClusterIP: netip.MustParseAddr("10.96.0.10")}
	http := sim.Port{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30000}
	dns := sim.Port{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}
	unnamed := sim.Port{Protocol: corev1.ProtocolTCP, Port: 8080}
	ap := netip.MustParseAddrPort
	targets := []probeTarget{
		{svc: svc, port: http, target: ap("10.96.0.10:80")},
		{svc: svc, port: http, target: ap("172.18.0.2:30000"), exp: Expectation{Local: true}},
		{svc: svc, port: dns, target: ap("10.96.0.10:53")},
		// No virtual server: no shares, rather than another port's.
		{svc: svc, port: unnamed, target: ap("10.96.0.10:8080")},
	}
	got := ipvsSharesByTarget(byVS, targets)
	want := map[string]rules.ServiceShares{
		"ns/web:http": {Service: "ns/web:http", Chain: "TCP 10.96.0.10:80", Endpoints: []rules.EndpointShare{
			{Endpoint: "10.244.0.10:8080", Probability: 0.5}, {Endpoint: "10.244.0.11:8080", Probability: 0.5}, {Endpoint: "10.244.0.12:8080", Probability: 0},
		}},
		"ns/web:http" + rules.LocalSuffix: {Service: "ns/web:http", Chain: "TCP 172.18.0.2:30000", Local: true, Endpoints: []rules.EndpointShare{
			{Endpoint: "10.244.0.10:8080", Probability: 1},
		}},
		"ns/web:dns": {Service: "ns/web:dns", Chain: "UDP 10.96.0.10:53", Endpoints: []rules.EndpointShare{
			{Endpoint: "10.244.0.10:53", Probability: 1},
		}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// distributionSample finds them under the same keys.
	for _, tg := range targets[:3] {
		if _, ok := got[impliedKey(tg)]; !ok {
			t.Errorf("no shares under impliedKey %q", impliedKey(tg))
		}
	}
}
