package proxier

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
)

// fakeHistograms is what a fake gatherer reports, per family name.
type fakeHistograms map[string][2]float64 // count, sum

func (f fakeHistograms) gather() ([]*dto.MetricFamily, error) {
	var out []*dto.MetricFamily
	for name, cs := range f {
		if name == metricServicePending || name == metricEndpointPending {
			out = append(out, &dto.MetricFamily{Name: &name, Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: ptr(cs[0])}}}})
			continue
		}
		if name == metricLastQueued || name == metricLastSynced {
			out = append(out, &dto.MetricFamily{Name: &name, Metric: []*dto.Metric{
				{Label: []*dto.LabelPair{label("ip_family", "IPv4")}, Gauge: &dto.Gauge{Value: ptr(cs[0])}},
			}})
			continue
		}
		count, sum := uint64(cs[0]), cs[1]
		out = append(out, &dto.MetricFamily{
			Name: &name,
			Metric: []*dto.Metric{
				{Label: []*dto.LabelPair{label("ip_family", "IPv6")}, Histogram: &dto.Histogram{SampleCount: ptr(uint64(99)), SampleSum: ptr(99.0)}},
				{Label: []*dto.LabelPair{label("ip_family", "IPv4")}, Histogram: &dto.Histogram{SampleCount: &count, SampleSum: &sum}},
			},
		})
	}
	return out, nil
}

func label(n, v string) *dto.LabelPair { return &dto.LabelPair{Name: &n, Value: &v} }
func ptr[T any](v T) *T                { return &v }

// fakeClock advances one millisecond per call.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { c.t = c.t.Add(time.Millisecond); return c.t }

