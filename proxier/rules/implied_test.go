package rules

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Testdata under testdata/implied:
//   - cascade.save: crafted KUBE-SVC/KUBE-SVL cascades (10, 7 and 3 endpoints,
//     session affinity, a masquerade rule) with the probabilities kube-proxy
//     writes as iptables-save prints them; cascade.want.json holds the exact
//     shares computed with Python's fractions from lround(2³¹ p), and
//     cascade.roundtrip.save is cascade.save loaded with
//     iptables-legacy-restore v1.8.9 in an "unshare -rn" namespace and saved
//     again (identical probabilities: the printed values round-trip).
//   - rounding.input.rules / rounding.save: probabilities that tell the
//     rounding rules apart, loaded and saved the same way (see
//     TestStatisticThresholdMatchesIPTables).
//   - nft-vmap.json: the older nftables form (numgen vmap to endpoint
//     chains), a local-* chain, and a map missing a key.

func TestStatisticThresholdMatchesIPTables(t *testing.T) {
	// Each input probability, as iptables-legacy-restore v1.8.9 stored it,
	// is printed back in rounding.save. The inputs tell apart truncation
	// (0.3333333333 -> 715827882), round-half-even and lround (k+0.5 with
	// k even: 715827882.5 -> 715827883 only with half away from zero).
	in := string(readTestdata(t, "implied/rounding.input.rules"))
	out := string(readTestdata(t, "implied/rounding.save"))
	probs := func(s string) []string {
		var ps []string
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "-A" {
				ps = append(ps, flagValue(f, "--probability"))
			}
		}
		return ps
	}
	ins, outs := probs(in), probs(out)
	if len(ins) != 5 || len(ins) != len(outs) {
		t.Fatalf("%d inputs, %d outputs", len(ins), len(outs))
	}
	wantT := []uint32{715827883, 715827883, 715827882, 1 << 29, 1 << 31}
	for i := range ins {
		th, err := StatisticThreshold(ins[i])
		if err != nil {
			t.Fatal(err)
		}
		if th != wantT[i] {
			t.Errorf("threshold(%s) = %d, want %d", ins[i], th, wantT[i])
		}
		// iptables prints "%.11f" of threshold/2³¹.
		if got := fmt.Sprintf("%.11f", float64(th)/twoTo31); got != outs[i] {
			t.Errorf("%s: printed %s, iptables printed %s", ins[i], got, outs[i])
		}
		// Re-reading the printed value gives the same threshold.
		if th2, _ := StatisticThreshold(outs[i]); th2 != th {
			t.Errorf("%s: printed value re-read as %d, stored %d", outs[i], th2, th)
		}
	}
	for _, bad := range []string{"1.5", "-0.1", "x", "NaN"} {
		if _, err := StatisticThreshold(bad); err == nil {
			t.Errorf("probability %q accepted", bad)
		}
	}
}

// Every kube-proxy probability 1/n, written as "%0.10f", round-trips
// through iptables-save's "%.11f".
func TestStatisticThresholdRoundTrip(t *testing.T) {
	for n := 1; n <= 5000; n++ {
		th, _ := StatisticThreshold(fmt.Sprintf("%0.10f", 1/float64(n)))
		printed := fmt.Sprintf("%.11f", float64(th)/twoTo31)
		if th2, _ := StatisticThreshold(printed); th2 != th {
			t.Fatalf("n=%d: threshold %d printed %s re-read as %d", n, th, printed, th2)
		}
	}
}

