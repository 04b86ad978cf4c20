package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// procIPVSHeader is the three header lines of /proc/net/ip_vs.
const procIPVSHeader = "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"

func TestImpliedIPVS(t *testing.T) {
	// 10.96.0.20:80 is 0A600014:0050; the real servers 10.244.2.10-12:8080
	// are 0AF4020A-0C:1F90.
	vs := func(sched string, weights ...string) string {
		s := "TCP  0A600014:0050 " + sched + " \n"
		for i, w := range weights {
			s += fmt.Sprintf("  -> 0AF402%02X:1F90      Masq    %s      0          0         \n", 10+i, w)
		}
		return s
	}
	eps := func(p ...float64) []EndpointShare {
		var out []EndpointShare
		for i, x := range p {
			out = append(out, EndpointShare{Endpoint: fmt.Sprintf("10.244.2.%d:8080", 10+i), Probability: x})
		}
		return out
	}
	const key = "TCP 10.96.0.20:80"
	for _, tc := range []struct {
		name string
		text string
		want map[string]ServiceShares
	}{
		{
			name: "wrr is weight over the sum of weights; weight 0 gets nothing",
			text: vs("wrr", "3", "1", "0"),
			want: map[string]ServiceShares{key: {Chain: key, Endpoints: eps(0.75, 0.25, 0)}},
		},
		{
			name: "rr takes turns whatever the weight, but skips weight 0",
			text: vs("rr", "5", "1", "0"),
			want: map[string]ServiceShares{key: {Chain: key, Endpoints: eps(0.5, 0.5, 0)}},
		},
		{
			name: "equal weights: exactly 1/3 each, as float64",
			text: vs("wrr", "1", "1", "1"),
			want: map[string]ServiceShares{key: {Chain: key, Endpoints: eps(1.0/3, 1.0/3, 1.0/3)}},
		},
		{
			name: "all real servers draining: no new connection is scheduled",
			text: vs("rr", "0", "0"),
			want: map[string]ServiceShares{key: {Chain: key, Endpoints: eps(0, 0), Unmatched: 1}},
		},
		{
			name: "a virtual server without real servers is left out",
			text: vs("lc"),
			want: map[string]ServiceShares{},
		},
		{
			name: "crafted table: IPv4, IPv6, persistence, one-packet, firewall mark",
			text: string(readTestdata(t, "ip_vs-crafted.txt")),
			want: map[string]ServiceShares{
				"TCP 10.96.0.11:80": {Chain: "TCP 10.96.0.11:80", Endpoints: []EndpointShare{{"10.244.1.11:8080", 0.5}, {"10.244.1.10:8080", 0.5}}},
				"TCP 10.96.0.10:80": {Chain: "TCP 10.96.0.10:80", Endpoints: []EndpointShare{{"10.244.0.10:8080", 1}}},
				"UDP 10.96.0.10:53": {Chain: "UDP 10.96.0.10:53", Endpoints: []EndpointShare{{"10.244.0.10:53", 0}}, Unmatched: 1},
				"FWM 12":            {Chain: "FWM 12", Endpoints: []EndpointShare{{"10.244.0.12:8080", 1}}},
				"TCP [fd00::a]:80":  {Chain: "TCP [fd00::a]:80", Endpoints: []EndpointShare{{"[fd00::1:a]:8080", 1}}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.text
			if !strings.HasPrefix(text, "IP Virtual Server") {
				text = procIPVSHeader + text
			}
			got, err := ImpliedIPVS([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestImpliedIPVSErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"scheduler without a fixed split", "TCP  0A600014:0050 lc \n  -> 0AF4020A:1F90 Masq 1 0 0\n", "virtual server TCP 10.96.0.20:80: scheduler lc"},
		{"real server twice", "TCP  0A600014:0050 rr \n  -> 0AF4020A:1F90 Masq 1 0 0\n  -> 0AF4020A:1F90 Masq 1 0 0\n", "real server 10.244.2.10:8080 listed twice"},
		{"virtual server twice", "TCP  0A600014:0050 rr \n  -> 0AF4020A:1F90 Masq 1 0 0\nTCP  0A600014:0050 rr \n  -> 0AF4020B:1F90 Masq 1 0 0\n", "virtual server TCP 10.96.0.20:80 listed twice"},
		{"unreadable table", "TCP  0A600014 rr \n", "bad address:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ImpliedIPVS([]byte(procIPVSHeader + tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestIPVSServiceKey(t *testing.T) {
	svcs, err := ParseProcIPVS(readTestdata(t, "ip_vs-crafted.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range svcs {
		got = append(got, s.Key())
	}
	want := []string{"TCP 10.96.0.11:80", "TCP 10.96.0.10:80", "UDP 10.96.0.10:53", "TCP 172.18.0.2:31000", "FWM 12", "TCP [fd00::a]:80"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