func TestRecorderSyncs(t *testing.T) {
	h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0}, metricProgramming: {0, 0}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := newRecorder(h.gather, v1.IPv4Protocol)
	r.now = clock.now
	r.poll() // baseline at 1001ms..1002ms

	// A full sync of 0.5 s; kube-proxy's last-successful-sync gauge moves
	// (to before the quiet poll, so the poll bounds the start).
	h[metricLastSynced] = [2]float64{1000.0005}
	h[metricSync] = [2]float64{1, 0.5}
	h[metricSyncFull] = [2]float64{1, 0.5}
	h[metricProgramming] = [2]float64{2, 3}
	r.poll() // 1003..1004
	r.poll() // quiet: 1005..1006

	// Two partial syncs between polls, and the total seen before the
	// partial histogram: recorded only once both agree.
	h[metricSync] = [2]float64{3, 0.75}
	h[metricLastSynced] = [2]float64{1000.0045}
	// A change queued after that sync began: not programmed yet.
	h[metricLastQueued] = [2]float64{1000.006}
	r.poll() // 1007..1008: pending
	h[metricSyncPartial] = [2]float64{2, 0.25}
	r.poll() // 1009..1010

	base := time.Unix(1000, 0)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	want := []Sync{
		{Start: ms(1).Add(-500 * time.Millisecond), Succeeded: true, End: ms(4), Duration: 500 * time.Millisecond, Full: true, FullCount: 1, Merged: 1, Synced: time.Unix(1000, 500_000)},
		{Start: ms(5).Add(-250 * time.Millisecond), Succeeded: true, End: ms(8), Duration: 250 * time.Millisecond, Merged: 2, Synced: time.Unix(1000, 4_500_000)},
	}
	if diff := cmp.Diff(want, r.Syncs()); diff != "" {
		t.Errorf("syncs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Programming{{At: ms(4), Count: 2, Sum: 3 * time.Second}}, r.prog); diff != "" {
		t.Errorf("programming (-want +got):\n%s", diff)
	}
	wantTotals := Totals{LastQueued: time.Unix(1000, 6000000), LastSynced: time.Unix(1000, 4500000), SyncCount: 3, SyncSeconds: 0.75, FullCount: 1, FullSeconds: 0.5, PartialCount: 2, PartialSeconds: 0.25, ProgrammingCount: 2, ProgrammingSeconds: 3}
	if diff := cmp.Diff(wantTotals, r.seen); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := r.waitFor(ctx, ms(-300), time.Time{})
	if err != nil || s.Merged != 2 {
		t.Errorf("waitFor(a time before the second sync's start) = %+v, %v; want the second sync", s, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := r.waitFor(short, ms(10), time.Time{}); err == nil {
		t.Error("waitFor(after every sync) returned without a new sync")
	}

	// A failed partial sync (the gauge stays) starting after the time
	// waited for does not end the wait: it programmed nothing.
	h[metricSync] = [2]float64{4, 1.0}
	h[metricSyncPartial] = [2]float64{3, 0.5}
	r.poll()
	r.poll() // a sync that looks failed is decided a poll later
	if got := r.Syncs(); len(got) != 3 || got[2].Succeeded {
		t.Fatalf("third sync: got %+v, want a failed one", got)
	}
	short3, cancel3 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel3()
	if s, err := r.waitFor(short3, ms(5).Add(-240*time.Millisecond), time.Time{}); err == nil {
		t.Errorf("waitFor returned %+v: a failed sync ended the wait", s)
	}
}

// The IPVS proxier observes only the total histogram: its syncs are
// recorded (as full ones) without waiting for a classification.
func TestRecorderAllFull(t *testing.T) {
	h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := newRecorder(h.gather, v1.IPv4Protocol)
	r.allFull = true
	r.now = clock.now
	r.poll()
	h[metricSync] = [2]float64{2, 1.5}
	r.poll()
	r.poll() // no last-sync gauge here: decided a poll later
	got := r.Syncs()
	if len(got) != 1 || !got[0].Full || got[0].FullCount != 2 || got[0].Merged != 2 || got[0].Duration != 1500*time.Millisecond {
		t.Errorf("syncs = %+v, want one entry of 2 merged full syncs, 1.5s", got)
	}
}

// TestRecorderGauges: a successful sync takes its start from kube-proxy's
// last-sync gauge, and WaitForSync returns at once when no change was
// queued after the last sync began, as read after the time waited for.
func TestRecorderGauges(t *testing.T) {
	h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0}, metricLastQueued: {1000.0}, metricLastSynced: {0}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := newRecorder(h.gather, v1.IPv4Protocol)
	r.now = clock.now
	r.poll()
	h[metricSync] = [2]float64{1, 0.5}
	h[metricSyncFull] = [2]float64{1, 0.5}
	h[metricLastSynced] = [2]float64{1000.75}
	r.poll()
	got := r.Syncs()
	want := []Sync{{Start: time.Unix(1000, 250_000_000), End: time.Unix(1000, 4_000_000), Succeeded: true, Duration: 500 * time.Millisecond, Full: true, FullCount: 1, Merged: 1, Synced: time.Unix(1000, 750_000_000)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("syncs (-want +got):\n%s", diff)
	}
	// kube-proxy's last-queued time as read before the time waited for
	// may miss a change its handlers counted before then.
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.waitFor(short, time.Unix(2000, 0), time.Time{}); err == nil {
		t.Error("waitFor returned on a last-queued time read before the time waited for")
	}
	clock.t = time.Unix(2000, 0)
	r.poll()
	ctx, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := r.waitFor(ctx, time.Unix(2000, 0), time.Time{}); err != nil {
		t.Errorf("waitFor with nothing queued since the last sync: %v", err)
	}
	h[metricLastQueued] = [2]float64{1000.8} // a change queued after the sync began
	r.poll()
	if _, err := r.waitFor(ctx, time.Unix(2000, 0), time.Time{}); err == nil {
		t.Error("waitFor returned although a change is queued and unsynced")
	}
}

func TestOptionsConfig(t *testing.T) {
	cases := []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{name: "bad mode", opts: Options{Mode: "ipvs"}, wantErr: true},
		{name: "nftables with backend", opts: Options{Mode: ModeNFTables, Backend: BackendLegacy}, wantErr: true},
		{name: "missing everything", opts: Options{Mode: ModeIPTables}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opts.config()
			if (err != nil) != tc.wantErr {
				t.Fatalf("config() error = %v, wantErr %v", err, tc.wantErr)
			}
		})
	}
}

