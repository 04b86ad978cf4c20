package rules

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kpsim/kpsim/toolexec"
)

// -update-rules rewrites the golden files testdata/*.normalized.
var updateRules = flag.Bool("update-rules", false, "rewrite testdata/*.normalized golden files")

// Testdata: kube-proxy-iptables-{legacy,nft}.save are live captures
// (package proxier's TestPrivilegedRules -capture-rules, before it had
// svc5...: 4 Services with 11 endpoints and svc4 without);
// iptables-crafted-counters.save is
// iptables-crafted.input.rules loaded with iptables-legacy-restore in an
// "unshare -n" namespace and saved with -c (two counters edited to non-zero
// by hand); ip6tables-crafted.save likewise for IPv6.

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkGolden compares got with testdata/name, or rewrites it with
// -update-rules.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateRules {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-rules to create it)", err)
	}
	if d := DiffNormalized(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got; -update-rules to accept):\n%s", path, d)
	}
}

// grepCount counts, per table, the lines with prefix: what a user gets
// with grep -c on one table's section.
func grepCount(text []byte, prefix string) map[string]int {
	m := map[string]int{}
	table := ""
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "*") {
			table = l[1:]
			m[table] += 0
		}
		if prefix == "-A" && strings.HasPrefix(l, "[") {
			l = strings.TrimLeft(l[strings.IndexByte(l, ']')+1:], " ")
		}
		if strings.HasPrefix(l, prefix) {
			m[table]++
		}
	}
	return m
}

func TestParseIPTablesSave(t *testing.T) {
	cases := []struct {
		file string
		want map[string]IPTablesTable // ChainRules checked separately
	}{
		{"kube-proxy-iptables-legacy.save", map[string]IPTablesTable{
			"nat":    {Rules: 53, Chains: 25, SVC: 4, SEP: 11, EXT: 1},
			"filter": {Rules: 16, Chains: 10},
			"mangle": {Rules: 0, Chains: 6},
		}},
		{"kube-proxy-iptables-nft.save", map[string]IPTablesTable{
			"nat":    {Rules: 53, Chains: 25, SVC: 4, SEP: 11, EXT: 1},
			"filter": {Rules: 16, Chains: 10},
			"mangle": {Rules: 0, Chains: 6},
		}},
		{"iptables-crafted-counters.save", map[string]IPTablesTable{
			"nat":    {Rules: 17, Chains: 14, SVC: 1, SVL: 1, SEP: 3, FW: 1, EXT: 1},
			"filter": {Rules: 2, Chains: 4},
			"raw":    {Rules: 1, Chains: 2},
		}},
		{"ip6tables-crafted.save", map[string]IPTablesTable{
			"filter": {Rules: 2, Chains: 4},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			text := readTestdata(t, tc.file)
			c, err := ParseIPTablesSave(text)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]IPTablesTable{}
			for name, tab := range c.Tables {
				sum := 0
				for _, n := range tab.ChainRules {
					sum += n
				}
				if sum != tab.Rules || len(tab.ChainRules) != tab.Chains {
					t.Errorf("%s: chain rules sum to %d over %d chains, table has %d rules, %d chains", name, sum, len(tab.ChainRules), tab.Rules, tab.Chains)
				}
				tab.ChainRules = nil
				got[name] = tab
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("counts (-want +got):\n%s", d)
			}
			// The counts a user re-derives with grep.
			rules, chains := grepCount(text, "-A"), grepCount(text, ":")
			for name, tab := range c.Tables {
				if rules[name] != tab.Rules || chains[name] != tab.Chains {
					t.Errorf("%s: grep finds %d rules and %d chains, parser %d and %d", name, rules[name], chains[name], tab.Rules, tab.Chains)
				}
			}
		})
	}
}

func TestParseIPTablesSaveChainRules(t *testing.T) {
	c, err := ParseIPTablesSave(readTestdata(t, "iptables-crafted-counters.save"))
	if err != nil {
		t.Fatal(err)
	}
	nat := c.Tables["nat"].ChainRules
	for chain, want := range map[string]int{"KUBE-SERVICES": 4, "KUBE-SVC-AAAAAAAAAAAAAAAA": 2, "KUBE-NODEPORTS": 1, "POSTROUTING": 0} {
		if nat[chain] != want {
			t.Errorf("nat %s: %d rules, want %d", chain, nat[chain], want)
		}
	}
}

