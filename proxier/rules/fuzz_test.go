package rules

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// One fuzz target per parser and per implied-share computation, seeded
// with the testdata. Each must fail cleanly on any input; what parses must
// keep the parser's invariants. Run one with
//
//	go test ./proxier/rules -run '^$' -fuzz '^FuzzParseProcIPVS$'
//
// or all of them with make fuzz. A crash is saved under
// testdata/fuzz/<target>/ and replays as a seed in every go test.

// iptSeeds carves iptables-save testdata into one small document per chain:
// its table, the chain and the chains its rules jump or go to, with the
// rules of the chain and of the endpoint chains (KUBE-SEP-*, whose DNAT the
// implied shares need). Small seeds keep the fuzzer's minimization of new inputs short
// (see nftSeeds); the whole files are the unit tests' inputs.
func iptSeeds(f testing.TB, names ...string) [][]byte {
	var seeds [][]byte
	for _, name := range names {
		tables, err := parseIPTablesSave(readTestdata(f, name))
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		for _, t := range tables {
			byName := map[string]*iptChain{}
			for _, c := range t.chains {
				byName[c.name] = c
			}
			for _, c := range t.chains {
				if len(c.rules) == 0 {
					continue
				}
				chains := []*iptChain{c}
				for _, r := range c.rules {
					args, _ := splitRule(r)
					for _, flag := range []string{"-j", "-g"} {
						if to := byName[flagValue(args, flag)]; to != nil && to != c && !slices.Contains(chains, to) {
							chains = append(chains, to)
						}
					}
				}
				var b strings.Builder
				b.WriteString("*" + t.name + "\n")
				for _, ch := range chains {
					fmt.Fprintf(&b, ":%s %s [0:0]\n", ch.name, ch.policy)
				}
				for i, ch := range chains {
					if i > 0 && !strings.HasPrefix(ch.name, "KUBE-SEP-") {
						continue // declared only: a jump target, not the subject
					}
					for _, r := range ch.rules {
						b.WriteString(r + "\n")
					}
				}
				b.WriteString("COMMIT\n")
				seeds = append(seeds, []byte(b.String()))
			}
		}
	}
	return seeds
}

func FuzzParseIPTablesSave(f *testing.F) {
	for _, b := range iptSeeds(f, "kube-proxy-iptables-legacy.save", "kube-proxy-iptables-nft.save", "iptables-crafted-counters.save", "ip6tables-crafted.save") {
		f.Add(b)
	}
	f.Add([]byte("*filter\n:INPUT ACCEPT [0:0]\n[1:2] -A INPUT -j ACCEPT\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseIPTablesSave(b)
		if err != nil {
			return
		}
		for name, tab := range c.Tables {
			if len(tab.ChainRules) != tab.Chains || tab.SVC+tab.SVL+tab.SEP+tab.FW+tab.EXT > tab.Chains {
				t.Errorf("%s: inconsistent counts %+v", name, tab)
			}
		}
		// Whatever parses normalizes, and the normalized form is a fixed
		// point with the same counts.
		n, err := NormalizeIPTablesSave(b)
		if err != nil {
			t.Fatalf("parsed but did not normalize: %v", err)
		}
		n2, err := NormalizeIPTablesSave([]byte(n))
		if err != nil || n2 != n {
			t.Fatalf("normalized form is not a fixed point: %v\n%s", err, DiffNormalized(n, n2))
		}
		c2, err := ParseIPTablesSave([]byte(n))
		if err != nil {
			t.Fatal(err)
		}
		for name, tab := range c.Tables {
			if c2.Tables[name].Rules != tab.Rules || c2.Tables[name].Chains != tab.Chains {
				t.Errorf("%s: counts changed by normalizing", name)
			}
		}
	})
}