// TestRecorderFloor: a floor (kube-proxy's last-queued time when the
// proxier got something outside its informers) admits only a sync that
// set kube-proxy's last-successful-sync time after it.
func TestRecorderFloor(t *testing.T) {
	h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0}, metricLastQueued: {1000.5}, metricLastSynced: {0}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := newRecorder(h.gather, v1.IPv4Protocol)
	r.now = clock.now
	r.poll()
	h[metricSync] = [2]float64{1, 0.5}
	h[metricSyncFull] = [2]float64{1, 0.5}
	h[metricLastSynced] = [2]float64{1000.75}
	r.poll()

	q, err := r.queuedAfter(context.Background(), time.Unix(999, 0))
	if err != nil || !q.Equal(time.Unix(1000, 500_000_000)) {
		t.Errorf("queuedAfter = %v, %v; want the last-queued gauge, 1000.5", q, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if s, err := r.waitFor(short, time.Time{}, time.Unix(1000, 800_000_000)); err == nil {
		t.Errorf("waitFor returned %+v, whose last-successful-sync time is before the floor", s)
	}
	if s, err := r.waitFor(context.Background(), time.Time{}, time.Unix(1000, 700_000_000)); err != nil || s.Duration != 500*time.Millisecond {
		t.Errorf("waitFor = %+v, %v; want the sync, which ended after the floor", s, err)
	}
}

// TestRecorderCaughtUp: a change queued a moment before the sync that
// took it began. Sync.Start (a lower bound) comes out before the change's
// queue time, so by the times alone the sync may have missed it; with
// nothing more to sync kube-proxy's next sync is its periodic one, an hour
// away by default. kube-proxy's pending gauges at 0 while no sync can be
// running prove the sync took it.
func TestRecorderCaughtUp(t *testing.T) {
	ms := func(n float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(n * float64(time.Millisecond))) }
	secs := func(at time.Time) float64 { return float64(at.UnixNano()) / 1e9 }
	setup := func(minSync time.Duration, pending float64, late time.Duration) *recorder {
		h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0},
			metricLastQueued: {0}, metricLastSynced: {0}, metricServicePending: {0}, metricEndpointPending: {0}}
		clock := &fakeClock{t: time.Unix(1000, 0)}
		r := newRecorder(h.gather, v1.IPv4Protocol)
		r.now, r.minSync = clock.now, minSync
		r.poll() // baseline: 1..2 ms
		// The first sync, full, 0.5 s, and a partial one of 1 ms (the
		// runner's first; see the last case).
		h[metricSync], h[metricSyncFull], h[metricSyncPartial] = [2]float64{2, 0.501}, [2]float64{1, 0.5}, [2]float64{1, 0.001}
		h[metricLastSynced] = [2]float64{secs(ms(2.5))}
		r.poll() // 3..4
		r.poll() // quiet: 5..6
		// A change at 6.2 ms, queued; the partial sync that takes it
		// begins at 6.3 ms, sets the last-sync gauge at 6.8 ms and returns
		// at 7.5 ms. Its Start, from the gauge, is 5.8 ms: before the
		// change was queued.
		h[metricServicePending] = [2]float64{pending}
		h[metricLastQueued] = [2]float64{secs(ms(6.2))}
		h[metricSync], h[metricSyncPartial] = [2]float64{3, 0.5022}, [2]float64{2, 0.0022}
		h[metricLastSynced] = [2]float64{secs(ms(6.8))}
		clock.t = clock.t.Add(late)
		r.poll() // 7..8: the sync
		r.poll() // quiet: 9..10
		return r
	}
	wait := func(r *recorder, after time.Time) (Sync, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return r.waitFor(ctx, after, time.Time{})
	}

	r := setup(50*time.Millisecond, 0, 0)
	if got := r.Syncs()[1].Start; !got.Before(ms(6.2)) {
		t.Fatalf("the last sync's Start is %v, want it before the change was queued (what this test is about)", got)
	}
	s, err := wait(r, ms(6))
	if err != nil || s.Merged != 1 || s.Full {
		t.Errorf("waitFor(the change's write) = %+v, %v; want the partial sync", s, err)
	}

	// The same without kube-proxy's minSyncPeriod known: the wait goes on.
	r = setup(0, 0, 0)
	if s, err := wait(r, ms(6)); err == nil {
		t.Errorf("waitFor with minSync 0 returned %+v; want it to go on", s)
	}

	// A change still pending: the sync did not take it.
	r = setup(50*time.Millisecond, 1, 0)
	if s, err := wait(r, ms(6)); err == nil {
		t.Errorf("waitFor with a change pending returned %+v", s)
	}

	// Polls late by more than minSyncPeriod: another sync may be running,
	// so a zero gauge proves nothing.
	r = setup(50*time.Millisecond, 0, time.Second)
	if s, err := wait(r, ms(6)); err == nil {
		t.Errorf("waitFor after a late poll returned %+v", s)
	}

	// The first two syncs: kube-proxy calls one of them directly (when
	// its informers have synced), and its runner may start the other
	// right before or after it, regardless of minSyncPeriod.
	for _, n := range []float64{1, 2} {
		h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0},
			metricLastQueued: {secs(ms(2.2))}, metricLastSynced: {0}, metricServicePending: {0}, metricEndpointPending: {0}}
		clock := &fakeClock{t: time.Unix(1000, 0)}
		r = newRecorder(h.gather, v1.IPv4Protocol)
		r.now, r.minSync = clock.now, 50*time.Millisecond
		r.poll()
		h[metricSync], h[metricSyncFull], h[metricSyncPartial] = [2]float64{n, 0.0012}, [2]float64{1, 0.0012}, [2]float64{n - 1, 0}
		h[metricLastSynced] = [2]float64{secs(ms(2.8))}
		r.poll()
		r.poll()
		if s, err := wait(r, ms(2)); err == nil {
			t.Errorf("waitFor after %v syncs returned %+v", n, s)
		}
	}
}

