package node

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSpreadSample(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want []int
	}{
		{10, 2, []int{2, 7}},
		{10000, 4, []int{1250, 3750, 6250, 8750}},
		{3, 10, []int{0, 1, 2}},
		{5, 5, []int{0, 1, 2, 3, 4}},
		{0, 3, []int{}},
	} {
		if got := spreadSample(tc.n, tc.k); !cmp.Equal(tc.want, got) {
			t.Errorf("spreadSample(%d, %d) = %v, want %v", tc.n, tc.k, got, tc.want)
		}
	}
}

func TestChainPosition(t *testing.T) {
	chain := []string{
		`-A KUBE-SERVICES -d 10.96.0.11/32 -p tcp -m comment --comment "default/svc1:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-6FQZKDMVESNX7NUN`,
		`-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "default/dns:dns cluster IP" -m udp --dport 80 -j KUBE-SVC-AAAA`,
		`-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/svc0:http cluster IP" -m tcp --dport 8080 -j KUBE-SVC-BBBB`,
		`-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/svc0:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-MDPTZLWMZL4BIHP2`,
		`-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`,
	}
	for _, tc := range []struct {
		dst  string
		want int
	}{{"10.96.0.11:80", 1}, {"10.96.0.10:80", 4}, {"10.96.0.10:8080", 3}, {"10.96.0.1:80", 0}, {"10.96.0.110:80", 0}} {
		if got := chainPosition(chain, netip.MustParseAddrPort(tc.dst), "tcp"); got != tc.want {
			t.Errorf("chainPosition(%s) = %d, want %d", tc.dst, got, tc.want)
		}
	}
}

func TestDirectTargetAndStray(t *testing.T) {
	eps := []netip.AddrPort{netip.MustParseAddrPort("10.244.0.1:8080"), netip.MustParseAddrPort("10.244.0.2:8080"), netip.MustParseAddrPort("10.244.0.3:8080")}
	var got []netip.AddrPort
	for r := range 4 {
		got = append(got, directTarget(eps, r, 1))
	}
	if want := []netip.AddrPort{eps[1], eps[2], eps[0], eps[1]}; !cmp.Equal(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })) {
		t.Errorf("target 1's direct endpoints by round: %v, want each in turn from the second: %v", got, want)
	}
	replies := map[netip.AddrPort]int{eps[0]: 5, eps[2]: 3, netip.MustParseAddrPort("10.244.9.9:8080"): 2}
	if n := strayReplies(replies, eps); n != 2 {
		t.Errorf("stray through the Service: %d, want 2", n)
	}
	if n := strayReplies(replies, eps[:1]); n != 5 {
		t.Errorf("stray direct to %s: %d, want 5", eps[0], n)
	}
}