// nftSeeds carves the nft JSON testdata into one small document per chain
// (its table, the chain, its rules and the chains they name) and per set
// or map (its table and itself). The fuzzer minimizes every input that
// finds new coverage, trying removals quadratic in its length for up to a
// minute (-fuzzminimizetime): mutants of a 13 KB dump stall a worker for
// that minute each, mutants of a few hundred bytes take a moment.
func nftSeeds(f testing.TB) [][]byte {
	var seeds [][]byte
	for _, name := range []string{"kube-proxy-nft.json", "nft-crafted.json", "implied/nft-vmap.json", "nft-affinity-end.json"} {
		var top struct {
			NFTables []map[string]json.RawMessage `json:"nftables"`
		}
		if err := json.Unmarshal(readTestdata(f, name), &top); err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		type head struct{ Family, Table, Name, Chain string }
		var tables []map[string]json.RawMessage
		chains := map[string][]map[string]json.RawMessage{} // chain and its rules
		var order []string
		var sets [][]map[string]json.RawMessage
		for _, item := range top.NFTables {
			for kind, raw := range item {
				var h head
				_ = json.Unmarshal(raw, &h)
				switch kind {
				case "table":
					tables = append(tables, item)
				case "chain":
					order = append(order, h.Name)
					chains[h.Name] = append(chains[h.Name], item)
				case "rule":
					chains[h.Chain] = append(chains[h.Chain], item)
				case "set", "map":
					sets = append(sets, []map[string]json.RawMessage{item})
				}
			}
		}
		doc := func(items ...[]map[string]json.RawMessage) []byte {
			all := append([]map[string]json.RawMessage(nil), tables...)
			for _, it := range items {
				all = append(all, it...)
			}
			b, err := json.Marshal(map[string]any{"nftables": all})
			if err != nil {
				f.Fatal(err)
			}
			return b
		}
		for _, c := range order {
			items := [][]map[string]json.RawMessage{chains[c]}
			text, _ := json.Marshal(chains[c])
			for _, other := range order {
				if other != c && strings.Contains(string(text), `"`+other+`"`) {
					items = append(items, chains[other])
				}
			}
			seeds = append(seeds, doc(items...))
		}
		for _, set := range sets {
			seeds = append(seeds, doc(set))
		}
	}
	return seeds
}

