package netns

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseReply(t *testing.T) {
	ep := netip.MustParseAddrPort("10.244.0.7:8080")
	src := netip.MustParseAddrPort("10.244.255.254:20001")
	tests := []struct {
		name    string
		in      string
		want    Reply
		wantErr bool
	}{
		{name: "tcp", in: "KPSIM1 tcp 10.244.0.7:8080 10.244.255.254:20001\n", want: Reply{Protocol: TCP, Endpoint: ep, Source: src}},
		{name: "udp with nonce", in: "KPSIM1 udp 10.244.0.7:8080 10.244.255.254:20001 1z\n", want: Reply{Protocol: UDP, Endpoint: ep, Source: src, Nonce: "1z"}},
		{name: "no newline", in: "KPSIM1 tcp 10.244.0.7:8080 10.244.255.254:20001", wantErr: true},
		{name: "wrong magic", in: "HTTP/1.1 200 OK\n", wantErr: true},
		{name: "unknown protocol", in: "KPSIM1 icmp 10.244.0.7:8080 10.244.255.254:20001\n", wantErr: true},
		{name: "bad endpoint", in: "KPSIM1 tcp 10.244.0.7 10.244.255.254:20001\n", wantErr: true},
		{name: "bad source", in: "KPSIM1 tcp 10.244.0.7:8080 nope\n", wantErr: true},
		{name: "too many fields", in: "KPSIM1 udp 10.244.0.7:8080 10.244.255.254:20001 a b\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReply([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseReply(%q) error = %v, want error %t", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("ParseReply(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestReplyRoundTrip(t *testing.T) {
	for _, r := range []Reply{
		{Protocol: TCP, Endpoint: netip.MustParseAddrPort("10.244.1.2:80"), Source: netip.MustParseAddrPort("172.18.0.2:45000")},
		{Protocol: UDP, Endpoint: netip.MustParseAddrPort("10.244.1.2:53"), Source: netip.MustParseAddrPort("203.0.113.10:20000"), Nonce: "abc"},
		{Protocol: SCTP, Endpoint: netip.MustParseAddrPort("10.244.1.2:9"), Source: netip.MustParseAddrPort("10.244.255.254:1")},
	} {
		wire := appendReply(nil, r)
		if string(wire) != r.String() {
			t.Errorf("appendReply = %q, String = %q", wire, r.String())
		}
		got, err := ParseReply(wire)
		if err != nil || got != r {
			t.Errorf("ParseReply(%q) = %+v, %v; want %+v", wire, got, err, r)
		}
	}
}

func TestUDPRequest(t *testing.T) {
	req := appendUDPRequest(nil, "k3")
	if n, ok := parseUDPRequest(req); !ok || n != "k3" {
		t.Errorf("parseUDPRequest(%q) = %q, %t", req, n, ok)
	}
	for _, bad := range []string{"", "KPSIM1? \n", "KPSIM1? a b\n", "KPSIM1? abc", "hello\n"} {
		if _, ok := parseUDPRequest([]byte(bad)); ok {
			t.Errorf("parseUDPRequest(%q) accepted", bad)
		}
	}
}
