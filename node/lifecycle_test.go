package node

import (
	"slices"
	"testing"
	"time"

	"github.com/kpsim/kpsim/reports"
)

func TestParseStat(t *testing.T) {
	p, ok := parseStat(42, "42 (iptables-restor) S 7 42 42 0 -1")
	if !ok || p.pid != 42 || p.ppid != 7 || p.comm != "iptables-restor" {
		t.Errorf("parseStat = %+v %v", p, ok)
	}
	// comm may hold spaces and parentheses; the last ")" ends it.
	p, ok = parseStat(5, "5 (a) b (c)) R 3 5")
	if !ok || p.ppid != 3 || p.comm != "a) b (c)" {
		t.Errorf("parseStat with parentheses = %+v %v", p, ok)
	}
	if _, ok := parseStat(1, "1 garbage"); ok {
		t.Error("parseStat accepted a line without comm")
	}
}

func TestBelow(t *testing.T) {
	all := []process{{10, 1, "kube-proxy"}, {12, 10, "sh"}, {11, 1, "other"}, {13, 12, "iptables-restor"}, {14, 11, "nft"}}
	var got []int
	for _, p := range below(all, 10) {
		got = append(got, p.pid)
	}
	if !slices.Equal(got, []int{12, 13}) {
		t.Errorf("below(10) = %v, want [12 13]", got)
	}
	if !isRuleWriter("iptables-restor") || !isRuleWriter("nft") || isRuleWriter("iptables") {
		t.Error("isRuleWriter")
	}
}

func TestKubeIPTables(t *testing.T) {
	save := `*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP
-A INPUT -j ACCEPT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
COMMIT
`
	chains, n := kubeIPTables([]byte(save))
	if !slices.Equal(chains, []string{"filter/KUBE-FIREWALL", "nat/KUBE-SERVICES"}) || n != 3 {
		t.Errorf("kubeIPTables = %v, %d rules; want filter/KUBE-FIREWALL nat/KUBE-SERVICES, 3 rules", chains, n)
	}
	sets, members := kubeIPSets([]byte("create KUBE-CLUSTER-IP hash:ip,port family inet\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:443\ncreate other hash:ip\nadd other 1.2.3.4\n"))
	if !slices.Equal(sets, []string{"ipset KUBE-CLUSTER-IP"}) || members != 1 {
		t.Errorf("kubeIPSets = %v, %d", sets, members)
	}
}

func TestFootprintNamed(t *testing.T) {
	items := []footprintItem{
		{kind: "ipvs", count: "ipvs/virtualServers", n: 7, names: []string{"a", "b", "c", "d", "e", "f", "g"}},
		{kind: "iptables-legacy", count: "iptables-legacy/rules", n: 3},
		{kind: "nftables", count: "nftables/tables", n: 0},
	}
	got := footprintNamed(items, func(footprintItem) bool { return true })
	want := []string{"ipvs: a", "ipvs: b", "ipvs: c", "ipvs: d", "ipvs: e", "and 2 more of ipvs/virtualServers", "iptables-legacy/rules: 3"}
	if !slices.Equal(got, want) {
		t.Errorf("footprintNamed = %q, want %q", got, want)
	}
}

// TestWatchStop: the watch's counts split by phase and bucket by send
// time, and stale answers say where they went.
func TestWatchStop(t *testing.T) {
	start := time.Now().Add(-3 * time.Second)
	w := &watch{rate: 10, start: start, cancel: func() {},
		targets: []watchTarget{{key: "default/web-0:http", svc: "default/web-0"}}}
	w.phases = []watchPhase{{"before", start}, {"down", start.Add(time.Second)}, {"after", start.Add(2 * time.Second)}}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	w.sends = []watchSend{
		{at: at(100 * time.Millisecond), result: watchOK},
		{at: at(1100 * time.Millisecond), result: watchStale, endpoint: "10.244.0.9:8080"},
		{at: at(1200 * time.Millisecond), result: watchFailed, failure: "timeout"},
		{at: at(2600 * time.Millisecond), result: watchOK},
	}
	w.markAt("stop", at(time.Second))
	got := w.stop()
	if got.Sent != 4 || got.OK != 2 || got.Stale != 1 || got.Failed != 1 || got.Failures["timeout"] != 1 {
		t.Errorf("totals %+v", got)
	}
	if got.StaleTo["default/web-0:http -> 10.244.0.9:8080"] != 1 {
		t.Errorf("StaleTo %v", got.StaleTo)
	}
	wantPhases := []reports.WatchPhase{{Name: "before", Sent: 1, OK: 1}, {Name: "down", Sent: 2, Stale: 1, Failed: 1}, {Name: "after", Sent: 1, OK: 1}}
	for i, p := range got.Phases {
		p.Seconds = 0
		if p != wantPhases[i] {
			t.Errorf("phase %d = %+v, want %+v", i, p, wantPhases[i])
		}
	}
	if b := got.Buckets[2]; b.Sent != 2 || b.Stale != 1 || b.Failed != 1 { // 1.0-1.5 s
		t.Errorf("bucket 2 = %+v", b)
	}
	if len(got.Marks) != 1 || got.Marks[0].Seconds != 1 {
		t.Errorf("marks %+v", got.Marks)
	}
}
