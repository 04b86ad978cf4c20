package toolexec

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestExec(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	var e Exec
	out, err := e.Run(context.Background(), Cmd{Name: "sh", Args: []string{"-c", "cat; echo done"}, Stdin: "in\n"})
	if err != nil || string(out) != "in\ndone\n" {
		t.Fatalf("Run = %q, %v; want the input echoed and done", out, err)
	}
	_, err = e.Run(context.Background(), Command("sh", "-c", "echo bad >&2; exit 3"))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "bad") || !strings.Contains(err.Error(), "sh -c") {
		t.Errorf("failing run: %v, want the command, its status and its stderr", err)
	}
	if runs, _ := e.Usage(); runs != 2 {
		t.Errorf("Usage counts %d runs, want 2", runs)
	}
}

// TestExecOwnGroup: with OwnGroup the program leads a process group of its
// own, so a signal to the caller's group (a terminal's Ctrl-C) misses it;
// without, it shares the caller's.
func TestExecOwnGroup(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	// Field 5 of /proc/PID/stat is the process group; sh's name has no space.
	const pgrp = `echo $$ $(cut -d' ' -f5 /proc/$$/stat)`
	ours := syscall.Getpgrp()
	for _, own := range []bool{false, true} {
		out, err := (&Exec{OwnGroup: own}).Run(context.Background(), Command("sh", "-c", pgrp))
		if err != nil {
			t.Fatal(err)
		}
		var pid, group int
		if _, err := fmt.Sscan(string(out), &pid, &group); err != nil {
			t.Fatalf("sh printed %q: %v", out, err)
		}
		switch {
		case own && group != pid:
			t.Errorf("OwnGroup: the program is in group %d, want its own (%d)", group, pid)
		case !own && group != ours:
			t.Errorf("without OwnGroup: the program is in group %d, want the caller's (%d)", group, ours)
		}
	}
}

func TestFakeStrict(t *testing.T) {
	f := &Fake{Calls: []FakeCall{
		{Cmd: Command("iptables-legacy-save"), Stdout: "*nat\nCOMMIT\n"},
		{Cmd: Command("ipset", "save"), Err: errors.New("exit status 1: boom")},
		{Cmd: Command("nft", "list", "ruleset")},
	}, Missing: []string{"nft"}}
	if _, err := f.LookPath("nft"); err == nil {
		t.Error("LookPath found a missing program")
	}
	if p, err := f.LookPath("ipset"); err != nil || p != "/usr/sbin/ipset" {
		t.Errorf("LookPath(ipset) = %q, %v", p, err)
	}
	if out, err := f.Run(context.Background(), Command("iptables-legacy-save")); err != nil || string(out) != "*nat\nCOMMIT\n" {
		t.Errorf("first call = %q, %v", out, err)
	}
	if _, err := f.Run(context.Background(), Command("ipset", "list")); err == nil {
		t.Error("a call out of order was answered")
	}
	if _, err := f.Run(context.Background(), Command("ipset", "save")); err == nil || !strings.Contains(err.Error(), "ipset save: exit status 1: boom") {
		t.Errorf("failing call: %v", err)
	}
	err := f.Done()
	if err == nil || !strings.Contains(err.Error(), `"ipset list"`) || !strings.Contains(err.Error(), `"nft list ruleset" was not made`) {
		t.Errorf("Done = %v, want the wrong call and the missing one", err)
	}
}
