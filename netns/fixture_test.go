package netns

import (
	"fmt"
	"net/netip"
	"strings"
)

// makeServices builds n services of m endpoints each: ClusterIP
// 10.96.<i/250>.<i%250+1>, endpoints 10.244.<i/50>.<(i%50)*5+j+1>-style
// blocks so each service's endpoints are contiguous.
func makeServices(n, m int, proto Protocol, port, targetPort uint16) []fixtureService {
	svcs := make([]fixtureService, n)
	next := uint32(v4(netip.MustParseAddr("10.244.0.0")))
	for i := range svcs {
		s := &svcs[i]
		s.ClusterIP = netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		s.Port, s.TargetPort, s.Protocol = port, targetPort, proto
		for range m {
			s.Endpoints = append(s.Endpoints, fromV4(next))
			next++
		}
	}
	return svcs
}

// iptablesFixture renders services as a kube-proxy-style nat table for
// iptables-restore: a services chain, one chain per service choosing an
// endpoint with statistic --mode random cascades (1/m, 1/(m-1), ..., last
// unconditional), one DNAT chain per endpoint. A test fixture: the point is
// real DNAT in the kernel, not kube-proxy's exact rules.
func iptablesFixture(nodeIP netip.Addr, svcGroups ...[]fixtureService) string {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KPSIM-SERVICES - [0:0]\n:KPSIM-NODEPORTS - [0:0]\n")
	var rules strings.Builder
	id := 0
	for _, svcs := range svcGroups {
		for _, s := range svcs {
			svc := fmt.Sprintf("KPSIM-SVC-%d", id)
			fmt.Fprintf(&b, ":%s - [0:0]\n", svc)
			fmt.Fprintf(&rules, "-A KPSIM-SERVICES -d %s/32 -p %s --dport %d -j %s\n", s.ClusterIP, s.Protocol, s.Port, svc)
			if s.NodePort != 0 {
				fmt.Fprintf(&rules, "-A KPSIM-NODEPORTS -d %s/32 -p %s --dport %d -j %s\n", nodeIP, s.Protocol, s.NodePort, svc)
			}
			for j, ep := range s.Endpoints {
				sep := fmt.Sprintf("KPSIM-SEP-%d-%d", id, j)
				fmt.Fprintf(&b, ":%s - [0:0]\n", sep)
				left := len(s.Endpoints) - j
				if left > 1 {
					fmt.Fprintf(&rules, "-A %s -m statistic --mode random --probability %.11f -j %s\n", svc, 1/float64(left), sep)
				} else {
					fmt.Fprintf(&rules, "-A %s -j %s\n", svc, sep)
				}
				fmt.Fprintf(&rules, "-A %s -p %s -j DNAT --to-destination %s:%d\n", sep, s.Protocol, ep, s.TargetPort)
			}
			id++
		}
	}
	b.WriteString("-A PREROUTING -j KPSIM-SERVICES\n-A OUTPUT -j KPSIM-SERVICES\n-A KPSIM-SERVICES -j KPSIM-NODEPORTS\n")
	b.WriteString(rules.String())
	b.WriteString("COMMIT\n")
	return b.String()
}

func allEndpoints(svcGroups ...[]fixtureService) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, svcs := range svcGroups {
		for _, s := range svcs {
			for _, ep := range s.Endpoints {
				if !seen[ep] {
					seen[ep] = true
					out = append(out, ep)
				}
			}
		}
	}
	return out
}
