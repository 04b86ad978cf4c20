package proxier

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// buildExecTimer compiles cmd/kpsim-exectimer into a temporary directory,
// as make build does (but linked dynamically: a test needs no libc.a).
func buildExecTimer(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("needs a C compiler for kpsim-exectimer: %v", err)
	}
	_, here, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(here), "..", "cmd", "kpsim-exectimer", "exectimer.c")
	out := filepath.Join(t.TempDir(), ExecTimerName)
	if b, err := exec.Command(cc, "-O2", "-Wall", "-Werror", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("building kpsim-exectimer: %v\n%s", err, b)
	}
	return out
}

// TestExecTimer runs a stand-in nft through the timer: what it prints,
// reads and exits with passes through unchanged, and every run comes back
// as a KernelCall named by what it asked for, timed around the program.
func TestExecTimer(t *testing.T) {
	timer := buildExecTimer(t)
	// A stand-in for nft, first in PATH: lists print, a transaction echoes
	// its standard input after 50 ms, a check fails.
	fakeDir := t.TempDir()
	script := `#!/bin/sh
case "$*" in
*list*) echo '{"nftables": []}' ;;
*--check*) echo "Error: no such table" >&2; exit 1 ;;
"-f -") sleep 0.05; cat ;;
*) echo "nftables v1.1.3 (Commodore Bullmoose #4)" ;;
esac
`
	if err := os.WriteFile(filepath.Join(fakeDir, "nft"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fakeDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("KPSIM_EXECTIMER_nft", "")
	t.Setenv("KPSIM_EXECTIMER_LOG", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tools := Tools{Binaries: map[string]string{"nft": filepath.Join(fakeDir, "nft")}}
	timer0, err := addExecTimer(ctx, Options{ExecTimer: timer, ToolsDir: t.TempDir()}, &tools, "nft")
	if err != nil {
		t.Fatal(err)
	}
	if path, _ := exec.LookPath("nft"); filepath.Dir(path) != tools.TimerDir {
		t.Fatalf("nft resolves to %s, want the timer's directory %s", path, tools.TimerDir)
	}
	if want := "(kpsim-exectimer) -> " + filepath.Join(fakeDir, "nft"); !strings.HasSuffix(tools.Binaries["nft"], want) {
		t.Errorf("Binaries[nft] = %q, want it to end in %q", tools.Binaries["nft"], want)
	}
	if d, err := TimerOverhead(ctx, timer, t.TempDir()); err != nil || d <= 0 || d > time.Second {
		t.Errorf("TimerOverhead = %v, %v; want a small positive cost", d, err)
	}

	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("nft", args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		return string(out), err
	}
	begin := time.Now()
	if out, err := run("", "--version"); err != nil || !strings.HasPrefix(out, "nftables v1.1.3") {
		t.Errorf("nft --version = %q, %v", out, err)
	}
	if out, err := run("", "--json", "--terse", "list", "table", "ip", "kube-proxy"); err != nil || out != "{\"nftables\": []}\n" {
		t.Errorf("nft list = %q, %v", out, err)
	}
	tx := "add table ip kube-proxy\nflush table ip kube-proxy\n"
	if out, err := run(tx, "-f", "-"); err != nil || out != tx {
		t.Errorf("nft -f - = %q, %v; want its input back", out, err)
	}
	_, err = run("", "--check", "-f", "-")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(ee.Stderr), "no such table") {
		t.Errorf("nft --check = %v; want exit status 1 with its error", err)
	}

	calls, err := timer0.calls()
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]string
	for _, c := range calls {
		got = append(got, [2]string{c.Method, c.Err})
		if c.Start.Before(begin) || c.Duration <= 0 {
			t.Errorf("%s: start %v (test began %v), duration %v", c.Method, c.Start, begin, c.Duration)
		}
	}
	want := [][2]string{{NFTOther, ""}, {NFTList, ""}, {NFTTransaction, ""}, {NFTCheck, "exit status 1"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("timed runs (-want +got):\n%s", d)
	}
	if tx := calls[2]; tx.Duration < 50*time.Millisecond || !slices.Equal(tx.Args, []string{"-f", "-"}) {
		t.Errorf("transaction: %v, args %q; want at least the 50 ms it slept, and its arguments", tx.Duration, tx.Args)
	}
	if more, err := timer0.calls(); err != nil || len(more) != 0 {
		t.Errorf("a second read returned %d runs (%v); want only new ones", len(more), err)
	}
	sums := SumKernelParts(calls, time.Time{}, time.Time{})
	if sums[PartNFTList].Calls != 1 || sums[PartNFTTransaction].Calls != 1 || sums[PartNFTOther].Calls != 2 || sums[PartNFTOther].Errors != 1 {
		t.Errorf("parts: %+v", sums)
	}
}

// TestExecTimerLogPartialLine: a line still being written is left for the
// next read, and lines are parsed whole.
func TestExecTimerLogPartialLine(t *testing.T) {
	log := filepath.Join(t.TempDir(), "runs.log")
	tm := &execTimer{log: log}
	if calls, err := tm.calls(); err != nil || calls != nil {
		t.Fatalf("no log yet: %v, %v", calls, err)
	}
	line := `{"start":1000000000,"end":1250000000,"args":["--json","list","table","ip","kube-proxy"],"exit":0,"signal":0,"userUsec":1500,"sysUsec":500}`
	if err := os.WriteFile(log, []byte(line[:40]), 0o644); err != nil {
		t.Fatal(err)
	}
	if calls, err := tm.calls(); err != nil || len(calls) != 0 {
		t.Fatalf("half a line: %v, %v; want nothing yet", calls, err)
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(line[40:] + "\n" + strings.Replace(line, `"signal":0`, `"signal":9`, 1) + "\n")
	f.Close()
	calls, err := tm.calls()
	if err != nil {
		t.Fatal(err)
	}
	want := []KernelCall{
		{Method: NFTList, Start: time.Unix(1, 0), Duration: 250 * time.Millisecond, Args: []string{"--json", "list", "table", "ip", "kube-proxy"}, CPU: 2 * time.Millisecond},
		{Method: NFTList, Start: time.Unix(1, 0), Duration: 250 * time.Millisecond, Args: []string{"--json", "list", "table", "ip", "kube-proxy"}, CPU: 2 * time.Millisecond, Err: "killed by signal 9"},
	}
	if d := cmp.Diff(want, calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
}

func TestNFTRunMethod(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", "--terse", "list", "table", "ip", "kube-proxy"}, NFTList},
		{[]string{"--json", "list", "set", "ip", "kube-proxy", "cluster-ips"}, NFTList},
		{[]string{"-f", "-"}, NFTTransaction},
		{[]string{"--check", "-f", "-"}, NFTCheck},
		{[]string{"--version"}, NFTOther},
	} {
		if got := nftRunMethod(c.args); got != c.want {
			t.Errorf("nftRunMethod(%q) = %s, want %s", c.args, got, c.want)
		}
	}
}
