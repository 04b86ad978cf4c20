package proxier

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	iptablestest "k8s.io/kubernetes/pkg/util/iptables/testing"
)

// stepClock advances by step at every reading, so each timed call (two
// readings) lasts exactly step.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// spyIPTables is the upstream fake with the two methods it does not model:
// Present fails on demand and Monitor records its arguments.
type spyIPTables struct {
	*iptablestest.FakeIPTables
	presentErr error

	monitorCanary   utiliptables.Chain
	monitorTables   []utiliptables.Table
	monitorInterval time.Duration
	monitorStop     <-chan struct{}
}

func (s *spyIPTables) Present() error { return s.presentErr }

func (s *spyIPTables) Monitor(canary utiliptables.Chain, tables []utiliptables.Table, reloadFunc func(), interval time.Duration, stopCh <-chan struct{}) {
	s.monitorCanary, s.monitorTables, s.monitorInterval, s.monitorStop = canary, tables, interval, stopCh
	reloadFunc()
}

const (
	testRestoreNAT = "*nat\n:KUBE-TIMED - [0:0]\n-A KUBE-TIMED -j ACCEPT\nCOMMIT\n"
	testRestoreAll = "*filter\n:KUBE-TIMED-F - [0:0]\n-A KUBE-TIMED-F -j DROP\nCOMMIT\n" + testRestoreNAT
)

// TestTimedIPTablesForwards runs the same calls on a plain fake and on a
// wrapped one: results, errors and the final tables must be the same, and
// every call that reaches the kernel is recorded with its duration.
func TestTimedIPTablesForwards(t *testing.T) {
	steps := []struct {
		method string
		bytes  int // recorded Bytes
		call   func(utiliptables.Interface) (any, error)
	}{
		{"EnsureChain", 0, func(i utiliptables.Interface) (any, error) {
			return i.EnsureChain(utiliptables.TableNAT, "KUBE-TEST")
		}},
		{"EnsureChain", 0, func(i utiliptables.Interface) (any, error) { // existed
			return i.EnsureChain(utiliptables.TableNAT, "KUBE-TEST")
		}},
		{"EnsureChain", 0, func(i utiliptables.Interface) (any, error) { // no such table
			return i.EnsureChain("raw", "KUBE-TEST")
		}},
		{"ChainExists", 0, func(i utiliptables.Interface) (any, error) {
			return i.ChainExists(utiliptables.TableNAT, "KUBE-TEST")
		}},
		{"ChainExists", 0, func(i utiliptables.Interface) (any, error) {
			return i.ChainExists(utiliptables.TableNAT, "KUBE-MISSING")
		}},
		{"EnsureRule", 0, func(i utiliptables.Interface) (any, error) {
			return i.EnsureRule(utiliptables.Append, utiliptables.TableNAT, "KUBE-TEST", "-j", "ACCEPT")
		}},
		{"EnsureRule", 0, func(i utiliptables.Interface) (any, error) {
			return i.EnsureRule(utiliptables.Prepend, utiliptables.TableNAT, "KUBE-TEST", "-j", "ACCEPT")
		}},
		{"EnsureRule", 0, func(i utiliptables.Interface) (any, error) { // no such chain
			return i.EnsureRule(utiliptables.Append, utiliptables.TableNAT, "KUBE-MISSING", "-j", "ACCEPT")
		}},
		{"DeleteRule", 0, func(i utiliptables.Interface) (any, error) {
			return nil, i.DeleteRule(utiliptables.TableNAT, "KUBE-TEST", "-j", "ACCEPT")
		}},
		{"RestoreAll", len(testRestoreAll), func(i utiliptables.Interface) (any, error) {
			return nil, i.RestoreAll([]byte(testRestoreAll), utiliptables.NoFlushTables, utiliptables.RestoreCounters)
		}},
		{"RestoreAll", 7, func(i utiliptables.Interface) (any, error) { // unparsable
			return nil, i.RestoreAll([]byte("garbage"), utiliptables.NoFlushTables, utiliptables.NoRestoreCounters)
		}},
		{"Restore", len(testRestoreNAT), func(i utiliptables.Interface) (any, error) {
			return nil, i.Restore(utiliptables.TableNAT, []byte(testRestoreNAT), utiliptables.FlushTables, utiliptables.NoRestoreCounters)
		}},
		{"Restore", len(testRestoreNAT), func(i utiliptables.Interface) (any, error) { // table not in the data
			return nil, i.Restore(utiliptables.TableFilter, []byte(testRestoreNAT), utiliptables.NoFlushTables, utiliptables.NoRestoreCounters)
		}},
		{"SaveInto", -1, func(i utiliptables.Interface) (any, error) {
			buf := bytes.NewBufferString("kept\n")
			err := i.SaveInto(utiliptables.TableNAT, buf)
			return buf.String(), err
		}},
		{"FlushChain", 0, func(i utiliptables.Interface) (any, error) {
			return nil, i.FlushChain(utiliptables.TableNAT, "KUBE-TIMED")
		}},
		{"DeleteChain", 0, func(i utiliptables.Interface) (any, error) {
			return nil, i.DeleteChain(utiliptables.TableNAT, "KUBE-TEST")
		}},
		{"DeleteChain", 0, func(i utiliptables.Interface) (any, error) {
			return nil, i.DeleteChain("raw", "KUBE-TEST")
		}},
		{"", 0, func(i utiliptables.Interface) (any, error) { return i.IsIPv6(), nil }},
		{"", 0, func(i utiliptables.Interface) (any, error) { return i.Protocol(), nil }},
	}

	plain := iptablestest.NewFake()
	inner := iptablestest.NewFake()
	rec := &kernelCalls{}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := &stepClock{t: base, step: time.Millisecond}
	wrapped := newTimedIPTablesClock(inner, rec, clock.now)

	var want []KernelCall
	errs := 0
	for i, s := range steps {
		name := s.method
		if name == "" {
			name = "unrecorded"
		}
		t.Run(fmt.Sprintf("%d-%s", i, name), func(t *testing.T) {
			wantRes, wantErr := s.call(plain)
			gotRes, gotErr := s.call(wrapped)
			if diff := cmp.Diff(wantRes, gotRes); diff != "" {
				t.Errorf("result differs from the unwrapped fake (-want +got):\n%s", diff)
			}
			if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
				t.Errorf("error %v, unwrapped fake returned %v", gotErr, wantErr)
			}
			if s.method == "" {
				return
			}
			c := KernelCall{Method: s.method, Bytes: s.bytes, Duration: time.Millisecond}
			c.Start = base.Add(time.Duration(2*len(want)+1) * time.Millisecond)
			if gotErr != nil {
				c.Err = gotErr.Error()
				errs++
			}
			if s.bytes < 0 { // SaveInto: what it added after "kept\n"
				c.Bytes = len(gotRes.(string)) - len("kept\n")
				if c.Bytes <= 0 {
					t.Errorf("SaveInto added %d bytes", c.Bytes)
				}
			}
			want = append(want, c)
		})
	}
	if errs < 5 {
		t.Errorf("only %d steps returned an error: the error paths are not exercised", errs)
	}
	if diff := cmp.Diff(want, rec.snapshot()); diff != "" {
		t.Errorf("recorded calls (-want +got):\n%s", diff)
	}
	for _, table := range []utiliptables.Table{utiliptables.TableNAT, utiliptables.TableFilter} {
		var a, b bytes.Buffer
		if err := plain.SaveInto(table, &a); err != nil {
			t.Fatal(err)
		}
		if err := inner.SaveInto(table, &b); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(a.String(), b.String()); diff != "" {
			t.Errorf("table %s after the calls (-unwrapped +wrapped):\n%s", table, diff)
		}
	}
}

