package orchestrator

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// TestCompareOracle: the oracle reports equal dataplanes as equal, a
// difference in a reachable rule as a difference, and chains nothing jumps
// to as leftovers, not differences.
func TestCompareOracle(t *testing.T) {
	base := "# ipv4\n*nat\n:KUBE-SEP-A -\n:KUBE-SVC-X -\n:OUTPUT ACCEPT\n-A KUBE-SEP-A -j DNAT --to-destination 10.244.0.1:80\n-A KUBE-SVC-X -j KUBE-SEP-A\n-A OUTPUT -j KUBE-SVC-X\nCOMMIT\n"
	stale := strings.Replace(base, ":OUTPUT ACCEPT\n", ":KUBE-SEP-OLD -\n:OUTPUT ACCEPT\n", 1) + ""
	stale = strings.Replace(stale, "-A KUBE-SVC-X", "-A KUBE-SEP-OLD -j DNAT --to-destination 10.244.0.9:80\n-A KUBE-SVC-X", 1)
	wrong := strings.Replace(base, "10.244.0.1:80", "10.244.0.2:80", 1)
	m := scenarios.ModeSpec{Name: "iptables-legacy", Mode: scenarios.ModeIPTables}
	for _, tc := range []struct {
		name        string
		end         string
		equal       bool
		unreachable int
	}{
		{"same", base, true, 0},
		{"leftover chain", stale, true, 1},
		{"different rule", wrong, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeGz(t, filepath.Join(dir, "iptables-legacy.end.iptables.normalized.gz"), tc.end)
			writeGz(t, filepath.Join(dir, "iptables-legacy.oracle.iptables.normalized.gz"), base)
			o := compareOracle(dir, m)
			if !o.Checked || o.Equal != tc.equal || o.Unreachable != tc.unreachable {
				t.Errorf("oracle = %+v, want equal %v, unreachable %d", o, tc.equal, tc.unreachable)
			}
			if !tc.equal && !strings.Contains(o.Diff, "10.244.0.2:80") {
				t.Errorf("diff does not show the different rule:\n%s", o.Diff)
			}
		})
	}
	if o := compareOracle(t.TempDir(), m); o.Checked || o.Error == "" {
		t.Errorf("missing dumps: oracle = %+v, want unchecked with an error", o)
	}
}

// TestCompareOracleNFTStaleChain: an empty chain nothing reaches, which
// kube-proxy deletes in a later sync (as a soak's last flap left it), is
// reported, not a difference; an empty chain a rule still jumps to is.
func TestCompareOracleNFTStaleChain(t *testing.T) {
	fresh := "chain a {}\n  rule {\"expr\":[{\"goto\":{\"target\":\"b\"}}]}\nchain b {}\n  rule {\"expr\":[]}\n"
	m := scenarios.ModeSpec{Name: "nftables", Mode: scenarios.ModeNFTables}
	for _, tc := range []struct {
		name        string
		end         string
		equal       bool
		unreachable int
	}{
		{"stale chain", fresh + "chain service-X {}\n", true, 1},
		{"missing rule", "chain a {}\n  rule {\"expr\":[{\"goto\":{\"target\":\"b\"}}]}\nchain b {}\n", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeGz(t, filepath.Join(dir, "nftables.end.nft.normalized.gz"), tc.end)
			writeGz(t, filepath.Join(dir, "nftables.oracle.nft.normalized.gz"), fresh)
			if o := compareOracle(dir, m); o.Equal != tc.equal || o.Unreachable != tc.unreachable {
				t.Errorf("oracle = %+v, want equal %v, unreachable %d", o, tc.equal, tc.unreachable)
			}
		})
	}
}

func writeGz(t *testing.T, path, text string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSelectModes(t *testing.T) {
	data, err := os.ReadFile("../scenarios/2000x10.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadScenario("2000x10.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		modes  []string
		kernel string
		want   string
	}{
		{nil, "auto", "nftables iptables-legacy iptables-nft iptables-legacy-vm ipvs"},
		{[]string{"iptables", "ipvs"}, "auto", "iptables-legacy iptables-nft iptables-legacy-vm ipvs"},
		// The headline command: the scenario's VM entries, one kernel.
		{[]string{"iptables", "ipvs"}, "vm", "iptables-legacy-vm ipvs"},
		{[]string{"iptables"}, "host", "iptables-legacy iptables-nft"},
		{[]string{"ipvs"}, "host", "ipvs"},
		{[]string{"iptables-nft", "ipvs"}, "vm", "iptables-nft ipvs"},
		{[]string{"nftables"}, "vm", "nftables"},
	} {
		got, err := selectModes(s, Options{Modes: tc.modes, Kernel: tc.kernel})
		if err != nil {
			t.Fatalf("%v --kernel %s: %v", tc.modes, tc.kernel, err)
		}
		var names []string
		for _, m := range got {
			names = append(names, m.Name)
		}
		if g := strings.Join(names, " "); g != tc.want {
			t.Errorf("--modes %v --kernel %s: got %s, want %s", tc.modes, tc.kernel, g, tc.want)
		}
	}
	if _, err := selectModes(s, Options{Modes: []string{"userspace"}, Kernel: "auto"}); err == nil || !strings.Contains(err.Error(), "no such mode entry") {
		t.Errorf("--modes userspace: got %v, want no such mode entry", err)
	}
}

// TestCompareOracleLearnedApart: affinity-set elements packets added (the
// node's dump keeps them in a learned file, out of the normalized one) are
// counted apart and leave the verdict equal.
func TestCompareOracleLearnedApart(t *testing.T) {
	dump := "chain a {}\n  rule {\"expr\":[]}\n"
	m := scenarios.ModeSpec{Name: "nftables", Mode: scenarios.ModeNFTables}
	dir := t.TempDir()
	writeGz(t, filepath.Join(dir, "nftables.end.nft.normalized.gz"), dump)
	writeGz(t, filepath.Join(dir, "nftables.oracle.nft.normalized.gz"), dump)
	writeGz(t, filepath.Join(dir, "nftables.end.nft.learned.gz"), "ip kube-proxy set affinity-X elem 10.180.0.2\nip kube-proxy set affinity-X elem 10.180.0.3\n")
	o := compareOracle(dir, m)
	if !o.Equal || o.Learned != 2 || len(o.LearnedSample) != 2 {
		t.Errorf("oracle = %+v, want equal with 2 learned items apart", o)
	}
}

func TestMissedTextSaysWhy(t *testing.T) {
	res := &reports.Result{
		Expectations: []reports.Expectation{
			{Name: "oracle", Mode: "ipvs", Want: "equal", Got: "different", Detail: "live table lacks\n  a rule"},
			{Name: "syncP99", Mode: "nftables", Want: "<= 1s", Got: "200ms", Passed: true},
		},
		Modes: []reports.ModeResult{{Name: "ipvs", Error: strings.Repeat("x", 500)}},
	}
	got := missedText(res)
	lines := strings.Split(got, "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line for the missed expectation and one for the failed mode, got:\n%s", got)
	}
	if want := "  oracle ipvs: want equal, got different: live table lacks a rule"; lines[0] != want {
		t.Errorf("line 1 = %q, want %q", lines[0], want)
	}
	if !strings.HasPrefix(lines[1], "  ipvs failed: xxx") || !strings.HasSuffix(lines[1], "(result.json has the rest)") || len(lines[1]) > 460 {
		t.Errorf("line 2 = %q, want the mode's error cut at 400 characters", lines[1])
	}
}