func TestImpliedIPTablesCrafted(t *testing.T) {
	var want map[string][][2]any
	if err := json.Unmarshal(readTestdata(t, "implied/cascade.want.json"), &want); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"implied/cascade.save", "implied/cascade.roundtrip.save"} {
		got, err := ImpliedIPTables(readTestdata(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		gotFlat := map[string][][2]any{}
		for k, s := range got {
			for _, e := range s.Endpoints {
				gotFlat[k] = append(gotFlat[k], [2]any{e.Endpoint, e.Probability})
			}
			if s.Unmatched != 0 {
				t.Errorf("%s %s: unmatched %v", file, k, s.Unmatched)
			}
		}
		if d := cmp.Diff(want, gotFlat); d != "" {
			t.Errorf("%s: implied shares differ (-want +got):\n%s", file, d)
		}
		if s := got["ns/ten:http (local)"]; !s.Local || s.Chain != "KUBE-SVL-TENTENTENTENTENT" {
			t.Errorf("local chain: %+v", s)
		}
	}
}

func TestImpliedIPTablesKubeProxy(t *testing.T) {
	// A live kube-proxy capture: services of 3 and 2 endpoints.
	for _, file := range []string{"kube-proxy-iptables-legacy.save", "kube-proxy-iptables-nft.save"} {
		got, err := ImpliedIPTables(readTestdata(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		s, ok := got["default/svc1:http"]
		if !ok {
			t.Fatalf("%s: no default/svc1:http in %v", file, got)
		}
		// 0.33333333349 is threshold 715827883: the first endpoint gets
		// 715827883/2³¹, the other two half the rest each.
		first := new(big.Rat).SetFrac64(715827883, 1<<31)
		rest := new(big.Rat).Sub(big.NewRat(1, 1), first)
		rest.Mul(rest, big.NewRat(1, 2))
		f0, _ := first.Float64()
		f1, _ := rest.Float64()
		want := []EndpointShare{{"10.244.1.10:8080", f0}, {"10.244.1.11:8080", f1}, {"10.244.1.12:8080", f1}}
		if d := cmp.Diff(want, s.Endpoints); d != "" {
			t.Errorf("%s svc1 (-want +got):\n%s", file, d)
		}
		if math.Abs(f0-1.0/3) > 2e-10 || f0 == 1.0/3 {
			t.Errorf("first share %v: want within 2⁻³¹ of 1/3 but not equal", f0)
		}
		for k, s := range got {
			sum := s.Unmatched
			for _, e := range s.Endpoints {
				sum += e.Probability
			}
			if math.Abs(sum-1) > 1e-15 {
				t.Errorf("%s %s: shares sum to %v", file, k, sum)
			}
		}
	}
}

func TestImpliedIPTablesErrors(t *testing.T) {
	for _, tc := range []struct{ name, save, want string }{
		{"no nat", "*filter\nCOMMIT\n", "no nat table"},
		{"missing sep", "*nat\n:KUBE-SVC-A - [0:0]\n-A KUBE-SVC-A -j KUBE-SEP-X\nCOMMIT\n", "missing chain"},
		{"no dnat", "*nat\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-X - [0:0]\n-A KUBE-SVC-A -j KUBE-SEP-X\n-A KUBE-SEP-X -m comment --comment \"a/b:c\" -j ACCEPT\nCOMMIT\n", "no DNAT"},
		{"nth", "*nat\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-X - [0:0]\n-A KUBE-SVC-A -m statistic --mode nth --every 2 -j KUBE-SEP-X\n-A KUBE-SEP-X -m comment --comment \"a/b:c\" -j DNAT --to-destination 1.2.3.4:5\nCOMMIT\n", "nth"},
		{"bad probability", "*nat\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-X - [0:0]\n-A KUBE-SVC-A -m statistic --mode random --probability 2 -j KUBE-SEP-X\n-A KUBE-SEP-X -m comment --comment \"a/b:c\" -j DNAT --to-destination 1.2.3.4:5\nCOMMIT\n", "not in [0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ImpliedIPTables([]byte(tc.save))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestImpliedIPTablesInvertedAndUnmatched(t *testing.T) {
	save := `*nat
:KUBE-SVC-A - [0:0]
:KUBE-SEP-X - [0:0]
:KUBE-SEP-Y - [0:0]
-A KUBE-SVC-A -m statistic --mode random ! --probability 0.25000000000 -j KUBE-SEP-X
-A KUBE-SVC-A -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-Y
-A KUBE-SEP-X -m comment --comment "a/b:c" -j DNAT --to-destination [fd00::1]:80
-A KUBE-SEP-Y -m comment --comment "a/b:c" -j DNAT --to-destination [fd00::2]:80
COMMIT
`
	got, err := ImpliedIPTables([]byte(save))
	if err != nil {
		t.Fatal(err)
	}
	want := ServiceShares{Service: "a/b:c", Chain: "KUBE-SVC-A", Endpoints: []EndpointShare{{"[fd00::1]:80", 0.75}, {"[fd00::2]:80", 0.125}}, Unmatched: 0.125}
	if d := cmp.Diff(want, got["a/b:c"]); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestNumgenDrawShare(t *testing.T) {
	two32 := new(big.Int).Lsh(big.NewInt(1), 32)
	frac := func(n int64) *big.Rat { return new(big.Rat).SetFrac(big.NewInt(n), two32) }
	for _, tc := range []struct {
		name        string
		mod, offset uint32
		want        map[uint64]*big.Rat // nil: never drawn
	}{
		// 2³² = 3·1431655765 + 1: ⌊u·3/2³²⌋ is 0 for 1431655766 values
		// of u, 1 and 2 for 1431655765 each.
		{"mod 3", 3, 0, map[uint64]*big.Rat{0: frac(1431655766), 1: frac(1431655765), 2: frac(1431655765), 3: nil}},
		// A power of two divides 2³²: exactly 1/N.
		{"mod 8 offset 10", 8, 10, map[uint64]*big.Rat{9: nil, 10: big.NewRat(1, 8), 17: big.NewRat(1, 8), 18: nil}},
		// The kernel adds the offset in u32: keys wrap past 2³² - 1.
		{"offset wraps", 4, 1<<32 - 2, map[uint64]*big.Rat{1<<32 - 2: big.NewRat(1, 4), 1<<32 - 1: big.NewRat(1, 4), 0: big.NewRat(1, 4), 1: big.NewRat(1, 4), 2: nil, 1 << 32: nil}},
		// The largest N is computed per key, not by listing every j.
		{"mod 2³²-1", 1<<32 - 1, 0, map[uint64]*big.Rat{0: frac(2), 1: frac(1), 1<<32 - 2: frac(1), 1<<32 - 1: nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &nftNumgenMap{}
			m.Key.Numgen = &struct {
				Mode   string `json:"mode"`
				Mod    uint32 `json:"mod"`
				Offset uint32 `json:"offset"`
			}{Mode: "random", Mod: tc.mod, Offset: tc.offset}
			g, err := newNumgenDraw(m)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				got := g.share(k)
				if (got == nil) != (want == nil) || (got != nil && got.Cmp(want) != 0) {
					t.Errorf("key %d: %v, want %v", k, got, want)
				}
			}
		})
	}
}

func TestImpliedNFTablesDuplicateKey(t *testing.T) {
	dump := `{"nftables": [{"table": {"family": "ip", "name": "kube-proxy"}},
{"chain": {"family": "ip", "table": "kube-proxy", "name": "service-AAAAAAAA-ns/a/tcp/p"}},
{"rule": {"family": "ip", "table": "kube-proxy", "chain": "service-AAAAAAAA-ns/a/tcp/p", "expr": [{"dnat": {"addr": {"map": {
  "key": {"numgen": {"mode": "random", "mod": 2, "offset": 0}},
  "data": {"set": [[0, {"concat": ["10.0.0.1", 80]}], [0, {"concat": ["10.0.0.2", 80]}], [1, {"concat": ["10.0.0.3", 80]}]]}}}}}]}}]}`
	if _, err := ImpliedNFTables([]byte(dump), "ip"); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a map key listed twice: error %v", err)
	}
}

func TestImpliedNFTablesKubeProxy(t *testing.T) {
	got, err := ImpliedNFTables(readTestdata(t, "kube-proxy-nft.json"), "ip")
	if err != nil {
		t.Fatal(err)
	}
	third, _ := new(big.Rat).SetFrac64(1431655766, 1<<32).Float64()
	rest, _ := new(big.Rat).SetFrac64(1431655765, 1<<32).Float64()
	half := 0.5
	want := map[string][]EndpointShare{
		"default/svc0:http": {{"10.244.0.10:8080", third}, {"10.244.0.11:8080", rest}, {"10.244.0.12:8080", rest}},
		"default/svc1:http": {{"10.244.1.10:8080", third}, {"10.244.1.11:8080", rest}, {"10.244.1.12:8080", rest}},
		"default/svc2:http": {{"10.244.2.10:8080", third}, {"10.244.2.11:8080", rest}, {"10.244.2.12:8080", rest}},
		"default/svc3:http": {{"10.244.3.10:8080", half}, {"10.244.3.11:8080", half}},
	}
	gotEps := map[string][]EndpointShare{}
	for k, s := range got {
		gotEps[k] = s.Endpoints
		if s.Service != k || !strings.HasPrefix(s.Chain, "service-") {
			t.Errorf("%s: %+v", k, s)
		}
	}
	if d := cmp.Diff(want, gotEps); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}

	// IPv6, a numgen map and a plain dnat.
	got, err = ImpliedNFTables(readTestdata(t, "nft-crafted.json"), "ip6")
	if err != nil {
		t.Fatal(err)
	}
	want = map[string][]EndpointShare{
		"ns/a:http": {{"[fd01::1]:8080", half}, {"[fd01::2]:8080", half}},
		"ns/b:dns":  {{"[fd01::3]:53", 1}},
	}
	gotEps = map[string][]EndpointShare{}
	for k, s := range got {
		gotEps[k] = s.Endpoints
	}
	if d := cmp.Diff(want, gotEps); d != "" {
		t.Errorf("ip6 (-want +got):\n%s", d)
	}
	if _, err := ImpliedNFTables(readTestdata(t, "kube-proxy-nft.json"), "ip6"); err == nil {
		t.Error("missing family accepted")
	}
}

func TestImpliedNFTablesVmap(t *testing.T) {
	got, err := ImpliedNFTables(readTestdata(t, "implied/nft-vmap.json"), "ip")
	if err != nil {
		t.Fatal(err)
	}
	third, _ := new(big.Rat).SetFrac64(1431655766, 1<<32).Float64()
	rest, _ := new(big.Rat).SetFrac64(1431655765, 1<<32).Float64()
	// mod 5: 2³² = 5·858993459 + 1, key 0 gets one more; key 4 is missing.
	k0, _ := new(big.Rat).SetFrac64(858993460, 1<<32).Float64()
	k, _ := new(big.Rat).SetFrac64(858993459, 1<<32).Float64()
	want := map[string]ServiceShares{
		"ns/old:http": {Service: "ns/old:http", Chain: "service-AAAAAAAA-ns/old/tcp/http",
			Endpoints: []EndpointShare{{"10.180.0.1:80", third}, {"10.180.0.2:80", rest}, {"10.180.0.3:80", rest}}},
		"ns/old:http" + LocalSuffix: {Service: "ns/old:http", Chain: "local-BBBBBBBB-ns/old/tcp/http", Local: true,
			Endpoints: []EndpointShare{{"10.180.0.1:80", 1}}},
		"ns/gap": {Service: "ns/gap", Chain: "service-CCCCCCCC-ns/gap/udp/",
			Endpoints: []EndpointShare{{"10.181.0.1:53", k0}, {"10.181.0.2:53", k}, {"10.181.0.3:53", k}, {"10.181.0.4:53", k}}, Unmatched: k},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestNFTServiceChain(t *testing.T) {
	for _, tc := range []struct {
		chain, svc string
		local, ok  bool
	}{
		{"service-7CIZXSQ5-default/svc1/tcp/http", "default/svc1:http", false, true},
		{"local-7CIZXSQ5-my-ns/svc-1/udp/dns", "my-ns/svc-1:dns", true, true},
		{"service-7CIZXSQ5-default/svc1/tcp/", "default/svc1", false, true},
		{"external-7CIZXSQ5-default/svc1/tcp/http", "", false, false},
		{"service-ips", "", false, false},
	} {
		svc, local, ok := nftServiceChain(tc.chain)
		if svc != tc.svc || local != tc.local || ok != tc.ok {
			t.Errorf("%s: %q %v %v, want %q %v %v", tc.chain, svc, local, ok, tc.svc, tc.local, tc.ok)
		}
	}
}