// TestRecorderGaugeReadEarly: one Gather read kube-proxy's
// last-successful-sync gauge before the sync set it and the duration
// histogram after the sync observed it. The sync succeeded: the next poll
// sees the gauge moved, and the recorder waits for it before it decides.
func TestRecorderGaugeReadEarly(t *testing.T) {
	h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0}, metricLastQueued: {1000.0}, metricLastSynced: {0}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := newRecorder(h.gather, v1.IPv4Protocol)
	r.now = clock.now
	r.poll()
	h[metricSync], h[metricSyncFull] = [2]float64{1, 0.5}, [2]float64{1, 0.5}
	r.poll() // the histogram moved, the gauge not yet (as read)
	h[metricLastSynced] = [2]float64{1000.003}
	r.poll()
	got := r.Syncs()
	if len(got) != 1 || !got[0].Succeeded || !got[0].Synced.Equal(time.Unix(1000, 3_000_000)) || got[0].End != time.Unix(1000, 4_000_000) {
		t.Fatalf("syncs = %+v; want one successful sync, synced at 1000.003, seen at the first poll (1000.004)", got)
	}

	// A sync that failed: the gauge stays, and the sync is recorded as
	// failed one poll later.
	h[metricSync], h[metricSyncFull] = [2]float64{2, 1.0}, [2]float64{2, 1.0}
	r.poll()
	r.poll()
	if got := r.Syncs(); len(got) != 2 || got[1].Succeeded {
		t.Fatalf("syncs = %+v; want a second, failed one", got)
	}
}

// TestRecorderCaughtUpAfterDirectSync: a partial sync whose start cannot
// be told apart by time from the last change's queueing (its bounds hold
// the mark) is still proved to hold the change when kube-proxy's pending
// gauges read 0 before its runner may start another sync, provided it is
// the runner's: it began after the one direct sync (OnEndpointSlicesSynced)
// returned. Without that knowledge, the second sync proves nothing, and
// the wait goes on (upstream would not sync again for an hour).
func TestRecorderCaughtUpAfterDirectSync(t *testing.T) {
	for _, direct := range []bool{true, false} {
		h := fakeHistograms{metricSync: {0, 0}, metricSyncFull: {0, 0}, metricSyncPartial: {0, 0}, metricProgramming: {0, 0},
			metricServicePending: {0}, metricEndpointPending: {0}}
		clock := &fakeClock{t: time.Unix(1000, 0)}
		r := newRecorder(h.gather, v1.IPv4Protocol)
		r.now, r.minSync = clock.now, time.Second
		ms := func(n float64) time.Time { return time.Unix(1000, int64(n*1e6)) }
		r.poll() // baseline, 1001..1002 ms

		// The first sync, kube-proxy's direct one.
		h[metricLastSynced] = [2]float64{1000.0025}
		h[metricSync], h[metricSyncFull] = [2]float64{1, 0.0005}, [2]float64{1, 0.0005}
		r.poll() // 1003..1004: recorded
		if direct {
			r.directSyncDone(ms(5))
		}
		r.poll() // quiet, 1005..1006

		// A change queued at 6.5 ms, and a partial sync of 0.5 ms that
		// ended (last-successful gauge) at 6.9 ms: its start bound, 6.4
		// ms, is before the queueing.
		h[metricLastQueued] = [2]float64{1000.0065}
		h[metricLastSynced] = [2]float64{1000.0069}
		h[metricSync], h[metricSyncPartial] = [2]float64{2, 0.001}, [2]float64{1, 0.0005}
		r.poll() // 1007..1008: recorded; pending gauges 0

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		s, err := r.waitFor(ctx, ms(6.6), time.Time{})
		cancel()
		switch {
		case direct && (err != nil || !s.Start.Equal(ms(6.4))):
			t.Errorf("after the direct sync returned: waitFor = %+v, %v; want the partial sync (start bound 6.4 ms)", s, err)
		case !direct && err == nil:
			t.Errorf("without knowing the direct sync: waitFor = %+v; want it to go on waiting", s)
		}
	}
}