func TestIPTablesChainRules(t *testing.T) {
	save := readTestdata(t, "kube-proxy-iptables-legacy.save")
	nat, err := IPTablesChainRules(save, "nat", "KUBE-SERVICES")
	if err != nil {
		t.Fatal(err)
	}
	if len(nat) == 0 || !strings.HasPrefix(nat[0], "-A KUBE-SERVICES -d 10.96.0.10/32 ") ||
		!strings.Contains(nat[len(nat)-1], "KUBE-NODEPORTS") {
		t.Errorf("nat KUBE-SERVICES: %q: want svc0's rule first and the node ports' last, in order", nat)
	}
	// filter has a KUBE-SERVICES too: svc4's REJECT only.
	if f, err := IPTablesChainRules(save, "filter", "KUBE-SERVICES"); err != nil || len(f) != 1 || !strings.Contains(f[0], "REJECT") {
		t.Errorf("filter KUBE-SERVICES: %q, %v: want svc4's REJECT", f, err)
	}
	for _, tc := range [][2]string{{"nat", "KUBE-NOPE"}, {"mangle2", "KUBE-SERVICES"}} {
		if _, err := IPTablesChainRules(save, tc[0], tc[1]); err == nil {
			t.Errorf("%s %s: no error", tc[0], tc[1])
		}
	}
}

func TestParseIPTablesSaveErrors(t *testing.T) {
	cases := map[string]string{
		"rule outside a table":  "-A INPUT -j ACCEPT\n",
		"chain outside a table": ":INPUT ACCEPT [0:0]\n",
		"no COMMIT":             "*filter\n:INPUT ACCEPT [0:0]\n",
		"COMMIT outside":        "COMMIT\n",
		"undeclared chain":      "*filter\n:INPUT ACCEPT [0:0]\n-A FORWARD -j ACCEPT\nCOMMIT\n",
		"duplicate chain":       "*filter\n:INPUT ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\nCOMMIT\n",
		"duplicate table":       "*filter\nCOMMIT\n*filter\nCOMMIT\n",
		"nested table":          "*filter\n*nat\nCOMMIT\n",
		"garbage line":          "*filter\nhello\nCOMMIT\n",
		"bad counters":          "*filter\n:INPUT ACCEPT [0:0]\n[0:0 -A INPUT\nCOMMIT\n",
		"empty table name":      "*\nCOMMIT\n",
		"bad chain line":        "*filter\n:INPUT\nCOMMIT\n",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseIPTablesSave([]byte(in)); err == nil {
				t.Errorf("no error for %q", in)
			}
		})
	}
	// Empty output (a family whose tables were never loaded) is valid.
	if c, err := ParseIPTablesSave(nil); err != nil || len(c.Tables) != 0 {
		t.Errorf("empty input: %+v, %v", c, err)
	}
}

