package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/reports"
)

// envTestOrchestrator makes the test binary run as the kpsim command
// (TestMain): the fault test needs an orchestrator in its own process to
// kill, and this binary already holds the node mains its nodes re-execute.
const envTestOrchestrator = "KPSIM_TEST_AS_KPSIM"

// runAsKpsim runs the kpsim command when envTestOrchestrator is set.
func runAsKpsim() (int, bool) {
	if os.Getenv(envTestOrchestrator) == "" {
		return 0, false
	}
	os.Unsetenv(envTestOrchestrator)
	return run(os.Args[1:]), true
}

var (
	killSeed   = flag.Uint64("kill-seed", 0, "seed of TestPrivilegedKillRun's trials (0: from the clock; the seed used is logged)")
	killTrials = flag.Int("kill-trials", 20, "trials of TestPrivilegedKillRun")
)

// A fault trial kills one process of a run at a random time.
type killTrial struct {
	toNode bool // the orchestrator's current node process, else the orchestrator
	sig    syscall.Signal
	group  bool // orchestrator SIGINT to its process group, as Ctrl-C does
	delay  time.Duration
}

func (k killTrial) target() string {
	switch {
	case k.toNode:
		return "node"
	case k.group:
		return "orchestrator+group"
	}
	return "orchestrator"
}

// TestPrivilegedKillRun runs kpsim run of a small scenario (iptables
// legacy and nftables on the host) and kills the orchestrator or its node
// process with SIGKILL or SIGINT at a random time, trial after trial.
// After each trial every process of the run must be gone, the host
// unchanged, and `kpsim cleanup` must find nothing of the run. Replay a
// failure with -kill-seed.
func TestPrivilegedKillRun(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "nft")
	if testing.Short() {
		t.Skip("fault test: runs the scenario about 20 times")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	scenario, err := filepath.Abs("testdata/faults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seed := *killSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test ./cmd/kpsim -run TestPrivilegedKillRun -kill-seed %d)", seed, seed)
	began := time.Now()

	// One undisturbed run: it must pass, and its length bounds the
	// random kill times so they spread over every phase.
	base := startKpsim(t, exe, scenario)
	st, err := base.wait(3 * time.Minute)
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("undisturbed run: %v %v\nstderr:\n%s", st, err, base.stderr.String())
	}
	span := base.ended.Sub(base.started)
	t.Logf("undisturbed run: %s", span.Round(time.Millisecond))

	rng := rand.New(rand.NewPCG(seed, 8))
	var rows []string
	clean, redrawn := 0, 0
	for i := range *killTrials {
		k := killTrial{
			toNode: rng.IntN(2) == 1,
			sig:    []syscall.Signal{syscall.SIGKILL, syscall.SIGINT}[rng.IntN(2)],
			delay:  time.Duration(rng.Int64N(int64(span))),
		}
		if !k.toNode && k.sig == syscall.SIGINT {
			k.group = rng.IntN(2) == 1
		}
		// Run lengths vary with the machine's load: a run that ended
		// before its signal is checked like the others but redrawn with
		// a delay within its own length, so every trial kills something.
		var row string
		var ok bool
		for attempt := 1; ; attempt++ {
			var delivered bool
			var length time.Duration
			row, ok, delivered, length = runKillTrial(t, exe, scenario, k)
			row = fmt.Sprintf("%2d  %-18s  %-7s  %6.2fs  %s", i+1, k.target(), sigName(k.sig), k.delay.Seconds(), row)
			if delivered || attempt == 4 || length <= 0 {
				break
			}
			t.Logf("redrawn: %s", row)
			redrawn++
			// Runs got quicker than the undisturbed one: later trials
			// draw within this length too.
			span = min(span, length)
			k.delay = time.Duration(rng.Int64N(int64(length)))
		}
		rows = append(rows, row)
		if ok {
			clean++
		}
	}
	t.Logf("trial  target  signal  delay  phase reached | outcome\n%s", strings.Join(rows, "\n"))
	t.Logf("%d/%d trials clean in %s (%d delays redrawn: the run had ended first)", clean, *killTrials, time.Since(began).Round(time.Second), redrawn)
	if clean != *killTrials {
		t.Errorf("%d of %d trials left something or ended wrongly (seed %d)", *killTrials-clean, *killTrials, seed)
	}
}

