package toolexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cmd is one program run: its name (looked up in PATH), arguments and
// standard input.
type Cmd struct {
	Name  string
	Args  []string
	Stdin string
}

// Command is Cmd{Name: name, Args: args}.
func Command(name string, args ...string) Cmd { return Cmd{Name: name, Args: args} }

func (c Cmd) String() string { return strings.Join(append([]string{c.Name}, c.Args...), " ") }

// Runner runs tools.
type Runner interface {
	// LookPath finds a program as exec.LookPath does.
	LookPath(file string) (string, error)
	// Run runs c to completion and returns its standard output. A failed
	// run's error names the command and carries its standard error.
	Run(ctx context.Context, c Cmd) ([]byte, error)
}

// Exec runs real programs. The zero value is ready; it is safe for
// concurrent use.
type Exec struct {
	// OwnGroup runs each program in a process group of its own, so a
	// signal sent to the caller's group (Ctrl-C in a terminal) does not
	// reach it; ctx still stops it. For readers whose output must
	// survive an interrupt, such as the host check's dumps.
	OwnGroup bool

	mu   sync.Mutex
	runs int
	cpu  time.Duration
}

// LookPath is exec.LookPath.
func (*Exec) LookPath(file string) (string, error) { return exec.LookPath(file) }

// Run runs c and adds its CPU time (user and system, from wait4) to
// Usage, whether it succeeded or not.
func (e *Exec) Run(ctx context.Context, c Cmd) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	if e.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		e.mu.Lock()
		e.runs++
		e.cpu += ps.UserTime() + ps.SystemTime()
		e.mu.Unlock()
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", c, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Usage is how many programs ran to an end and their CPU time.
func (e *Exec) Usage() (runs int, cpu time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs, e.cpu
}

// Fake expects exactly the calls in Calls, in that order, and answers
// each with its Stdout and Err. Any other call fails, and so does Done
// while calls are left. Safe for concurrent use.
type Fake struct {
	Calls []FakeCall
	// Missing programs: LookPath fails for them (and only for them).
	Missing []string

	mu   sync.Mutex
	next int
	errs []error
}

// FakeCall is one expected call and its answer.
type FakeCall struct {
	Cmd    Cmd
	Stdout string
	Err    error
}

// LookPath finds every program but Missing, in /usr/sbin.
func (f *Fake) LookPath(file string) (string, error) {
	if slices.Contains(f.Missing, file) {
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
	}
	return "/usr/sbin/" + file, nil
}

// Run answers the next expected call if c is it.
func (f *Fake) Run(_ context.Context, c Cmd) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next >= len(f.Calls) {
		err := fmt.Errorf("toolexec.Fake: unexpected call %q (all %d expected calls made)", c, len(f.Calls))
		f.errs = append(f.errs, err)
		return nil, err
	}
	want := f.Calls[f.next]
	if c.String() != want.Cmd.String() || c.Stdin != want.Cmd.Stdin {
		err := fmt.Errorf("toolexec.Fake: call %d is %q (stdin %d bytes), want %q (stdin %d bytes)", f.next, c, len(c.Stdin), want.Cmd, len(want.Cmd.Stdin))
		f.errs = append(f.errs, err)
		return nil, err
	}
	f.next++
	if want.Err != nil {
		return []byte(want.Stdout), fmt.Errorf("%s: %w", c, want.Err)
	}
	return []byte(want.Stdout), nil
}

// Done reports calls that were wrong or never made.
func (f *Fake) Done() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := slices.Clone(f.errs)
	for _, c := range f.Calls[f.next:] {
		errs = append(errs, fmt.Errorf("toolexec.Fake: expected call %q was not made", c.Cmd))
	}
	return errors.Join(errs...)
}