func FuzzParseNFTJSON(f *testing.F) {
	for _, b := range nftSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"nftables": [{"table": {"family": "ip", "name": "kube-proxy"}}, {"set": {"family": "ip", "table": "kube-proxy", "name": "s", "elem": [1, {"set": [3, 2]}]}}]}`))
	// The body parses once (ParseNFTJSON and NormalizeNFTJSON would parse
	// twice): a valid kube-proxy dump costs about a millisecond to decode,
	// and the fuzzer minimizes every new input by running it many times.
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := parseNFTJSON(b)
		if err != nil {
			return
		}
		c := rs.counts()
		if c.Rules < 0 || c.SetElements < 0 || c.MapElements < 0 {
			t.Errorf("negative counts %+v", c)
		}
		n := 0
		for _, tab := range c.Tables {
			n += tab.Rules
		}
		if n != c.Rules {
			t.Errorf("table rules sum to %d, total %d", n, c.Rules)
		}
		_ = rs.normalize()
	})
}

// FuzzParseProcIPVS: what parses prints back (formatProcIPVS) to a text
// that parses to the same table, and formats and normalizes.
func FuzzParseProcIPVS(f *testing.F) {
	f.Add(readTestdata(f, "ip_vs-crafted.txt"))
	f.Add([]byte(procIPVSHeader + "TCP  0A600014:0050 wrr \n  -> 0AF4020A:1F90      Masq    3      0          0         \n  -> 0AF4020B:1F90      Masq    0      4          1         \n"))
	f.Add([]byte(procIPVSHeader + "SCTP  [fe80:0000:0000:0000:0000:0000:0000:0001]:0050 sh persistent 60 [ffff:ffff:ffff:ffff:0000:0000:0000:0000]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		svcs, err := ParseProcIPVS(b)
		if err != nil {
			return
		}
		again, err := ParseProcIPVS(formatProcIPVS(svcs))
		if err != nil {
			t.Fatalf("printed table does not parse: %v\n%s", err, formatProcIPVS(svcs))
		}
		if d := cmp.Diff(svcs, again, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
			cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); d != "" {
			t.Fatalf("printed table parses differently (-first +again):\n%s", d)
		}
		_ = FormatIPVSAdm("IP Virtual Server version 1.2.1 (size=4096)", svcs)
		_ = (&IPVSDump{Services: svcs}).normalizeIPVS()
	})
}

// formatProcIPVS prints services the way the kernel prints /proc/net/ip_vs
// (ip_vs_info_seq_show).
func formatProcIPVS(svcs []IPVSService) []byte {
	hexAddr := func(a netip.Addr) string {
		if a.Is4() {
			return fmt.Sprintf("%08X", a.As4())
		}
		return "[" + a.String() + "]"
	}
	var b strings.Builder
	b.WriteString(procIPVSHeader)
	for _, s := range svcs {
		if s.Protocol == "FWM" {
			fmt.Fprintf(&b, "FWM  %08X %s ", s.FWMark, s.Scheduler)
		} else {
			fmt.Fprintf(&b, "%s  %s:%04X %s ", s.Protocol, hexAddr(s.Address.Addr()), s.Address.Port(), s.Scheduler)
		}
		if s.OnePacket {
			b.WriteString("ops ")
		}
		if s.Persistent {
			fmt.Fprintf(&b, "persistent %d %s", s.Timeout, hexAddr(s.Netmask))
		}
		b.WriteByte('\n')
		for _, d := range s.Dests {
			fmt.Fprintf(&b, "  -> %s:%04X      %-7s %-6d %-10d %-10d\n", hexAddr(d.Address.Addr()), d.Address.Port(), d.Forward, d.Weight, d.ActiveConns, d.InactiveConns)
		}
	}
	return []byte(b.String())
}

// FuzzParseIPSetSave: what parses prints back to a text that parses to the
// same sets.
func FuzzParseIPSetSave(f *testing.F) {
	f.Add(readTestdata(f, "ipset-crafted.save"))
	f.Add([]byte("create S hash:ip family inet6\nadd S fd00::1 timeout 10\r\nadd S fd00::2  comment \"a b\"\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sets, err := ParseIPSetSave(b)
		if err != nil {
			return
		}
		var out strings.Builder
		for _, s := range sets {
			fmt.Fprintf(&out, "create %s %s", s.Name, s.Type)
			if s.Options != "" {
				out.WriteString(" " + s.Options)
			}
			out.WriteByte('\n')
			for _, m := range s.Members {
				fmt.Fprintf(&out, "add %s %s", s.Name, m.Member)
				if m.Options != "" {
					out.WriteString(" " + m.Options)
				}
				out.WriteByte('\n')
			}
		}
		again, err := ParseIPSetSave([]byte(out.String()))
		if err != nil {
			t.Fatalf("printed sets do not parse: %v\n%s", err, out.String())
		}
		if d := cmp.Diff(sets, again); d != "" {
			t.Fatalf("printed sets parse differently (-first +again):\n%s", d)
		}
		_ = (&IPVSDump{Sets: sets}).normalizeIPVS()
	})
}

// FuzzReachableIPTables: any text goes through; on a normalized dump the
// reachable part is a fixed point and still parses.
func FuzzReachableIPTables(f *testing.F) {
	for _, b := range iptSeeds(f, "kube-proxy-iptables-legacy.save", "iptables-crafted-counters.save") {
		f.Add(b)
	}
	f.Add([]byte("*nat\n:OUTPUT ACCEPT\n:A -\n:B -\n-A OUTPUT -j A\n-A B -j A\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ReachableIPTables(string(b))
		n, err := NormalizeIPTablesSave(b)
		if err != nil {
			return
		}
		kept, _ := ReachableIPTables(n)
		if _, err := ParseIPTablesSave([]byte(kept)); err != nil {
			t.Fatalf("reachable part does not parse: %v\n%s", err, kept)
		}
		again, unreachable := ReachableIPTables(kept)
		if again != kept || len(unreachable) > 0 {
			t.Fatalf("reachable part is not a fixed point: unreachable %v\n%s", unreachable, DiffNormalized(kept, again))
		}
	})
}

// checkShares fails t unless every share is in [0, 1] and the shares of
// each service, with Unmatched, sum to 1.
func checkShares(t *testing.T, got map[string]ServiceShares) {
	t.Helper()
	for k, s := range got {
		sum := s.Unmatched
		if !(s.Unmatched >= 0 && s.Unmatched <= 1) {
			t.Fatalf("%s: unmatched %v", k, s.Unmatched)
		}
		for _, e := range s.Endpoints {
			if !(e.Probability >= 0 && e.Probability <= 1) {
				t.Fatalf("%s: %s probability %v", k, e.Endpoint, e.Probability)
			}
			sum += e.Probability
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("%s: shares sum to %v", k, sum)
		}
	}
}

func FuzzImpliedIPTables(f *testing.F) {
	for _, b := range iptSeeds(f, "implied/cascade.save", "implied/rounding.save", "kube-proxy-iptables-legacy.save") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ImpliedIPTables(b)
		if err != nil {
			return
		}
		checkShares(t, got)
	})
}

func FuzzImpliedNFTables(f *testing.F) {
	for _, b := range nftSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, family := range []string{"ip", "ip6"} {
			got, err := ImpliedNFTables(b, family)
			if err != nil {
				continue
			}
			checkShares(t, got)
		}
	})
}

// FuzzImpliedIPVS also checks the schedulers' rules: under rr every real
// server with weight > 0 gets the same share, under wrr shares follow the
// weights.
func FuzzImpliedIPVS(f *testing.F) {
	f.Add(readTestdata(f, "ip_vs-crafted.txt"))
	f.Add([]byte(procIPVSHeader + "TCP  0A600014:0050 wrr \n  -> 0AF4020A:1F90      Masq    3      0          0         \n  -> 0AF4020B:1F90      Masq    1      0          0         \n  -> 0AF4020C:1F90      Masq    0      0          0         \n"))
	f.Add([]byte(procIPVSHeader + "UDP  0A600014:0035 rr \n  -> 0AF4020A:0035      Masq    5      0          0         \n  -> 0AF4020B:0035      Masq    0      0          0         \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ImpliedIPVS(b)
		if err != nil {
			return
		}
		checkShares(t, got)
		svcs, _ := ParseProcIPVS(b)
		for _, svc := range svcs {
			s, ok := got[svc.Key()]
			if !ok || len(s.Endpoints) != len(svc.Dests) || s.Chain != svc.Key() {
				continue // left out (no real servers) or a duplicate was refused
			}
			for i, d := range svc.Dests {
				p := s.Endpoints[i].Probability
				for j, e := range svc.Dests {
					q := s.Endpoints[j].Probability
					switch {
					case d.Weight == 0 && p != 0:
						t.Fatalf("%s: %s has weight 0 and share %v", svc.Key(), d.Address, p)
					case svc.Scheduler == "rr" && d.Weight > 0 && e.Weight > 0 && p != q:
						t.Fatalf("%s rr: shares %v and %v differ", svc.Key(), p, q)
					case svc.Scheduler == "wrr" && math.Abs(p*float64(e.Weight)-q*float64(d.Weight)) > 1e-9*p*float64(e.Weight):
						t.Fatalf("%s wrr: shares %v, %v do not follow weights %d, %d", svc.Key(), p, q, d.Weight, e.Weight)
					}
				}
			}
		}
	})
}
