package reports

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// testResult is a real 2000 Services x 10 endpoints run (iptables with
// both backends and nftables; IPVS skipped), trimmed to 8 probes per mode.
func testResult(t *testing.T) *Result {
	t.Helper()
	r, err := ReadFile(filepath.Join("testdata", "2000x10.result.json"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWriteMarkdownGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, testResult(t)); err != nil {
		t.Fatal(err)
	}
	golden(t, "2000x10.report.md", buf.Bytes())
}

func TestWriteMarkdownContent(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, testResult(t)); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{
		"6.18.44-fc-v669 (host)", "v1.37.1", "go1.26.8", "seed 1", "9bca8d77c8a8",
		"## Syncs", "## Rules at the end", "## Expectations", "## How these numbers were obtained",
		"iptables/nat/chains", "nftables/setElements", "skipped: kernel", SummaryMethod,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Every table row has as many cells as its header.
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "|") && strings.Count(strings.ReplaceAll(line, `\|`, ""), "|") < 3 {
			t.Errorf("line %d: malformed table row %q", i+1, line)
		}
	}
}

func TestWriteMarkdownEscapes(t *testing.T) {
	r := &Result{RunID: "x", Modes: []ModeResult{{Name: "a|b", Error: "boom <script>\nsecond line",
		Syncs: []Sync{{Seconds: 0.5, Full: true, Merged: 1}}}}}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	if strings.Contains(md, "<script>") || !strings.Contains(md, `a\|b (FAILED)`) || strings.Contains(md, "second line") {
		t.Errorf("measured text is not escaped:\n%s", md)
	}
}
