package rules

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readGzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSaveDumps(t *testing.T) {
	ctx := context.Background()
	f := &fakeRun{out: map[string]string{
		"iptables-legacy-save":  string(readTestdata(t, "kube-proxy-iptables-legacy.save")),
		"ip6tables-legacy-save": "",
		"nft list ruleset":      string(readTestdata(t, "kube-proxy-nft.txt")),
		"nft -j list ruleset":   string(readTestdata(t, "kube-proxy-nft.json")),
	}}
	ipt, err := ReadIPTables(ctx, f, BackendLegacy)
	if err != nil {
		t.Fatal(err)
	}
	nft, err := ReadNFTables(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "dumps")
	if err := SaveDumps(dir, "run1", ipt, nft); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"run1.iptables-save.gz":       f.out["iptables-legacy-save"],
		"run1.ip6tables-save.gz":      "",
		"run1.nft.gz":                 f.out["nft list ruleset"],
		"run1.nft.json.gz":            f.out["nft -j list ruleset"],
		"run1.iptables.normalized.gz": ipt.Normalize(),
		"run1.nft.normalized.gz":      nft.Normalize(),
	} {
		if got := string(readGzip(t, filepath.Join(dir, file))); got != want {
			t.Errorf("%s: content differs from the dump", file)
		}
	}
	// A user re-derives iptables/nat with zcat | grep -c '^-A' on the nat
	// section; the whole file's count is the sum over tables.
	raw := string(readGzip(t, filepath.Join(dir, "run1.iptables-save.gz")))
	if got := strings.Count(raw, "\n-A "); got != 53+16 {
		t.Errorf("grep finds %d rules, want 69 (nat 53 + filter 16)", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "run1.counts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var counts map[string]int
	if err := json.Unmarshal(b, &counts); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"iptables/nat": 53, "iptables/nat/chains": 25, "iptables/filter": 16, "iptables/filter/chains": 10,
		"iptables/mangle": 0, "iptables/mangle/chains": 6,
		"nftables/rules": 27, "nftables/chains": 20, "nftables/setElements": 5, "nftables/mapElements": 6, "nftables/numgenRules": 4,
	}
	if d := cmp.Diff(want, counts); d != "" {
		t.Errorf("counts.json (-want +got):\n%s", d)
	}

	for _, name := range []string{"", "a/b", "..", ".hidden"} {
		if err := SaveDumps(dir, name, ipt); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if err := SaveDumps(dir, "x"); err == nil {
		t.Error("no dumps accepted")
	}
	if err := SaveDumps(dir, "x", (*IPTablesDump)(nil)); err == nil {
		t.Error("nil dump accepted")
	}
}

func TestDiffNormalized(t *testing.T) {
	a := "*nat\n:A -\n-A A -j X\n-A A -j Y\nCOMMIT\n"
	if d := DiffNormalized(a, a); d != "" {
		t.Errorf("equal texts: %q", d)
	}
	b := strings.Replace(a, "-A A -j Y", "-A A -j Z", 1)
	d := DiffNormalized(a, b)
	if !strings.Contains(d, "- -A A -j Y") || !strings.Contains(d, "+ -A A -j Z") {
		t.Errorf("diff does not show the changed lines:\n%s", d)
	}
	// The same rules in another order differ (cascades are ordered).
	swapped := "*nat\n:A -\n-A A -j Y\n-A A -j X\nCOMMIT\n"
	if d := DiffNormalized(a, swapped); !strings.Contains(d, "another order") || !strings.Contains(d, "line 3") {
		t.Errorf("reordered rules: %q", d)
	}
	// A duplicated rule shows.
	dup := strings.Replace(a, "-A A -j Y\n", "-A A -j Y\n-A A -j Y\n", 1)
	if d := DiffNormalized(a, dup); d != "+ -A A -j Y" {
		t.Errorf("duplicated rule: %q", d)
	}
}
