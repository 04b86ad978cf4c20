package rules

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseProcIPVS(t *testing.T) {
	got, err := ParseProcIPVS(readTestdata(t, "ip_vs-crafted.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	want := []IPVSService{
		{Protocol: "TCP", Address: ap("10.96.0.11:80"), Scheduler: "rr", Dests: []IPVSDest{
			{Address: ap("10.244.1.11:8080"), Forward: "Masq", Weight: 1},
			{Address: ap("10.244.1.10:8080"), Forward: "Masq", Weight: 1, ActiveConns: 2, InactiveConns: 5},
		}},
		{Protocol: "TCP", Address: ap("10.96.0.10:80"), Scheduler: "rr", Persistent: true, Timeout: 10800,
			Netmask: netip.MustParseAddr("255.255.255.255"), Dests: []IPVSDest{
				{Address: ap("10.244.0.10:8080"), Forward: "Masq", Weight: 1},
			}},
		{Protocol: "UDP", Address: ap("10.96.0.10:53"), Scheduler: "rr", OnePacket: true, Dests: []IPVSDest{
			{Address: ap("10.244.0.10:53"), Forward: "Masq", Weight: 0},
		}},
		{Protocol: "TCP", Address: ap("172.18.0.2:31000"), Scheduler: "rr", Persistent: true, Timeout: 60,
			Netmask: netip.MustParseAddr("255.255.255.0")},
		{Protocol: "FWM", FWMark: 12, Scheduler: "wrr", Dests: []IPVSDest{
			{Address: ap("10.244.0.12:8080"), Forward: "Route", Weight: 3},
		}},
		{Protocol: "TCP", Address: ap("[fd00::a]:80"), Scheduler: "rr", Dests: []IPVSDest{
			{Address: ap("[fd00::1:a]:8080"), Forward: "Masq", Weight: 1},
		}},
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
		cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); d != "" {
		t.Errorf("ParseProcIPVS (-want +got):\n%s", d)
	}
}

func TestParseProcIPVSErrors(t *testing.T) {
	header := "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
	for _, tc := range []struct{ name, text, want string }{
		{"dest first", header + "  -> 0AF4000A:1F90      Masq    1      0          0\n", "line 4: real server before any virtual server"},
		{"bad protocol", header + "XYZ  0A60000A:0050 rr\n", "line 4: bad virtual server line"},
		{"bad address", header + "TCP  0A6000:0050 rr\n", `bad IPv4 address "0A6000"`},
		{"bad port", header + "TCP  0A60000A:50 rr\n", "bad port"},
		{"short dest", header + "TCP  0A60000A:0050 rr\n  -> 0AF4000A:1F90 Masq 1\n", "line 5: bad real server line"},
		{"bad weight", header + "TCP  0A60000A:0050 rr\n  -> 0AF4000A:1F90 Masq x 0 0\n", `bad number "x"`},
		{"negative weight", header + "TCP  0A60000A:0050 rr\n  -> 0AF4000A:1F90 Masq -1 0 0\n", `bad number "-1"`},
		{"weight over int32", header + "TCP  0A60000A:0050 rr\n  -> 0AF4000A:1F90 Masq 2147483648 0 0\n", `bad number "2147483648"`},
		{"bad persistence", header + "TCP  0A60000A:0050 rr persistent 10\n", "bad persistence"},
		{"trailing junk", header + "TCP  0A60000A:0050 rr what\n", `unexpected "what"`},
		{"bad ipv6", header + "TCP  [10.0.0.1]:0050 rr\n", "bad IPv6 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProcIPVS([]byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
	// An empty table (ip_vs loaded, nothing programmed) is no error.
	if s, err := ParseProcIPVS([]byte(header)); err != nil || len(s) != 0 {
		t.Errorf("empty table: %v, %v", s, err)
	}
}

func TestParseIPSetSave(t *testing.T) {
	got, err := ParseIPSetSave(readTestdata(t, "ipset-crafted.save"))
	if err != nil {
		t.Fatal(err)
	}
	want := []IPSet{
		{Name: "KUBE-CLUSTER-IP", Type: "hash:ip,port", Options: "family inet hashsize 1024 maxelem 65536 comment bucketsize 12 initval 0x6a1f2b3c", Members: []IPSetMember{
			{Member: "10.96.0.11,tcp:80", Options: `comment "default/svc1:http cluster IP"`},
			{Member: "10.96.0.10,tcp:80", Options: `comment "default/svc0:http cluster IP"`},
			{Member: "10.96.0.10,udp:53", Options: `comment "default/svc0:dns cluster IP"`},
		}},
		{Name: "KUBE-LOOP-BACK", Type: "hash:ip,port,ip", Options: "family inet hashsize 1024 maxelem 65536 comment", Members: []IPSetMember{
			{Member: "10.244.0.10,tcp:8080,10.244.0.10", Options: `comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"`},
		}},
		{Name: "KUBE-NODE-PORT-TCP", Type: "bitmap:port", Options: "range 0-65535 comment", Members: []IPSetMember{}},
		{Name: "KUBE-LOAD-BALANCER", Type: "hash:ip,port", Options: "family inet hashsize 1024 maxelem 65536 comment", Members: []IPSetMember{}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseIPSetSave (-want +got):\n%s", d)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"add before create", "add S 1.2.3.4\n", "line 1: add to set S, which is not created before"},
		{"created twice", "create S hash:ip\ncreate S hash:ip\n", "line 2: set S created twice"},
		{"other verb", "create S hash:ip\nflush S x\n", `line 2: unexpected line "flush S x"`},
		{"no member", "create S hash:ip\nadd S\n", "line 2: bad line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseIPSetSave([]byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
}

func fakeIPVSDump(t *testing.T) (*IPVSDump, *fakeRun) {
	t.Helper()
	f := &fakeRun{out: map[string]string{
		"iptables-legacy-save":  string(readTestdata(t, "ipvs-iptables-crafted.save")),
		"ip6tables-legacy-save": "",
		"ipset save":            string(readTestdata(t, "ipset-crafted.save")),
	}}
	proc := readTestdata(t, "ip_vs-crafted.txt")
	readFile := func(path string) ([]byte, error) {
		if path != procIPVSPath {
			return nil, errors.New("unexpected read of " + path)
		}
		return proc, nil
	}
	d, err := readIPVS(context.Background(), f, BackendLegacy, readFile)
	if err != nil {
		t.Fatal(err)
	}
	return d, f
}

func TestReadIPVS(t *testing.T) {
	d, f := fakeIPVSDump(t)
	if diff := cmp.Diff([]string{"iptables-legacy-save", "ip6tables-legacy-save", "ipset save"}, f.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	counts := d.Counts()
	want := map[string]int{
		"ipvs/virtualServers": 6, "ipvs/realServers": 6,
		"ipset/members": 4, "ipset/sets": 4,
		"ipset/set/KUBE-CLUSTER-IP": 3, "ipset/set/KUBE-LOOP-BACK": 1,
		"ipset/set/KUBE-NODE-PORT-TCP": 0, "ipset/set/KUBE-LOAD-BALANCER": 0,
	}
	for k, v := range d.IPTables.Counts() {
		want[k] = v
	}
	if want["iptables/nat"] == 0 {
		t.Fatalf("no iptables counts from the crafted save: %v", want)
	}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	checkGolden(t, "ip_vs-crafted.txt.normalized", d.Normalize())
	checkGolden(t, "ip_vs-crafted.txt.ipvsadm", string(FormatIPVSAdm("IP Virtual Server version 1.2.1 (size=4096)", d.Services)))

	f.fail = map[string]bool{"ipset save": true}
	if _, err := readIPVS(context.Background(), f, BackendLegacy, func(string) ([]byte, error) { return d.ProcIPVS, nil }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing ipset save: %v", err)
	}
	f.fail = nil
	if _, err := readIPVS(context.Background(), f, BackendLegacy, func(p string) ([]byte, error) { return nil, errors.New("open " + p + ": no such file") }); err == nil || !strings.Contains(err.Error(), "ip_vs module") {
		t.Errorf("missing /proc/net/ip_vs: %v", err)
	}
}

// Two dumps of the same state in another kernel order normalize equal;
// a changed weight does not.
func TestNormalizeIPVSOrder(t *testing.T) {
	d, _ := fakeIPVSDump(t)
	r := *d
	r.Services = nil
	for i := len(d.Services) - 1; i >= 0; i-- {
		s := d.Services[i]
		s.Dests = nil
		for j := len(d.Services[i].Dests) - 1; j >= 0; j-- {
			dst := d.Services[i].Dests[j]
			dst.ActiveConns += 7 // state, not configuration
			s.Dests = append(s.Dests, dst)
		}
		r.Services = append(r.Services, s)
	}
	r.Sets = nil
	for i := len(d.Sets) - 1; i >= 0; i-- {
		s := d.Sets[i]
		s.Options = strings.Replace(s.Options, "hashsize 1024", "hashsize 4096", 1)
		s.Members = nil
		for j := len(d.Sets[i].Members) - 1; j >= 0; j-- {
			s.Members = append(s.Members, d.Sets[i].Members[j])
		}
		r.Sets = append(r.Sets, s)
	}
	if diff := DiffNormalized(d.Normalize(), r.Normalize()); diff != "" {
		t.Errorf("reordered dump normalizes differently:\n%s", diff)
	}
	r.Services = append([]IPVSService(nil), r.Services...)
	r.Services[0].Dests = append([]IPVSDest(nil), r.Services[0].Dests...)
	r.Services[0].Dests[0].Weight = 0
	if DiffNormalized(d.Normalize(), r.Normalize()) == "" {
		t.Error("a changed weight normalizes equal")
	}
}

func TestSaveDumpsIPVS(t *testing.T) {
	d, f := fakeIPVSDump(t)
	dir := t.TempDir()
	if err := SaveDumps(dir, "run1", d); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"run1.ip_vs.gz":               string(d.ProcIPVS),
		"run1.ipset-save.gz":          f.out["ipset save"],
		"run1.ipvsadm.gz":             string(readTestdata(t, "ip_vs-crafted.txt.ipvsadm")),
		"run1.iptables-save.gz":       f.out["iptables-legacy-save"],
		"run1.ip6tables-save.gz":      "",
		"run1.iptables.normalized.gz": d.IPTables.Normalize(),
		"run1.ipvs.normalized.gz":     d.normalizeIPVS(),
	} {
		if got := string(readGzip(t, filepath.Join(dir, file))); got != want {
			t.Errorf("%s differs:\n%s", file, cmp.Diff(want, got))
		}
	}
	// What the ipvsadm listing documents: counts with grep.
	listing := string(readGzip(t, filepath.Join(dir, "run1.ipvsadm.gz")))
	vs, rs := 0, 0
	for _, l := range strings.Split(listing, "\n") {
		for _, p := range []string{"TCP ", "UDP ", "SCTP ", "FWM "} {
			if strings.HasPrefix(l, p) {
				vs++
			}
		}
		if strings.Contains(l, "->") {
			rs++
		}
	}
	if c := d.Counts(); vs != c["ipvs/virtualServers"] || rs-1 != c["ipvs/realServers"] {
		t.Errorf("grep of the listing: %d virtual, %d real servers; Counts %v", vs, rs-1, c)
	}
}
