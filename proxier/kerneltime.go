package proxier

import (
	"bytes"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// KernelCall is one call the proxier made into its kernel-programming
// interface (utiliptables.Interface in iptables mode), timed around the
// call: for RestoreAll that is the whole iptables-restore run (program
// start, xtables lock wait, parsing, the kernel's table replacement).
type KernelCall struct {
	// Method is the utiliptables.Interface method: RestoreAll, Restore,
	// SaveInto, EnsureChain, EnsureRule, FlushChain, DeleteChain,
	// ChainExists, DeleteRule or Present.
	Method string `json:"method"`
	// Start is when the call began (time.Now before forwarding it).
	Start time.Time `json:"start"`
	// Duration is how long the call took.
	Duration time.Duration `json:"duration"`
	// Bytes is the size of the input for Restore and RestoreAll, and the
	// number of bytes SaveInto added to its buffer; 0 for other methods.
	Bytes int `json:"bytes"`
	// Err is the error the call returned, empty on success. ChainExists
	// returns an error when the chain is missing, as upstream documents.
	Err string `json:"err,omitempty"`
	// Args and CPU are set for program runs timed by kpsim-exectimer
	// (exectimer.go): the arguments, and the program's own CPU time
	// (user and system).
	Args []string      `json:"args,omitempty"`
	CPU  time.Duration `json:"cpu,omitempty"`
}

// KernelCalls returns every call the proxier made into its kernel-
// programming interfaces so far, oldest first: in iptables and IPVS modes
// the wrapped interfaces' calls, plus the Present check Start makes before
// building the proxier; in nftables mode the nft runs the program timer
// logged (exectimer.go), none when it was not used. Not seen: the polling
// that utiliptables' Monitor does (it calls its own runner, not the
// wrapper).
func (p *Proxier) KernelCalls() []KernelCall {
	if p == nil || p.calls == nil {
		return nil
	}
	if p.timer != nil {
		runs, err := p.timer.calls()
		for _, c := range runs {
			p.calls.add(c)
		}
		if err != nil {
			klog.ErrorS(err, "Reading the program timer's log")
		}
	}
	calls := p.calls.snapshot()
	slices.SortStableFunc(calls, func(a, b KernelCall) int { return a.Start.Compare(b.Start) })
	return calls
}

// kernelCalls is a concurrency-safe list of KernelCall. The proxier's
// SyncLoop and any reader run on different goroutines.
type kernelCalls struct {
	mu    sync.Mutex
	calls []KernelCall
}

func (r *kernelCalls) add(c KernelCall) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// snapshot returns a copy; nil for a nil recorder.
func (r *kernelCalls) snapshot() []KernelCall {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// timedIPTables forwards every utiliptables.Interface method unchanged
// (arguments, results, errors) to inner and records the calls that reach
// the kernel. It embeds nothing on purpose: a method added to the interface
// in a later release breaks the build here instead of bypassing the timer.
type timedIPTables struct {
	inner utiliptables.Interface
	rec   *kernelCalls
	now   func() time.Time
}

// newTimedIPTables returns the timer as the interface the proxiers take,
// so that a change of the interface shows here and nowhere else.
// upstream API: utiliptables.Interface's method set (timedIPTables forwards every method)
func newTimedIPTables(inner utiliptables.Interface, rec *kernelCalls) utiliptables.Interface {
	return newTimedIPTablesClock(inner, rec, time.Now)
}

// newTimedIPTablesClock takes the clock so tests can control durations.
func newTimedIPTablesClock(inner utiliptables.Interface, rec *kernelCalls, now func() time.Time) *timedIPTables {
	return &timedIPTables{inner: inner, rec: rec, now: now}
}

// begin starts timing a call; the returned func records it.
func (t *timedIPTables) begin(method string) func(bytes int, err error) {
	start := t.now()
	return func(bytes int, err error) {
		c := KernelCall{Method: method, Start: start, Duration: t.now().Sub(start), Bytes: bytes}
		if err != nil {
			c.Err = err.Error()
		}
		t.rec.add(c)
	}
}

func (t *timedIPTables) EnsureChain(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	done := t.begin("EnsureChain")
	existed, err := t.inner.EnsureChain(table, chain)
	done(0, err)
	return existed, err
}

func (t *timedIPTables) FlushChain(table utiliptables.Table, chain utiliptables.Chain) error {
	done := t.begin("FlushChain")
	err := t.inner.FlushChain(table, chain)
	done(0, err)
	return err
}

func (t *timedIPTables) DeleteChain(table utiliptables.Table, chain utiliptables.Chain) error {
	done := t.begin("DeleteChain")
	err := t.inner.DeleteChain(table, chain)
	done(0, err)
	return err
}

func (t *timedIPTables) ChainExists(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	done := t.begin("ChainExists")
	exists, err := t.inner.ChainExists(table, chain)
	done(0, err)
	return exists, err
}

func (t *timedIPTables) EnsureRule(position utiliptables.RulePosition, table utiliptables.Table, chain utiliptables.Chain, args ...string) (bool, error) {
	done := t.begin("EnsureRule")
	existed, err := t.inner.EnsureRule(position, table, chain, args...)
	done(0, err)
	return existed, err
}

func (t *timedIPTables) DeleteRule(table utiliptables.Table, chain utiliptables.Chain, args ...string) error {
	done := t.begin("DeleteRule")
	err := t.inner.DeleteRule(table, chain, args...)
	done(0, err)
	return err
}

// IsIPv6 and Protocol only report the runner's family: not recorded.
func (t *timedIPTables) IsIPv6() bool { return t.inner.IsIPv6() }

func (t *timedIPTables) Protocol() utiliptables.Protocol { return t.inner.Protocol() }

func (t *timedIPTables) SaveInto(table utiliptables.Table, buffer *bytes.Buffer) error {
	before := 0
	if buffer != nil {
		before = buffer.Len()
	}
	done := t.begin("SaveInto")
	err := t.inner.SaveInto(table, buffer)
	n := 0
	if buffer != nil {
		n = buffer.Len() - before
	}
	done(n, err)
	return err
}

func (t *timedIPTables) Restore(table utiliptables.Table, data []byte, flush utiliptables.FlushFlag, counters utiliptables.RestoreCountersFlag) error {
	done := t.begin("Restore")
	err := t.inner.Restore(table, data, flush, counters)
	done(len(data), err)
	return err
}

func (t *timedIPTables) RestoreAll(data []byte, flush utiliptables.FlushFlag, counters utiliptables.RestoreCountersFlag) error {
	done := t.begin("RestoreAll")
	err := t.inner.RestoreAll(data, flush, counters)
	done(len(data), err)
	return err
}

// Monitor is a loop that runs until stopCh closes, so it is not timed. Its
// canary checks go to inner's own methods and are not seen either.
func (t *timedIPTables) Monitor(canary utiliptables.Chain, tables []utiliptables.Table, reloadFunc func(), interval time.Duration, stopCh <-chan struct{}) {
	t.inner.Monitor(canary, tables, reloadFunc, interval, stopCh)
}

func (t *timedIPTables) Present() error {
	done := t.begin("Present")
	err := t.inner.Present()
	done(0, err)
	return err
}
