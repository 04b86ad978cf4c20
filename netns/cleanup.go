package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Prefix is carried by everything kpsim names outside a node process, with
// the run id after it, so Cleanup can find leftovers of a crashed run.
const Prefix = "kpsim-"

// OwnerFile in a kpsim- directory holds the pid of the process using it;
// Cleanup leaves the directory alone while that process lives.
const OwnerFile = "kpsim.pid"

// Cleanup removes what a crashed run could leave behind: named network
// namespaces /run/netns/kpsim-* (this package creates none, but sweeps
// them), directories $TMPDIR/kpsim-* (temp and VM work dirs) whose owner is
// gone, and node processes whose orchestrator is gone. It is idempotent and
// returns what it removed.
func Cleanup() (removed []string, err error) {
	return cleanup(defaultCleanupPaths(), "", false)
}

// Leftovers lists what Cleanup would remove, without removing anything;
// with a run id, only what carries it.
func Leftovers(runID string) ([]string, error) {
	return cleanup(defaultCleanupPaths(), runID, true)
}

type cleanupPaths struct{ runNetns, tmp, proc string }

func defaultCleanupPaths() cleanupPaths {
	return cleanupPaths{runNetns: "/run/netns", tmp: os.TempDir(), proc: "/proc"}
}

// cleanup sweeps leftovers carrying the prefix (and runID, if set); with
// dryRun it only lists them.
func cleanup(p cleanupPaths, runID string, dryRun bool) ([]string, error) {
	pattern := Prefix + "*"
	if runID != "" {
		pattern = "*" + runID + "*"
	}
	var removed []string
	var errs []error

	// Named namespaces are bind mounts: unmount, then remove the file.
	nsFiles, _ := filepath.Glob(filepath.Join(p.runNetns, pattern))
	for _, f := range nsFiles {
		if !strings.HasPrefix(filepath.Base(f), Prefix) {
			continue
		}
		if dryRun {
			removed = append(removed, "netns "+f)
			continue
		}
		if err := unix.Unmount(f, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", f, err))
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", f, err))
			continue
		}
		removed = append(removed, "netns "+f)
	}

	dirs, _ := filepath.Glob(filepath.Join(p.tmp, pattern))
	for _, d := range dirs {
		if !strings.HasPrefix(filepath.Base(d), Prefix) {
			continue
		}
		if pid, ok := ownerPID(d); ok && processAlive(p.proc, pid) {
			continue // in use by a live run
		}
		if dryRun {
			removed = append(removed, "dir "+d)
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
			continue
		}
		removed = append(removed, "dir "+d)
	}

	orphans, err := orphanNodes(p.proc)
	if err != nil {
		errs = append(errs, err)
	}
	for _, o := range orphans {
		if runID != "" && o.runID != runID {
			continue
		}
		if dryRun {
			removed = append(removed, fmt.Sprintf("process %d (%s)", o.pid, o.desc))
			continue
		}
		// By pid only, and only nodes whose orchestrator is gone: a
		// concurrent run's nodes are never touched.
		if err := syscall.Kill(o.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill orphaned node process %d (%s): %w", o.pid, o.desc, err))
			continue
		}
		removed = append(removed, fmt.Sprintf("process %d (%s)", o.pid, o.desc))
	}
	return removed, errors.Join(errs...)
}

func ownerPID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, OwnerFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

func processAlive(proc string, pid int) bool {
	_, err := os.Stat(filepath.Join(proc, strconv.Itoa(pid)))
	return err == nil
}

type nodeProc struct {
	pid, ppid int
	// owner is the orchestrator that started the node (argv[3]).
	owner int
	runID string
	desc  string
}

// nodeProcesses lists running node processes: argv[0] is "kpsim-node",
// then the node main's name, the run id and the orchestrator's pid (see
// StartNode). Only cmdline and
// stat are read, never environments.
func nodeProcesses(proc string) ([]nodeProc, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []nodeProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) < 4 || args[0] != NodeArgv0 {
			continue
		}
		owner, err := strconv.Atoi(args[3])
		if err != nil {
			continue
		}
		ppid, ok := parentPID(proc, pid)
		if !ok {
			continue
		}
		out = append(out, nodeProc{pid: pid, ppid: ppid, owner: owner, runID: args[2], desc: "node " + args[1] + " of run " + args[2]})
	}
	return out, nil
}

// orphanNodes are node processes whose orchestrator is gone (they were
// reparented). Pdeathsig kills nodes with their parent, so these only exist
// if that raced.
//
// A child a node forks to run a program (iptables-restore, nft) carries
// the node's argv until it execs; its parent is a live node of the same
// run, so it is no orphan (sweeping it would kill a live run's program).
func orphanNodes(proc string) ([]nodeProc, error) {
	nodes, err := nodeProcesses(proc)
	if err != nil {
		return nil, err
	}
	return orphans(nodes), nil
}

func orphans(nodes []nodeProc) []nodeProc {
	runOf := map[int]string{}
	for _, n := range nodes {
		runOf[n.pid] = n.runID
	}
	var out []nodeProc
	for _, n := range nodes {
		if run, ok := runOf[n.ppid]; ok && run == n.runID {
			continue // forked by a node, not yet exec'd
		}
		if n.ppid != n.owner {
			out = append(out, n)
		}
	}
	return out
}

// parentPID reads the ppid from /proc/<pid>/stat (the field after the
// parenthesised command, which may contain spaces).
func parentPID(proc string, pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// RunProcesses returns the pids of live node processes of the given run
// (with children a node forked that have not exec'd yet: they carry its
// argv).
func RunProcesses(runID string) ([]int, error) {
	nodes, err := nodeProcesses("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, n := range nodes {
		if n.runID == runID {
			pids = append(pids, n.pid)
		}
	}
	return pids, nil
}
