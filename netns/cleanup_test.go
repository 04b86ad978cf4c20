package netns

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fakeProc writes a /proc-like tree: pid -> (cmdline args, ppid).
func fakeProc(t *testing.T, procs map[int]struct {
	args []string
	ppid int
}) string {
	t.Helper()
	dir := t.TempDir()
	for pid, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		cmdline := strings.Join(p.args, "\x00") + "\x00"
		stat := strconv.Itoa(pid) + " (weird name) S " + strconv.Itoa(p.ppid) + " 1 1 0"
		if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmdline), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCleanupDirs(t *testing.T) {
	tmp := t.TempDir()
	proc := fakeProc(t, map[int]struct {
		args []string
		ppid int
	}{
		100: {args: []string{"kpsim"}, ppid: 1},
	})
	mk := func(name, owner string) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, OwnerFile), []byte(owner), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	crashed := mk("kpsim-run1-vm", "")
	ownerGone := mk("kpsim-run2-work", "4242")
	live := mk("kpsim-run3-work", "100")
	other := mk("other-dir", "")
	p := cleanupPaths{runNetns: filepath.Join(tmp, "no-netns"), tmp: tmp, proc: proc}

	dry, err := cleanup(p, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 2 {
		t.Errorf("dry run lists %v, want the two dead dirs", dry)
	}
	if only, _ := cleanup(p, "run2", true); len(only) != 1 || !strings.Contains(only[0], ownerGone) {
		t.Errorf("dry run for run2 lists %v", only)
	}
	removed, err := cleanup(p, "", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"dir " + crashed, "dir " + ownerGone}
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	// Idempotent: nothing left to do.
	if again, err := cleanup(p, "", false); err != nil || len(again) != 0 {
		t.Errorf("second cleanup removed %v, %v", again, err)
	}
}

func TestNodeProcesses(t *testing.T) {
	proc := fakeProc(t, map[int]struct {
		args []string
		ppid int
	}{
		10: {args: []string{"kpsim", "run"}, ppid: 1},
		11: {args: []string{NodeArgv0, "proxier", "kpsim-aaaa", "10"}, ppid: 10}, // owned
		12: {args: []string{NodeArgv0, "proxier", "kpsim-bbbb", "99"}, ppid: 1},  // orphan
		13: {args: []string{"bash"}, ppid: 1},
		// Forked by node 11 to run a program, not yet exec'd: not an orphan.
		14: {args: []string{NodeArgv0, "proxier", "kpsim-aaaa", "10"}, ppid: 11},
		// Left by node 12 (an orphan itself): the orphan is its parent.
		15: {args: []string{NodeArgv0, "proxier", "kpsim-bbbb", "99"}, ppid: 12},
	})
	nodes, err := nodeProcesses(proc)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("found %d node processes, want 4: %+v", len(nodes), nodes)
	}
	orphans, err := orphanNodes(proc)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 || orphans[0].pid != 12 || orphans[0].runID != "kpsim-bbbb" {
		t.Errorf("orphans = %+v, want pid 12 of run kpsim-bbbb", orphans)
	}
	if ppid, ok := parentPID(proc, 12); !ok || ppid != 1 {
		t.Errorf("parentPID = %d, %t", ppid, ok)
	}
}
