package rules

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Testdata: nft-affinity-{fresh,end}.json are crafted in the shape of "nft
// -j list ruleset" (nft 1.0.6) for one ClientIP Service with two endpoints,
// as the upstream nftables proxier (v1.37.1) writes it: per endpoint an
// affinity-* set declared "flags timeout,dynamic" with timeout 10800, an
// "ip saddr @affinity-… goto endpoint-…" rule and an endpoint chain that
// starts with "update @affinity-… { ip saddr }". fresh is a proxier that
// carried no traffic; end the same dataplane, other handles, after clients
// 10.180.0.2, .3 and .4 reached it: elements with timeout and expires, or
// expires only (as a kernel that does not print the set's default timeout
// on each element lists them).

var wantLearnedAffinity = []string{
	`ip kube-proxy set affinity-AAAAAAAA-default/svc5/tcp/http__10.244.5.10/8080 {"elem":{"expires":10791,"timeout":10800,"val":"10.180.0.2"}}`,
	`ip kube-proxy set affinity-AAAAAAAA-default/svc5/tcp/http__10.244.5.10/8080 {"elem":{"expires":10797,"timeout":10800,"val":"10.180.0.3"}}`,
	`ip kube-proxy set affinity-BBBBBBBB-default/svc5/tcp/http__10.244.5.11/8080 {"elem":{"expires":10799,"val":"10.180.0.4"}}`,
}

// TestNormalizeNFTLearnedAffinity: two dataplanes that differ only in what
// packets wrote into the affinity sets normalize equal, and the learned
// elements are reported apart.
func TestNormalizeNFTLearnedAffinity(t *testing.T) {
	freshJSON, endJSON := readTestdata(t, "nft-affinity-fresh.json"), readTestdata(t, "nft-affinity-end.json")
	fresh, err := NormalizeNFTJSON(freshJSON)
	if err != nil {
		t.Fatal(err)
	}
	end, err := NormalizeNFTJSON(endJSON)
	if err != nil {
		t.Fatal(err)
	}
	if d := DiffNormalized(fresh, end); d != "" {
		t.Errorf("dumps that differ only in affinity-set elements normalize differently (-fresh +end):\n%s", d)
	}
	// The sets' declarations are programmed state and stay compared.
	if n := strings.Count(end, `set affinity-`); n != 2 || !strings.Contains(end, `"flags":["timeout","dynamic"]`) || !strings.Contains(end, `"timeout":10800`) {
		t.Errorf("affinity set declarations missing from the normalized form:\n%s", end)
	}

	learned, err := LearnedNFTJSON(endJSON)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantLearnedAffinity, learned); d != "" {
		t.Errorf("learned (-want +got):\n%s", d)
	}
	if l, err := LearnedNFTJSON(freshJSON); err != nil || len(l) != 0 {
		t.Errorf("fresh proxier learned %q, %v", l, err)
	}
	// Counts stay those of the kernel's sets, learned elements included,
	// and say how many of them were learned.
	c, err := ParseNFTJSON(endJSON)
	if err != nil {
		t.Fatal(err)
	}
	if c.SetElements != 1+3 || c.LearnedElements != 3 || c.Tables[0].LearnedElements != 3 {
		t.Errorf("counts %+v: want setElements 4 (cluster-ips 1, affinity 3), learnedElements 3", c)
	}
}

// TestNormalizeNFTLearnedOnlyDynamicTimeout: only the elements of sets
// declared dynamic with timeout are left out; a programmed difference next
// to them (a set's timeout, an element of another set, an element of a set
// with one of the two flags) still shows.
func TestNormalizeNFTLearnedOnlyDynamicTimeout(t *testing.T) {
	base := readTestdata(t, "nft-affinity-end.json")
	want, err := NormalizeNFTJSON(base)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(name string, set map[string]any)) []byte {
		return permuteNFT(t, base, func(items []map[string]any) []map[string]any {
			for _, it := range items {
				if s, ok := it["set"].(map[string]any); ok {
					f(s["name"].(string), s)
				}
			}
			return items
		})
	}
	affinity := "affinity-AAAAAAAA-default/svc5/tcp/http__10.244.5.10/8080"
	for _, tc := range []struct {
		name    string
		f       func(string, map[string]any)
		learned int
	}{
		{"affinity timeout changed", func(n string, s map[string]any) {
			if n == affinity {
				s["timeout"] = 60
			}
		}, 3},
		{"cluster-ips element added", func(n string, s map[string]any) {
			if n == "cluster-ips" {
				s["elem"] = []any{"10.96.0.15", "10.96.0.16"}
			}
		}, 3},
		{"dynamic only", func(n string, s map[string]any) {
			if n == affinity {
				s["flags"] = "dynamic" // older nft prints one flag as a string
			}
		}, 1},
		{"timeout only", func(n string, s map[string]any) {
			if n == affinity {
				s["flags"] = []any{"timeout"}
			}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := edit(tc.f)
			got, err := NormalizeNFTJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			if DiffNormalized(want, got) == "" {
				t.Error("a programmed difference normalizes away")
			}
			if l, err := LearnedNFTJSON(b); err != nil || len(l) != tc.learned {
				t.Errorf("learned %d elements (%v), want %d: %q", len(l), err, tc.learned, l)
			}
		})
	}
	// Both flags are a list in every nft; one flag alone is not enough. A
	// flags value of another shape is no flags.
	for flags, want := range map[string]bool{`["dynamic","timeout"]`: true, `"timeout"`: false, `3`: false, `null`: false, ``: false} {
		if got := nftLearnedSet(json.RawMessage(flags)); got != want {
			t.Errorf("nftLearnedSet(%s) = %v, want %v", flags, got, want)
		}
	}
}

// TestSaveDumpsLearned: the node's dump files carry the learned state apart
// (<name>.nft.learned.gz, <name>.ipvs.learned.gz) and ParseLearned reads it
// back; the normalized file holds none of it.
func TestSaveDumpsLearned(t *testing.T) {
	f := &fakeRun{out: map[string]string{"nft list ruleset": "", "nft -j list ruleset": string(readTestdata(t, "nft-affinity-end.json"))}}
	nft, err := ReadNFTables(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	ipvs, _ := fakeIPVSDump(t)
	dir := t.TempDir()
	if err := SaveDumps(dir, "end", nft, ipvs); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"end.nft.learned.gz":  wantLearnedAffinity,
		"end.ipvs.learned.gz": {"TCP 10.96.0.11:80 -> 10.244.1.10:8080 activeConns 2 inactiveConns 5"},
	} {
		if d := cmp.Diff(want, ParseLearned(string(readGzip(t, filepath.Join(dir, file))))); d != "" {
			t.Errorf("%s (-want +got):\n%s", file, d)
		}
	}
	if n := string(readGzip(t, filepath.Join(dir, "end.nft.normalized.gz"))); strings.Contains(n, "10.180.0.") {
		t.Errorf("learned elements in the normalized dump:\n%s", n)
	}
	if n := string(readGzip(t, filepath.Join(dir, "end.ipvs.normalized.gz"))); strings.Contains(n, " 2 5") {
		t.Errorf("connection counts in the normalized dump:\n%s", n)
	}
	if l := nft.Learned(); len(l) != 3 {
		t.Errorf("NFTablesDump.Learned: %q", l)
	}
	if l := ipvs.IPTables.Learned(); l != nil {
		t.Errorf("IPTablesDump.Learned: %q", l)
	}
	if l := ParseLearned(""); l != nil {
		t.Errorf("ParseLearned of an empty file: %q", l)
	}
}
