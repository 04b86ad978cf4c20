package rules

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Testdata: kube-proxy-nft.{json,txt} are a live capture of the nftables
// proxier (package proxier's TestPrivilegedRules -capture-rules, 4
// Services with 11 endpoints and svc4 without); nft-crafted.{json,txt} are
// nft-crafted.input.nft loaded with "nft -f" in an "unshare -n" namespace
// (interval and concatenated set elements, an ip6 kube-proxy table and a
// foreign inet table).

func TestParseNFTJSON(t *testing.T) {
	cases := []struct {
		file   string
		want   NFTCounts // Tables checked below
		tables map[string]NFTTable
	}{
		{file: "kube-proxy-nft.json",
			want: NFTCounts{Rules: 27, Chains: 20, Sets: 2, Maps: 5, SetElements: 5, MapElements: 6, NumgenRules: 4},
			tables: map[string]NFTTable{
				"ip kube-proxy": {Family: "ip", Name: "kube-proxy", Rules: 27, Chains: 20, Sets: 2, Maps: 5, SetElements: 5, MapElements: 6, NumgenRules: 4},
			}},
		{file: "nft-crafted.json",
			// inet filter: 1 chain, 2 rules, set blocked (prefix, range,
			// address: 3). ip6 kube-proxy: 4 chains, 4 rules, cluster-ips
			// 2, service-ips 2, no-endpoint-nodeports 0. ip kube-proxy: 1
			// chain, 2 rules, src-ranges 2 (concatenated intervals),
			// firewall-ips 3. One rule picks with numgen (service AAAA's two
			// endpoints); service BBBB's one endpoint is a plain dnat.
			want: NFTCounts{Rules: 8, Chains: 6, Sets: 3, Maps: 3, SetElements: 7, MapElements: 5, NumgenRules: 1},
			tables: map[string]NFTTable{
				"inet filter":    {Family: "inet", Name: "filter", Rules: 2, Chains: 1, Sets: 1, SetElements: 3},
				"ip6 kube-proxy": {Family: "ip6", Name: "kube-proxy", Rules: 4, Chains: 4, Sets: 1, Maps: 2, SetElements: 2, MapElements: 2, NumgenRules: 1},
				"ip kube-proxy":  {Family: "ip", Name: "kube-proxy", Rules: 2, Chains: 1, Sets: 1, Maps: 1, SetElements: 2, MapElements: 3},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseNFTJSON(readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tables := map[string]NFTTable{}
			for _, tab := range c.Tables {
				sum := 0
				for _, n := range tab.ChainRules {
					sum += n
				}
				if sum != tab.Rules {
					t.Errorf("%s %s: chain rules sum to %d, table has %d", tab.Family, tab.Name, sum, tab.Rules)
				}
				tab.ChainRules, tab.Elements = nil, nil
				tables[tab.Family+" "+tab.Name] = tab
			}
			if d := cmp.Diff(tc.tables, tables); d != "" {
				t.Errorf("tables (-want +got):\n%s", d)
			}
			c.Tables = nil
			if d := cmp.Diff(tc.want, c); d != "" {
				t.Errorf("totals (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseNFTJSONElements(t *testing.T) {
	c, err := ParseNFTJSON(readTestdata(t, "kube-proxy-nft.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"cluster-ips": 5, "service-ips": 4, "service-nodeports": 1, "no-endpoint-services": 1,
		"no-endpoint-nodeports": 0, "firewall-ips": 0, "hairpin-connections": 0}
	if d := cmp.Diff(want, c.Tables[0].Elements); d != "" {
		t.Errorf("elements (-want +got):\n%s", d)
	}
	if got := c.Tables[0].ChainRules["service-CBQBWNPR-default/svc0/tcp/http"]; got != 1 {
		t.Errorf("svc0 chain has %d rules, want 1 (dnat through a numgen map)", got)
	}
}

func TestParseNFTJSONErrors(t *testing.T) {
	cases := map[string]string{
		"not json":             "table ip x {}",
		"no nftables":          `{"foo": []}`,
		"nftables not array":   `{"nftables": {}}`,
		"two kinds":            `{"nftables": [{"table": {"family": "ip", "name": "x"}, "chain": {}}]}`,
		"null item":            `{"nftables": [null]}`,
		"chain before table":   `{"nftables": [{"chain": {"family": "ip", "table": "x", "name": "c"}}]}`,
		"rule of unknown":      `{"nftables": [{"table": {"family": "ip", "name": "x"}}, {"rule": {"family": "ip", "table": "x", "chain": "c"}}]}`,
		"duplicate table":      `{"nftables": [{"table": {"family": "ip", "name": "x"}}, {"table": {"family": "ip", "name": "x"}}]}`,
		"elem not an array":    `{"nftables": [{"table": {"family": "ip", "name": "x"}}, {"set": {"family": "ip", "table": "x", "name": "s", "elem": 3}}]}`,
		"duplicate set or map": `{"nftables": [{"table": {"family": "ip", "name": "x"}}, {"set": {"family": "ip", "table": "x", "name": "s"}}, {"map": {"family": "ip", "table": "x", "name": "s"}}]}`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseNFTJSON([]byte(in)); err == nil {
				t.Errorf("no error for %s", in)
			}
		})
	}
	// Other object kinds are skipped, an empty ruleset is valid.
	c, err := ParseNFTJSON([]byte(`{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"counter": 5}, {"flowtable": {"name": "f"}}]}`))
	if err != nil || c.Rules != 0 || len(c.Tables) != 0 {
		t.Errorf("empty ruleset: %+v, %v", c, err)
	}
}

func TestNormalizeNFTJSONGolden(t *testing.T) {
	for _, f := range []string{"kube-proxy-nft.json", "nft-crafted.json"} {
		t.Run(f, func(t *testing.T) {
			got, err := NormalizeNFTJSON(readTestdata(t, f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(got, `"handle"`) || strings.Contains(got, "inet filter") || strings.Contains(got, `"packets"`) {
				t.Errorf("handles, counters or a foreign table left in:\n%s", got)
			}
			checkGolden(t, f+".normalized", got)
		})
	}
}

// permuteNFT rewrites an nft JSON ruleset the ways two proxiers or two
// kernels can differ without a change of behaviour: objects listed in
// another order (tables first), set and map elements and anonymous set
// elements reversed, handles and counters changed.
func permuteNFT(t *testing.T, b []byte, edit func(items []map[string]any) []map[string]any) []byte {
	t.Helper()
	var top struct {
		NFTables []map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	top.NFTables = edit(top.NFTables)
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// reverseSets reverses every "set" array below v (anonymous sets).
func reverseSets(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if arr, ok := e.([]any); ok && k == "set" {
				reverse(arr)
			}
			reverseSets(e)
		}
	case []any:
		for _, e := range x {
			reverseSets(e)
		}
	}
}

func TestNormalizeNFTOrder(t *testing.T) {
	for _, f := range []string{"kube-proxy-nft.json", "nft-crafted.json"} {
		t.Run(f, func(t *testing.T) {
			base := readTestdata(t, f)
			want, err := NormalizeNFTJSON(base)
			if err != nil {
				t.Fatal(err)
			}
			same := permuteNFT(t, base, func(items []map[string]any) []map[string]any {
				var tables, rest, rules []map[string]any
				for _, it := range items {
					for kind, o := range it {
						obj, _ := o.(map[string]any)
						if obj != nil {
							if _, ok := obj["handle"]; ok {
								obj["handle"] = 1000 + len(rest)
							}
							if e, ok := obj["elem"].([]any); ok {
								reverse(e)
							}
						}
						reverseSets(o)
						switch kind {
						case "table":
							tables = append(tables, it)
						case "rule":
							rules = append(rules, it) // rule order kept
						default:
							rest = append(rest, it)
						}
					}
				}
				reverse(rest)
				return append(append(tables, rest...), rules...)
			})
			got, err := NormalizeNFTJSON(same)
			if err != nil {
				t.Fatal(err)
			}
			if d := DiffNormalized(want, got); d != "" {
				t.Errorf("permuted ruleset normalizes differently (-want +got):\n%s", d)
			}
			// Rules of a chain in another order is another dataplane.
			swapped := permuteNFT(t, base, func(items []map[string]any) []map[string]any {
				var idx []int
				for i, it := range items {
					if r, ok := it["rule"].(map[string]any); ok && r["chain"] == firstChainWithRules(items, 2) {
						idx = append(idx, i)
					}
				}
				items[idx[0]], items[idx[1]] = items[idx[1]], items[idx[0]]
				return items
			})
			got, err = NormalizeNFTJSON(swapped)
			if err != nil {
				t.Fatal(err)
			}
			if DiffNormalized(want, got) == "" {
				t.Error("swapping two rules of a chain left the normalized form unchanged")
			}
		})
	}
}

// firstChainWithRules is the first kube-proxy chain with at least n rules.
func firstChainWithRules(items []map[string]any, n int) string {
	count := map[string]int{}
	for _, it := range items {
		if r, ok := it["rule"].(map[string]any); ok && r["table"] == "kube-proxy" {
			c := r["chain"].(string)
			count[c]++
			if count[c] == n {
				return c
			}
		}
	}
	return ""
}

func TestReadNFTables(t *testing.T) {
	js := string(readTestdata(t, "kube-proxy-nft.json"))
	text := string(readTestdata(t, "kube-proxy-nft.txt"))
	f := &fakeRun{out: map[string]string{"nft list ruleset": text, "nft -j list ruleset": js}}
	d, err := ReadNFTables(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Text) != text || string(d.JSON) != js {
		t.Error("raw outputs not kept")
	}
	want := map[string]int{"nftables/rules": 27, "nftables/chains": 20, "nftables/setElements": 5, "nftables/mapElements": 6, "nftables/numgenRules": 4}
	if diff := cmp.Diff(want, d.Counts()); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	if n := d.Normalize(); !strings.HasPrefix(n, "table ip kube-proxy\n") {
		t.Errorf("Normalize:\n%s", n)
	}
	f.fail = map[string]bool{"nft -j list ruleset": true}
	if _, err := ReadNFTables(context.Background(), f); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing nft: %v", err)
	}
	f.fail, f.out["nft -j list ruleset"] = nil, "{}"
	if _, err := ReadNFTables(context.Background(), f); err == nil {
		t.Error("no error for output without an nftables array")
	}
}