// runKillTrial runs one trial and returns its table row, whether it was
// clean (what was wrong is reported with t.Errorf), whether the signal
// reached a live process, and how long the run took.
func runKillTrial(t *testing.T, exe, scenario string, k killTrial) (row string, clean, delivered bool, length time.Duration) {
	t.Helper()
	errs := 0
	fail := func(format string, args ...any) {
		errs++
		t.Errorf("%s %s after %s: "+format, append([]any{k.target(), sigName(k.sig), k.delay.Round(time.Millisecond)}, args...)...)
	}
	before, err := netns.TakeHostSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	tmpBefore, _ := filepath.Glob(filepath.Join(os.TempDir(), netns.Prefix+"*"))

	r := startKpsim(t, exe, scenario)
	w := watchNodes(r.cmd.Process.Pid)
	timer := time.NewTimer(k.delay)
	var phase, victim string
	select {
	case <-timer.C:
		phase = r.phase()
		pid := r.cmd.Process.Pid
		if k.toNode {
			// The node alive now; between two nodes, the next one.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			pid = w.current(ctx, r.exited)
			cancel()
		}
		switch {
		case pid == 0:
			victim = "no node left"
		case k.group:
			victim = "pgid " + strconv.Itoa(pid)
			err = syscall.Kill(-pid, k.sig)
		default:
			victim = "pid " + strconv.Itoa(pid)
			err = syscall.Kill(pid, k.sig)
		}
		delivered = pid != 0 && err == nil
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			fail("signal %s: %v", victim, err)
		}
	case <-r.exited:
		timer.Stop()
		phase, victim = r.phase(), "run ended first"
	}
	st, werr := r.wait(2 * time.Minute)
	w.stop()
	if werr != nil {
		fail("%v", werr)
	}
	stderr := r.stderr.String()

	// Every process of the run ends: nodes die with the orchestrator
	// (Pdeathsig), and programs a node started (iptables-restore, nft)
	// with their namespace's last user.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	left, err := w.waitGone(ctx)
	cancel()
	if err != nil {
		fail("processes of the run still alive: %v (%v)", left, err)
	}
	runID := r.runID()
	if runID == "" {
		runID = w.runID()
	}

	outcome := exitOutcome(st)
	switch {
	case !delivered:
		if st.ExitCode() != exitOK {
			fail("undisturbed run ended %s; stderr:\n%s", outcome, stderr)
		}
	case !k.toNode && k.sig == syscall.SIGKILL:
		if !signaled(st, syscall.SIGKILL) {
			fail("orchestrator ended %s, want killed", outcome)
		}
	case !k.toNode:
		// SIGINT before the handler is installed ends the process at
		// once; that is fine only while nothing exists yet.
		if signaled(st, syscall.SIGINT) {
			if runID != "" {
				fail("orchestrator died of SIGINT after the run %s began", runID)
			}
			break
		}
		if st.ExitCode() != exitExpectation || !strings.Contains(stderr, "kpsim: interrupted") {
			fail("orchestrator ended %s, want exit %d saying it was interrupted; stderr:\n%s", outcome, exitExpectation, stderr)
		}
		if res, err := reports.ReadFile(filepath.Join(r.out, "result.json")); err != nil {
			fail("interrupted run wrote no result: %v", err)
		} else {
			outcome += fmt.Sprintf(", result.json with %d mode(s)", len(res.Modes))
			if !res.Host.Checked || !res.Host.Unchanged {
				fail("interrupted run's own host check: %+v", res.Host)
			}
		}
	default:
		// A node that dies or stops early fails its mode; the run goes on
		// and says so (exit 1), or ends ok when the node had finished.
		if code := st.ExitCode(); code != exitOK && code != exitExpectation {
			fail("orchestrator ended %s after its node was signalled; stderr:\n%s", outcome, stderr)
		}
		if _, err := os.Stat(filepath.Join(r.out, "result.json")); err != nil {
			fail("no result.json after a node was signalled: %v", err)
		}
	}
	if strings.Contains(stderr, "panic:") {
		fail("panic:\n%s", stderr)
	}

	after, err := netns.TakeHostSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := netns.Diff(before, after); d != "" {
		fail("host changed:\n%s", d)
	}
	var leftovers []string
	if runID != "" {
		if leftovers, err = netns.Leftovers(runID); err != nil {
			fail("cleanup dry run: %v", err)
		}
	}
	// Temp dirs new since the trial, of this run or owned by its
	// processes (another run may be using the machine too).
	tmpAfter, _ := filepath.Glob(filepath.Join(os.TempDir(), netns.Prefix+"*"))
	for _, d := range tmpAfter {
		if slices.Contains(tmpBefore, d) {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(d, netns.OwnerFile))
		owner, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if (runID != "" && strings.Contains(d, runID)) || w.pids[owner] || owner == r.cmd.Process.Pid {
			leftovers = append(leftovers, "dir "+d)
		}
	}
	if len(leftovers) > 0 {
		fail("left behind: %v", leftovers)
	}
	row = fmt.Sprintf("%-40s | %s (%s), %d node(s) seen, leftovers %d", truncate(phase, 40), outcome, victim, len(w.pids), len(leftovers))
	return row, errs == 0, delivered, r.ended.Sub(r.started)
}

