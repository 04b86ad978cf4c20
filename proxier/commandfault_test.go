package proxier

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandFaultWrapper: armed failures fail the next runs that change
// rules, reads always go through, and the wrapper runs the program its
// name resolved to before (argv and stdin intact).
func TestCommandFaultWrapper(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh:", err)
	}
	bin := t.TempDir()
	// A stand-in ipset that echoes its arguments and stdin.
	fake := "#!/bin/sh\necho \"ran $*\"\ncat\n"
	if err := os.WriteFile(filepath.Join(bin, "ipset"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tools := Tools{Binaries: map[string]string{}}
	if err := addFaultWrappers(ctx, Options{ToolsDir: t.TempDir(), FaultPrograms: []string{"ipset"}, FaultsArmed: map[string]int{"ipset": 1}}, &tools); err != nil {
		t.Fatal(err)
	}
	p := &Proxier{tools: tools, faultPrograms: []string{"ipset"}}
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("ipset", args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("", "save"); err != nil || out != "ran save\n" {
		t.Errorf("ipset save with a failure armed: %q, %v; reads must go through", out, err)
	}
	if out, err := run("x", "add", "s", "1.2.3.4"); err == nil || !strings.Contains(out, "injected failure of ipset") {
		t.Errorf("armed ipset add: %q, %v; want the injected failure", out, err)
	}
	if out, err := run("in\n", "add", "s", "1.2.3.4"); err != nil || out != "ran add s 1.2.3.4\nin\n" {
		t.Errorf("ipset add after the failure was used: %q, %v", out, err)
	}
	if err := p.ArmCommandFault("ipset", 2); err != nil {
		t.Fatal(err)
	}
	if err := p.ArmCommandFault("nft", 1); err == nil {
		t.Error("arming an unwrapped program: no error")
	}
	for range 3 {
		run("", "del", "s", "1.2.3.4")
	}
	got := p.CommandFaults()["ipset"]
	if got != (CommandFaultCount{Injected: 3, Armed: 0}) {
		t.Errorf("counts: got %+v, want 3 injected, none left", got)
	}
	if !strings.HasPrefix(tools.Binaries["ipset"], tools.FaultDir) {
		t.Errorf("tools record %q, want the wrapper in %s", tools.Binaries["ipset"], tools.FaultDir)
	}
}
