package proxier

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// kube-proxy's nftables mode runs nft through a knftables.Interface that
// upstream's nftables.NewProxier creates itself, so there is no interface
// to wrap in Go as there is for iptables and IPVS (kerneltime.go). Its runs
// are timed from outside instead: kpsim-exectimer (cmd/kpsim-exectimer, a
// small static C program) goes first in PATH under the name "nft", runs
// the real nft with the same arguments and streams, and appends a line per
// run to a log this file reads. knftables looks nft up once, when the
// proxier is built, so the timer goes in before that and after any other
// PATH change.
//
// Each timed run costs the timer's own start-up, which lands in
// kube-proxy's sync as "rest". TimerOverhead measures it, from the node
// process (its program runs must not count as kube-proxy's CPU), so
// reports can say how much.

// ExecTimerName is the timer's file name; make build puts it beside kpsim.
const ExecTimerName = "kpsim-exectimer"

// Methods of timed nft runs, by what the arguments ask for (nftRunMethod).
const (
	NFTList        = "nft.list"        // nft --json list table|chain|set|map ...
	NFTTransaction = "nft.transaction" // nft -f - (a knftables Run)
	NFTCheck       = "nft.check"       // nft --check -f - (knftables Check)
	NFTOther       = "nft.other"       // nft --version and anything else
)

// execTimer reads one timer log.
type execTimer struct {
	log string

	mu      sync.Mutex
	offset  int64 // bytes of log already read
	partial []byte
}

// timerRun is one line of the log (cmd/kpsim-exectimer/exectimer.c).
type timerRun struct {
	Start    int64    `json:"start"`
	End      int64    `json:"end"`
	Args     []string `json:"args"`
	Exit     int      `json:"exit"`
	Signal   int      `json:"signal"`
	UserUsec int64    `json:"userUsec"`
	SysUsec  int64    `json:"sysUsec"`
}

// addExecTimer puts the timer (opts.ExecTimer) first in PATH for each of
// names, in a new directory under opts.ToolsDir removed when ctx is done,
// and measures its cost per run. The real programs are the ones names
// resolve to now. It records the wrappers in tools.Binaries.
func addExecTimer(ctx context.Context, opts Options, tools *Tools, names ...string) (*execTimer, error) {
	if opts.ExecTimer == "" {
		return nil, nil
	}
	if _, err := os.Stat(opts.ExecTimer); err != nil {
		return nil, fmt.Errorf("program timer: %w (make build builds it beside kpsim)", err)
	}
	dir, err := os.MkdirTemp(opts.ToolsDir, "kpsim-exectimer-")
	if err != nil {
		return nil, fmt.Errorf("program timer directory: %w", err)
	}
	t := &execTimer{log: filepath.Join(dir, "runs.log")}
	for _, name := range names {
		real, err := exec.LookPath(name)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("program timer for %s: %w", name, err)
		}
		if err := os.Symlink(opts.ExecTimer, filepath.Join(dir, name)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("program timer: %w", err)
		}
		os.Setenv("KPSIM_EXECTIMER_"+name, real)
		prev := real
		if p, ok := tools.Binaries[name]; ok {
			prev = p
		}
		tools.Binaries[name] = filepath.Join(dir, name) + " (kpsim-exectimer) -> " + prev
	}
	os.Setenv("KPSIM_EXECTIMER_LOG", t.log)
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		<-ctx.Done()
		os.RemoveAll(dir)
	}()
	tools.TimerDir = dir
	return t, nil
}

// TimerOverhead is what the timer adds to one program run: the median of
// 21 runs of "true" through it minus the median of 21 direct runs,
// alternating, in a directory of its own under parent (removed after).
// It runs in the calling process: call it from the node, not from
// kube-proxy's process, whose CPU figure counts the programs it runs.
func TimerOverhead(ctx context.Context, timer, parent string) (time.Duration, error) {
	real, err := exec.LookPath("true")
	if err != nil {
		return 0, fmt.Errorf("program timer calibration: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "kpsim-exectimer-calibrate-")
	if err != nil {
		return 0, fmt.Errorf("program timer calibration: %w", err)
	}
	defer os.RemoveAll(dir)
	wrapped := filepath.Join(dir, "true")
	if err := os.Symlink(timer, wrapped); err != nil {
		return 0, err
	}
	env := append(os.Environ(), "KPSIM_EXECTIMER_true="+real, "KPSIM_EXECTIMER_LOG="+filepath.Join(dir, "runs.log"))
	var direct, timed []time.Duration
	for range 21 {
		for _, path := range []string{real, wrapped} {
			cmd := exec.CommandContext(ctx, path)
			cmd.Env = env
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return 0, fmt.Errorf("program timer calibration: %s: %w", path, err)
			}
			if path == real {
				direct = append(direct, time.Since(start))
			} else {
				timed = append(timed, time.Since(start))
			}
		}
	}
	slices.Sort(direct)
	slices.Sort(timed)
	return max(timed[len(timed)/2]-direct[len(direct)/2], 0), nil
}

// calls returns the runs logged since the last call as KernelCalls, named
// by nftRunMethod.
func (t *execTimer) calls() ([]KernelCall, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.log)
	if os.IsNotExist(err) {
		return nil, nil // nothing ran yet
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	t.offset += int64(len(data))
	data = append(t.partial, data...)
	// A line being written now is finished on the next call.
	end := bytes.LastIndexByte(data, '\n') + 1
	t.partial = slices.Clone(data[end:])
	return parseTimerLog(data[:end])
}

// parseTimerLog turns complete log lines into KernelCalls.
func parseTimerLog(data []byte) ([]KernelCall, error) {
	var out []KernelCall
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var r timerRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("program timer log line %d: %w", line, err)
		}
		c := KernelCall{
			Method:   nftRunMethod(r.Args),
			Start:    time.Unix(0, r.Start),
			Duration: time.Duration(r.End - r.Start),
			Args:     r.Args,
			CPU:      time.Duration(r.UserUsec+r.SysUsec) * time.Microsecond,
		}
		switch {
		case r.Signal != 0:
			c.Err = fmt.Sprintf("killed by signal %d", r.Signal)
		case r.Exit != 0:
			c.Err = fmt.Sprintf("exit status %d", r.Exit)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// nftRunMethod names an nft run by its arguments, as knftables (v0.0.22)
// builds them: "--json [--terse] list ..." for List, ListAll, ListRules,
// ListElements and ListCounters; "-f -" for Run; "--check -f -" for Check;
// "--version" when an Interface is created.
func nftRunMethod(args []string) string {
	switch {
	case slices.Contains(args, "list"):
		return NFTList
	case slices.Contains(args, "--check") || slices.Contains(args, "-c"):
		return NFTCheck
	case slices.Contains(args, "-f"):
		return NFTTransaction
	default:
		return NFTOther
	}
}