func TestNormalizeIPTablesSaveGolden(t *testing.T) {
	for _, f := range []string{"kube-proxy-iptables-legacy.save", "kube-proxy-iptables-nft.save", "iptables-crafted-counters.save", "ip6tables-crafted.save"} {
		t.Run(f, func(t *testing.T) {
			got, err := NormalizeIPTablesSave(readTestdata(t, f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(got, "[0:0]") || strings.Contains(got, "[7:420]") || strings.Contains(got, "#") {
				t.Errorf("counters or comments left in:\n%s", got)
			}
			checkGolden(t, f+".normalized", got)
			// Normalized text is iptables-save syntax again, and a fixed point.
			again, err := NormalizeIPTablesSave([]byte(got))
			if err != nil || again != got {
				t.Errorf("normalizing twice: err %v, diff:\n%s", err, DiffNormalized(got, again))
			}
		})
	}
	// Both backends print the same kube-proxy state the same way once
	// normalized (iptables-nft-save prints chains in creation order,
	// iptables-legacy-save sorted).
	legacy, _ := NormalizeIPTablesSave(readTestdata(t, "kube-proxy-iptables-legacy.save"))
	nft, _ := NormalizeIPTablesSave(readTestdata(t, "kube-proxy-iptables-nft.save"))
	if d := DiffNormalized(legacy, nft); d != "" {
		t.Errorf("legacy vs nft backend (-legacy +nft):\n%s", d)
	}
}

// TestNormalizeIPTablesOrder edits the crafted dump the ways two proxiers
// can differ (chain order, order of per-service rules in dispatch chains,
// counters) and the ways that change behaviour (endpoint order in a
// KUBE-SVC chain, the KUBE-NODEPORTS jump no longer last).
func TestNormalizeIPTablesOrder(t *testing.T) {
	base := string(readTestdata(t, "iptables-crafted-counters.save"))
	norm := func(s string) string {
		t.Helper()
		n, err := NormalizeIPTablesSave([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := norm(base)
	svcB := `[0:0] -A KUBE-SERVICES -d 10.96.0.11/32 -p tcp -m comment --comment "ns/b:http cluster IP" -m tcp --dport 80 -j KUBE-SVL-BBBBBBBBBBBBBBBB` + "\n"
	svcA := `[7:420] -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "ns/a:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA` + "\n"
	nodePorts := `[0:0] -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS` + "\n"
	ep1 := `[0:0] -A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "ns/a:http -> 10.244.0.10:8080" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-1111111111111111` + "\n"
	ep2 := `[0:0] -A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "ns/a:http -> 10.244.0.9:8080" -j KUBE-SEP-2222222222222222` + "\n"
	chainSEP1 := ":KUBE-SEP-1111111111111111 - [0:0]\n"
	for _, s := range []string{svcB, svcA, nodePorts, ep1, ep2, chainSEP1} {
		if !strings.Contains(base, s) {
			t.Fatalf("testdata changed: no %q", s)
		}
	}
	same := map[string]string{
		"service rules swapped": strings.Replace(base, svcB+svcA, svcA+svcB, 1),
		"chain moved":           strings.Replace(strings.Replace(base, chainSEP1, "", 1), ":PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [31:1860]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-EXT", ":PREROUTING ACCEPT [0:0]\n"+chainSEP1+":INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [31:1860]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-EXT", 1),
		"counters changed":      strings.ReplaceAll(base, "[0:0]", "[99:12345]"),
	}
	for name, s := range same {
		if s == base {
			t.Fatalf("%s: edit did not apply", name)
		}
		if d := DiffNormalized(want, norm(s)); d != "" {
			t.Errorf("%s: normalized forms differ:\n%s", name, d)
		}
	}
	differ := map[string]string{
		"endpoints swapped":        strings.Replace(base, ep1+ep2, ep2+ep1, 1),
		"nodeports jump not last":  strings.Replace(base, svcA+`[0:0] -A KUBE-SERVICES -d 192.0.2.1/32`, svcA+nodePorts+`[0:0] -A KUBE-SERVICES -d 192.0.2.1/32`, 1),
		"service rule removed":     strings.Replace(base, svcB, "", 1),
		"probability changed":      strings.Replace(base, "0.50000000000", "0.33333333349", 1),
		"chain policy changed":     strings.Replace(base, ":FORWARD DROP", ":FORWARD ACCEPT", 1),
		"endpoint chain renamed":   strings.ReplaceAll(base, "KUBE-SEP-3333333333333333", "KUBE-SEP-4444444444444444"),
		"rule moved to other rule": strings.Replace(base, svcB+svcA, svcA, 1),
	}
	for name, s := range differ {
		if s == base {
			t.Fatalf("%s: edit did not apply", name)
		}
		if DiffNormalized(want, norm(s)) == "" {
			t.Errorf("%s: normalized forms equal, want a difference", name)
		}
	}
}

// fakeRun replays outputs by program name and records the calls.
type fakeRun struct {
	out   map[string]string
	fail  map[string]bool
	calls []string
}

func (f *fakeRun) LookPath(file string) (string, error) { return "/usr/sbin/" + file, nil }

func (f *fakeRun) Run(_ context.Context, c toolexec.Cmd) ([]byte, error) {
	call := c.String()
	f.calls = append(f.calls, call)
	if f.fail[call] {
		return nil, errors.New(call + ": exit status 1: boom")
	}
	out, ok := f.out[call]
	if !ok {
		return nil, errors.New(call + ": executable file not found in $PATH")
	}
	return []byte(out), nil
}

func TestReadIPTables(t *testing.T) {
	v4 := string(readTestdata(t, "iptables-crafted-counters.save"))
	v6 := string(readTestdata(t, "ip6tables-crafted.save"))
	f := &fakeRun{out: map[string]string{"iptables-nft-save": v4, "ip6tables-nft-save": v6}}
	d, err := ReadIPTables(context.Background(), f, BackendNFT)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"iptables-nft-save", "ip6tables-nft-save"}, f.calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if string(d.IPv4) != v4 || string(d.IPv6) != v6 {
		t.Error("raw outputs not kept")
	}
	want := map[string]int{
		"iptables/nat": 17, "iptables/nat/chains": 14,
		"iptables/filter": 2, "iptables/filter/chains": 4,
		"iptables/raw": 1, "iptables/raw/chains": 2,
		"ip6tables/filter": 2, "ip6tables/filter/chains": 4,
	}
	if diff := cmp.Diff(want, d.Counts()); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	if n := d.Normalize(); !strings.HasPrefix(n, "# ipv4\n*filter\n") || !strings.Contains(n, "# ipv6\n*filter\n") {
		t.Errorf("Normalize:\n%s", n)
	}

	if _, err := ReadIPTables(context.Background(), f, "ipvs"); err == nil || !strings.Contains(err.Error(), `"ipvs"`) {
		t.Errorf("bad backend: %v", err)
	}
	f.fail = map[string]bool{"ip6tables-nft-save": true}
	if _, err := ReadIPTables(context.Background(), f, BackendNFT); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing ip6tables-nft-save: %v", err)
	}
	f.out["iptables-legacy-save"], f.out["ip6tables-legacy-save"] = "*nat\n", ""
	if _, err := ReadIPTables(context.Background(), f, BackendLegacy); err == nil || !strings.Contains(err.Error(), "iptables-legacy-save") {
		t.Errorf("unparsable output: %v", err)
	}
}