func TestTimedIPTablesPresentAndMonitor(t *testing.T) {
	spy := &spyIPTables{FakeIPTables: iptablestest.NewFake(), presentErr: errors.New("iptables: no such binary")}
	rec := &kernelCalls{}
	w := newTimedIPTables(spy, rec)

	if err := w.Present(); err != spy.presentErr {
		t.Errorf("Present returned %v, want the inner error %v unchanged", err, spy.presentErr)
	}
	stop := make(chan struct{})
	reloaded := false
	tables := []utiliptables.Table{utiliptables.TableMangle, utiliptables.TableNAT}
	w.Monitor("KUBE-PROXY-CANARY", tables, func() { reloaded = true }, 7*time.Second, stop)
	if spy.monitorCanary != "KUBE-PROXY-CANARY" || !cmp.Equal(spy.monitorTables, tables) ||
		spy.monitorInterval != 7*time.Second || spy.monitorStop != (<-chan struct{})(stop) || !reloaded {
		t.Errorf("Monitor not forwarded unchanged: %+v reloaded=%v", spy, reloaded)
	}

	calls := rec.snapshot()
	if len(calls) != 1 {
		t.Fatalf("recorded %+v, want only Present (Monitor is a loop, not a call)", calls)
	}
	c := calls[0]
	if c.Method != "Present" || c.Err != spy.presentErr.Error() || c.Start.IsZero() || c.Duration < 0 {
		t.Errorf("recorded %+v", c)
	}
}

func TestKernelCallsOfProxier(t *testing.T) {
	rec := &kernelCalls{}
	rec.add(KernelCall{Method: "RestoreAll", Bytes: 3})
	p := &Proxier{mode: ModeIPTables, calls: rec}
	if got := p.KernelCalls(); len(got) != 1 || got[0].Method != "RestoreAll" {
		t.Errorf("KernelCalls = %+v, want the recorded call", got)
	}
	// nftables mode: no wrapped interface, nothing recorded.
	if got := (&Proxier{mode: ModeNFTables}).KernelCalls(); got != nil {
		t.Errorf("KernelCalls without a wrapped interface = %+v, want nil", got)
	}
	// A snapshot is a copy.
	got := p.KernelCalls()
	got[0].Method = "changed"
	if again := p.KernelCalls(); again[0].Method != "RestoreAll" {
		t.Errorf("KernelCalls shares its backing array with the recorder")
	}
}

func TestKernelCallsConcurrent(t *testing.T) {
	rec := &kernelCalls{}
	w := newTimedIPTables(iptablestest.NewFake(), rec)
	var wg sync.WaitGroup
	const writers, each = 4, 50
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, _ = w.ChainExists(utiliptables.TableNAT, "KUBE-X")
			}
		}()
	}
	for range each {
		_ = rec.snapshot()
	}
	wg.Wait()
	if n := len(rec.snapshot()); n != writers*each {
		t.Errorf("recorded %d calls, want %d", n, writers*each)
	}
}

func TestKernelCallJSON(t *testing.T) {
	b, err := json.Marshal(KernelCall{Method: "RestoreAll", Start: time.Unix(0, 0).UTC(), Duration: 1500, Bytes: 42, Err: "exit status 1"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"method":"RestoreAll","start":"1970-01-01T00:00:00Z","duration":1500,"bytes":42,"err":"exit status 1"}`
	if string(b) != want {
		t.Errorf("json %s, want %s", b, want)
	}
}