// kpsimRun is one kpsim run orchestrator process.
type kpsimRun struct {
	cmd            *exec.Cmd
	out            string
	stderr         *lockedBuffer
	started, ended time.Time
	exited         chan struct{}
}

func startKpsim(t *testing.T, exe, scenario string) *kpsimRun {
	t.Helper()
	out := t.TempDir()
	r := &kpsimRun{out: out, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	r.cmd = &exec.Cmd{
		Path:   exe,
		Args:   []string{"kpsim", "run", scenario, "--kernel", "host", "--out", out},
		Env:    append(os.Environ(), envTestOrchestrator+"=1"),
		Stdout: &lockedBuffer{},
		Stderr: r.stderr,
		SysProcAttr: &syscall.SysProcAttr{
			// Its own group, so a Ctrl-C-like group signal spares the test.
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	r.started = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait() // the exit status is read from ProcessState
		r.ended = time.Now()
		close(r.exited)
	}()
	t.Cleanup(func() {
		// Only if the test failed midway: the whole group, by its id.
		select {
		case <-r.exited:
		default:
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			<-r.exited
		}
	})
	return r
}

// wait waits for the orchestrator to exit, at most d.
func (r *kpsimRun) wait(d time.Duration) (*os.ProcessState, error) {
	select {
	case <-r.exited:
		return r.cmd.ProcessState, nil
	case <-time.After(d):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
		return r.cmd.ProcessState, fmt.Errorf("kpsim run did not end within %s; killed", d)
	}
}

var runLineRE = regexp.MustCompile(`(?m)^run (kpsim-[0-9a-f]{8}): `)

// runID is the run id the orchestrator announced on stderr, if it got
// that far.
func (r *kpsimRun) runID() string {
	if m := runLineRE.FindStringSubmatch(r.stderr.String()); m != nil {
		return m[1]
	}
	return ""
}

// phase is how far the run got: its last progress line on stderr.
func (r *kpsimRun) phase() string {
	lines := strings.Split(strings.TrimSpace(r.stderr.String()), "\n")
	last := lines[len(lines)-1]
	switch {
	case last == "":
		return "start (no output yet)"
	case strings.HasPrefix(last, "run "):
		return "run begun, first node starting"
	}
	// "iptables-legacy: 1.2s: step 2/5 flaps" without the time.
	if f := strings.SplitN(last, ": ", 3); len(f) == 3 && strings.HasPrefix(f[2], "step ") {
		return f[0] + ": " + f[2]
	}
	if i := strings.Index(last, " (log:"); i > 0 {
		last = last[:i]
	}
	return last
}

func exitOutcome(st *os.ProcessState) string {
	if st == nil {
		return "not ended"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + sigName(ws.Signal())
	}
	return "exit " + strconv.Itoa(st.ExitCode())
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}

func signaled(st *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// nodeWatch follows the node processes of one orchestrator in /proc:
// their pids, run id and namespaces, so the test can tell when every
// process of the run (and every program it started in those namespaces)
// is gone.
type nodeWatch struct {
	owner int
	done  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	pids  map[int]bool
	alive []int
	ns    map[string]bool // "net:[4026...]", "mnt:[...]" of the nodes
	run   string
}

func watchNodes(owner int) *nodeWatch {
	w := &nodeWatch{owner: owner, done: make(chan struct{}), pids: map[int]bool{}, ns: map[string]bool{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			w.scan()
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// scan records the live node processes of the orchestrator: argv is
// "kpsim-node", the node main, the run id and the orchestrator's pid (see
// netns.StartNode).
func (w *nodeWatch) scan() {
	var alive []int
	for _, p := range procPIDs() {
		args := procArgs(p)
		if len(args) < 4 || args[0] != "kpsim-node" || args[3] != strconv.Itoa(w.owner) {
			continue
		}
		// A node's child between fork and exec carries the node's argv;
		// it is watched through the node's namespaces instead.
		if procPPID(p) != w.owner {
			continue
		}
		alive = append(alive, p)
		w.mu.Lock()
		w.pids[p] = true
		w.run = args[2]
		for _, kind := range []string{"net", "mnt"} {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", p, kind)); err == nil {
				w.ns[l] = true
			}
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.alive = alive
	w.mu.Unlock()
}

func (w *nodeWatch) stop() {
	close(w.done)
	w.wg.Wait()
	w.scan()
}

func (w *nodeWatch) runID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.run
}

// current returns a live node's pid, waiting for one to start; 0 if the
// orchestrator exits (or ctx ends) first.
func (w *nodeWatch) current(ctx context.Context, exited <-chan struct{}) int {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		w.scan()
		w.mu.Lock()
		alive := slices.Clone(w.alive)
		w.mu.Unlock()
		if len(alive) > 0 {
			return alive[0]
		}
		select {
		case <-ctx.Done():
			return 0
		case <-exited:
			return 0
		case <-tick.C:
		}
	}
}

// waitGone waits until no node of the orchestrator and no process in a
// namespace of one of its nodes is left; it returns what is left.
func (w *nodeWatch) waitGone(ctx context.Context) ([]string, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		w.scan()
		var left []string
		w.mu.Lock()
		for _, p := range w.alive {
			left = append(left, fmt.Sprintf("node %d", p))
		}
		for _, p := range procPIDs() {
			for _, kind := range []string{"net", "mnt"} {
				if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", p, kind)); err == nil && w.ns[l] {
					left = append(left, fmt.Sprintf("pid %d (%s) in %s", p, strings.Join(procArgs(p), " "), l))
					break
				}
			}
		}
		w.mu.Unlock()
		if len(left) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-tick.C:
		}
	}
}

func procPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil && p != os.Getpid() {
			pids = append(pids, p)
		}
	}
	return pids
}

// procPPID reads the parent pid from /proc/<pid>/stat (the field after
// the parenthesised command, which may hold spaces).
func procPPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func procArgs(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// lockedBuffer is a bytes.Buffer safe to write from the process's
// copying goroutine while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
