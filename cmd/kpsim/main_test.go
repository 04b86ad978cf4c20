package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/scenarios"
)

func TestValidateExitCodes(t *testing.T) {
	shipped, _ := filepath.Glob("../../scenarios/*.yaml")
	invalid, _ := filepath.Glob("../../scenarios/testdata/invalid/*.yaml")
	if len(shipped) == 0 || len(invalid) < 20 {
		t.Fatalf("found %d shipped and %d invalid scenarios", len(shipped), len(invalid))
	}
	if code := run(append([]string{"validate"}, shipped...)); code != exitOK {
		t.Errorf("validate of shipped scenarios exited %d, want 0", code)
	}
	for _, f := range invalid {
		if code := run([]string{"validate", f}); code != exitBadInput {
			t.Errorf("validate %s exited %d, want %d", f, code, exitBadInput)
		}
	}
}

func TestValidateNamesFileAndLine(t *testing.T) {
	var out, errOut bytes.Buffer
	err := validateFiles(&out, &errOut, []string{"../../scenarios/testdata/invalid/count-is-a-string.yaml"})
	if err == nil {
		t.Fatal("no error for an invalid file")
	}
	want := "count-is-a-string.yaml:8: spec.serviceGroups[0].count:"
	if !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q does not contain %q", errOut.String(), want)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"no-such-command"}, {"validate"}, {"run"}, {"modes", "--no-such-flag"}} {
		if code := run(args); code != exitBadInput {
			t.Errorf("kpsim %v exited %d, want %d", args, code, exitBadInput)
		}
	}
}

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
