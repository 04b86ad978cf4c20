package proxier

import (
	"context"
	"math"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/proxy/metrics"
)

// pollInterval is how often the recorder reads kube-proxy's histograms. A
// sync shorter than this that follows another one within it is merged
// with it (Sync.Merged).
const pollInterval = 5 * time.Millisecond

// The metrics the recorder reads (pkg/proxy/metrics), by family name.
const (
	metricSync        = "kubeproxy_sync_proxy_rules_duration_seconds"
	metricSyncFull    = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	metricSyncPartial = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	metricProgramming = "kubeproxy_network_programming_duration_seconds"
	metricLastQueued  = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	metricLastSynced  = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	// Failure counters: iptables and IPVS modes count failed
	// iptables-restore runs (and failed partial syncs), nftables mode
	// failed nft transactions.
	metricRestoreFailures        = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	metricPartialRestoreFailures = "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total"
	metricNFTablesSyncFailures   = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
	metricNFTablesCleanFailures  = "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"
	// The change trackers' pending gauges (no ip_family label): how many
	// Services and EndpointSlices changed since a sync last took the
	// changes (pkg/proxy/servicechangetracker.go,
	// endpointschangetracker.go).
	metricServicePending  = "kubeproxy_sync_proxy_rules_service_changes_pending"
	metricEndpointPending = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
)

// Sync is one sync of the proxier (or several, when Merged > 1), read from
// kube-proxy's own histograms: Duration is exact (the histogram sum's
// change), the times are bounds set by the polling.
type Sync struct {
	// Start is a lower bound on when the (last merged) sync began: the
	// later of kube-proxy's last-successful-sync timestamp (set near the
	// end of a successful sync) and the last poll that had not seen the
	// sync, minus Duration. Early by up to a poll interval, never late: a
	// sync with Start after t read the proxier's state after t.
	Start time.Time `json:"start"`
	// Succeeded says kube-proxy's last-successful-sync timestamp moved.
	Succeeded bool `json:"succeeded"`
	// End is an upper bound on when it ended: the poll that saw it.
	End time.Time `json:"end"`
	// Duration is kube-proxy's own measurement (the sum of the merged
	// syncs' durations when Merged > 1).
	Duration time.Duration `json:"duration"`
	// Full says every merged sync was a full sync; FullCount counts them.
	Full      bool `json:"full"`
	FullCount int  `json:"fullCount"`
	// Merged is how many syncs ended between two polls (normally 1).
	Merged int `json:"merged"`
	// Synced is kube-proxy's last-successful-sync timestamp after it,
	// exact (kube-proxy sets it inside the sync, after programming); zero
	// when the sync failed.
	Synced time.Time `json:"synced,omitzero"`
}

// Programming is a change of kube-proxy's network programming latency
// histogram seen at one poll: Count latencies adding up to Sum.
type Programming struct {
	At    time.Time     `json:"at"`
	Count uint64        `json:"count"`
	Sum   time.Duration `json:"sum"`
}

// Totals are kube-proxy's own histogram counts and sums at the last poll.
type Totals struct {
	SyncCount          uint64  `json:"syncCount"`
	SyncSeconds        float64 `json:"syncSeconds"`
	FullCount          uint64  `json:"fullCount"`
	FullSeconds        float64 `json:"fullSeconds"`
	PartialCount       uint64  `json:"partialCount"`
	PartialSeconds     float64 `json:"partialSeconds"`
	ProgrammingCount   uint64  `json:"programmingCount"`
	ProgrammingSeconds float64 `json:"programmingSeconds"`
	// LastQueued and LastSynced are kube-proxy's gauges: when a change was
	// last queued (Sync called) and when a sync last succeeded.
	LastQueued time.Time `json:"lastQueued"`
	LastSynced time.Time `json:"lastSynced"`
	// ServicesPending and EndpointsPending are kube-proxy's pending-changes
	// gauges: changes its trackers hold that no sync has taken yet.
	ServicesPending  int64 `json:"servicesPending,omitempty"`
	EndpointsPending int64 `json:"endpointsPending,omitempty"`
	// kube-proxy's failure counters (see the metric names above).
	RestoreFailures        uint64 `json:"restoreFailures,omitempty"`
	PartialRestoreFailures uint64 `json:"partialRestoreFailures,omitempty"`
	NFTablesSyncFailures   uint64 `json:"nftablesSyncFailures,omitempty"`
	NFTablesCleanFailures  uint64 `json:"nftablesCleanupFailures,omitempty"`
}

// gatherFunc reads metric families (defaultGather, or a fake).
type gatherFunc func() ([]*dto.MetricFamily, error)

// defaultGather reads the metrics the recorder watches, and only those:
// legacyregistry's whole gatherer also collects the process and Go
// runtime collectors and every other registered family (168 families,
// about 0.4 ms a Gather on this host). At one poll every pollInterval
// that was about 8% of a core spent inside kube-proxy's process and
// counted as kube-proxy's CPU, and far more in an emulated VM. The
// metrics are upstream's own objects (pkg/proxy/metrics), registered in
// a second registry of kpsim's beside legacyregistry, so both read the
// same values. Call it after metrics.RegisterMetrics.
func defaultGather() ([]*dto.MetricFamily, error) {
	recorderRegistryOnce.Do(func() {
		recorderRegistry = k8smetrics.NewKubeRegistry()
		for _, c := range []k8smetrics.Registerable{
			metrics.SyncProxyRulesLatency, metrics.SyncFullProxyRulesLatency, metrics.SyncPartialProxyRulesLatency,
			metrics.NetworkProgrammingLatency, metrics.SyncProxyRulesLastQueuedTimestamp, metrics.SyncProxyRulesLastTimestamp,
			metrics.IPTablesRestoreFailuresTotal, metrics.IPTablesPartialRestoreFailuresTotal,
			metrics.NFTablesSyncFailuresTotal, metrics.NFTablesCleanupFailuresTotal,
			metrics.ServiceChangesPending, metrics.EndpointChangesPending,
		} {
			recorderRegistry.MustRegister(c)
		}
	})
	return recorderRegistry.Gather()
}

var (
	recorderRegistryOnce sync.Once
	recorderRegistry     k8smetrics.KubeRegistry
)

// recorder turns changes of kube-proxy's histograms into Syncs.
type recorder struct {
	gather gatherFunc
	family string // ip_family label value
	now    func() time.Time
	// allFull: the proxier observes no full/partial histograms (IPVS),
	// and every sync is full.
	allFull bool
	// minSync is kube-proxy's minSyncPeriod (caughtUp); 0 turns that
	// check off.
	minSync time.Duration

	mu       sync.Mutex
	last     Totals // as of the last recorded sync
	seen     Totals // as of the last poll
	quietAt  time.Time
	polledAt time.Time // when the last poll began
	pending  time.Time // End of a change seen but not yet recorded
	recheck  bool      // the change looked like a failed sync once: read again
	// endedAfter is a lower bound on when the last recorded sync ended:
	// the start of the last poll that had not seen it.
	endedAfter time.Time
	// caughtUp is the start of the last poll that proved every change
	// kube-proxy's trackers had counted by then programmed, by the sync
	// caughtUpSync (an index into syncs); see checkCaughtUp.
	caughtUp     time.Time
	caughtUpSync int
	// directDone is when kube-proxy's one direct sync (from
	// OnEndpointSlicesSynced) had returned; zero before.
	directDone time.Time
	syncs      []Sync
	prog       []Programming
	gatherErr  error
	changed    chan struct{} // closed and replaced on every new Sync
}

func newRecorder(gather gatherFunc, family v1.IPFamily) *recorder {
	return &recorder{gather: gather, family: string(family), now: time.Now, changed: make(chan struct{})}
}

// start takes the baseline and polls until ctx is done.
func (r *recorder) start(ctx context.Context) {
	r.poll()
	go func() {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.poll()
			}
		}
	}()
}

// read returns the current totals for r.family.
func (r *recorder) read() (Totals, error) {
	fams, err := r.gather()
	if err != nil {
		return Totals{}, err
	}
	var t Totals
	for _, f := range fams {
		var count *uint64
		var sum *float64
		switch f.GetName() {
		case metricSync:
			count, sum = &t.SyncCount, &t.SyncSeconds
		case metricSyncFull:
			count, sum = &t.FullCount, &t.FullSeconds
		case metricSyncPartial:
			count, sum = &t.PartialCount, &t.PartialSeconds
		case metricProgramming:
			count, sum = &t.ProgrammingCount, &t.ProgrammingSeconds
		case metricLastQueued, metricLastSynced:
			for _, m := range f.GetMetric() {
				if r.hasFamily(m) && m.GetGauge() != nil {
					at := floatTime(m.GetGauge().GetValue())
					if f.GetName() == metricLastQueued {
						t.LastQueued = at
					} else {
						t.LastSynced = at
					}
				}
			}
			continue
		case metricServicePending, metricEndpointPending:
			for _, m := range f.GetMetric() {
				if m.GetGauge() != nil {
					v := int64(m.GetGauge().GetValue())
					if f.GetName() == metricServicePending {
						t.ServicesPending = v
					} else {
						t.EndpointsPending = v
					}
				}
			}
			continue
		case metricRestoreFailures, metricPartialRestoreFailures, metricNFTablesSyncFailures, metricNFTablesCleanFailures:
			c := map[string]*uint64{
				metricRestoreFailures:        &t.RestoreFailures,
				metricPartialRestoreFailures: &t.PartialRestoreFailures,
				metricNFTablesSyncFailures:   &t.NFTablesSyncFailures,
				metricNFTablesCleanFailures:  &t.NFTablesCleanFailures,
			}[f.GetName()]
			for _, m := range f.GetMetric() {
				if r.hasFamily(m) && m.GetCounter() != nil {
					*c = uint64(m.GetCounter().GetValue())
				}
			}
			continue
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			if !r.hasFamily(m) || m.GetHistogram() == nil {
				continue
			}
			*count, *sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		}
	}
	return t, nil
}

func (r *recorder) hasFamily(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == "ip_family" {
			return l.GetValue() == r.family
		}
	}
	return false
}

// poll reads the histograms once and records what changed.
func (r *recorder) poll() {
	before := r.now()
	t, err := r.read()
	after := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.gatherErr = err
		return
	}
	r.gatherErr = nil
	r.polledAt = before
	if r.quietAt.IsZero() { // baseline
		r.last, r.seen, r.quietAt = t, t, before
		return
	}
	if d := t.ProgrammingCount - r.seen.ProgrammingCount; d > 0 {
		r.prog = append(r.prog, Programming{At: after, Count: d, Sum: seconds(t.ProgrammingSeconds - r.seen.ProgrammingSeconds)})
	}
	r.seen = t
	if t.SyncCount == r.last.SyncCount {
		r.checkCaughtUp(t, before, after)
		r.quietAt = before
		return
	}
	if r.pending.IsZero() {
		r.pending = after
	}
	// Upstream observes the total, then the full or partial histogram: wait
	// for the second so the sync is classified. The IPVS proxier observes
	// only the total: every one of its syncs is a full one.
	if !r.allFull && t.FullCount+t.PartialCount < t.SyncCount {
		return
	}
	// A sync sets the last-successful-sync gauge before it observes its
	// duration, but one Gather may read the gauge before the histogram,
	// and a sync can end in between: the gauge then looks unmoved. The
	// next poll reads it after this one's histogram read, so it has moved
	// by then if the sync succeeded. Without this a successful sync was
	// sometimes recorded as failed, and a sync step waited for kube-proxy's
	// periodic sync.
	if !t.LastSynced.After(r.last.LastSynced) && !r.recheck {
		r.recheck = true
		return
	}
	r.recheck = false
	n := int(t.SyncCount - r.last.SyncCount)
	d := seconds(t.SyncSeconds - r.last.SyncSeconds)
	full := int(t.FullCount - r.last.FullCount)
	if r.allFull {
		full = n
	}
	// Both are lower bounds on the start; the later is the tighter.
	start, ok := r.quietAt.Add(-d), t.LastSynced.After(r.last.LastSynced)
	if s := t.LastSynced.Add(-d); ok && s.After(start) {
		start = s
	}
	var synced time.Time
	if ok {
		synced = t.LastSynced
	}
	r.syncs = append(r.syncs, Sync{
		Synced:    synced,
		Start:     start,
		Succeeded: ok,
		End:       r.pending,
		Duration:  d,
		Full:      full == n,
		FullCount: full,
		Merged:    n,
	})
	r.endedAfter = r.quietAt
	r.last, r.quietAt, r.pending = t, before, time.Time{}
	r.checkCaughtUp(t, before, after)
	close(r.changed)
	r.changed = make(chan struct{})
}

// checkCaughtUp records a poll, read between before and after, that
// proves kube-proxy has programmed every change its trackers had counted
// when the poll began. Sync.Start is a lower bound, early by up to a poll
// interval, so a sync that began just after the last change was queued
// cannot be told apart by time from one that began just before it (which
// leaves the change to the next sync). kube-proxy's own state settles it:
//   - its pending gauges read 0: a sync has taken every change counted
//     before the read (the trackers count a change before they queue a
//     sync, and a sync zeroes the gauge before taking the changes);
//   - no sync can be running: the last recorded one (successful) ended
//     after endedAfter, and upstream's BoundedFrequencyRunner starts the
//     next one at least minSyncPeriod after a sync returns; this poll
//     ended before that. That holds for a sync the runner ran: kube-proxy
//     runs one sync directly, from OnEndpointSlicesSynced, and the runner
//     may start one right before or after it. So the last sync must have
//     begun after that direct call returned (directDone), or be at least
//     kube-proxy's third (with the direct one among the first two).
//
// So that sync took and programmed them all.
func (r *recorder) checkCaughtUp(t Totals, before, after time.Time) {
	k := len(r.syncs) - 1
	if r.minSync <= 0 || k < 0 || !r.syncs[k].Succeeded || !r.pending.IsZero() {
		return
	}
	if runner := !r.directDone.IsZero() && r.syncs[k].Start.After(r.directDone); !runner && r.last.SyncCount < 3 {
		return
	}
	if t.ServicesPending != 0 || t.EndpointsPending != 0 || !after.Before(r.endedAfter.Add(r.minSync)) {
		return
	}
	r.caughtUp, r.caughtUpSync = before, k
	close(r.changed)
	r.changed = make(chan struct{})
}

// directSyncDone records when OnEndpointSlicesSynced, and with it
// kube-proxy's direct sync, returned.
func (r *recorder) directSyncDone(t time.Time) {
	r.mu.Lock()
	r.directDone = t
	r.mu.Unlock()
}

// queuedAfter waits for a poll that began after t and returns
// kube-proxy's last-queued timestamp as that poll read it.
func (r *recorder) queuedAfter(ctx context.Context, t time.Time) (time.Time, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		r.mu.Lock()
		polled, q, err := r.polledAt, r.seen.LastQueued, r.gatherErr
		r.mu.Unlock()
		if err != nil {
			return time.Time{}, err
		}
		if polled.After(t) {
			return q, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-tick.C:
		}
	}
}

func floatTime(s float64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9)))
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// Syncs returns every sync recorded so far, oldest first.
func (p *Proxier) Syncs() []Sync { return p.rec.Syncs() }

// Programming returns the network programming latency observations.
func (p *Proxier) Programming() []Programming {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	return append([]Programming(nil), p.rec.prog...)
}

// Totals returns kube-proxy's own histogram counts and sums as of the last
// poll. With one proxier per process, they cover exactly the recorded
// Syncs: the Durations add up to SyncSeconds, the Merged to SyncCount.
func (p *Proxier) Totals() Totals {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	return p.rec.seen
}

// WaitForSync waits until the proxier has programmed every change its
// handlers had been handed by after: a sync that began after after has
// completed, or the last completed sync began after the last change was
// queued (kube-proxy's last-queued gauge, read after after), so nothing
// handed is unprogrammed. Informer delivery is asynchronous: a write to
// the clientset counts once kube-proxy's handler has returned from it
// (Options.EventHandled says when); a caller that must see one particular
// write should wait for that, or for its effect (for example the network
// programming count).
//
// Sync.Start is a lower bound, so a sync that began within a poll interval
// after the time compared with may not count: WaitForSync then waits for
// the next sync, at the latest kube-proxy's periodic one (SyncPeriod). It
// never returns early.
func (p *Proxier) WaitForSync(ctx context.Context, after time.Time) (Sync, error) {
	return p.rec.waitFor(ctx, after, time.Time{})
}

func (r *recorder) Syncs() []Sync {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sync(nil), r.syncs...)
}

// waitFor implements WaitForSync; a sync it returns also set kube-proxy's
// last-successful-sync timestamp after floor (Sync.Synced), even when
// nothing was queued since.
func (r *recorder) waitFor(ctx context.Context, after, floor time.Time) (Sync, error) {
	report := time.NewTicker(waitReportEvery)
	defer report.Stop()
	polls := time.NewTicker(pollInterval)
	defer polls.Stop()
	r.mu.Lock()
	queued := r.seen.LastQueued
	r.mu.Unlock()
	for {
		r.mu.Lock()
		// Every change counted by caughtUp is programmed: enough when
		// that is after the time waited for and after the last queued
		// change as of this call (its tracker counted it before).
		if !r.caughtUp.IsZero() && r.caughtUp.After(after) && r.caughtUp.After(queued) && r.syncs[r.caughtUpSync].Synced.After(floor) {
			s := r.syncs[r.caughtUpSync]
			r.mu.Unlock()
			return s, nil
		}
		// The last sync began after the last change queued as read by a
		// poll that began after after: it has every change counted then.
		if n := len(r.syncs); n > 0 && r.syncs[n-1].Succeeded && r.polledAt.After(after) && r.syncs[n-1].Start.After(r.seen.LastQueued) && r.syncs[n-1].Synced.After(floor) {
			s := r.syncs[n-1]
			r.mu.Unlock()
			return s, nil
		}
		for i := len(r.syncs) - 1; i >= 0; i-- {
			// A failed sync (an injected restore failure) programmed
			// nothing: kube-proxy retries, and the wait goes on.
			if r.syncs[i].Succeeded && r.syncs[i].Start.After(after) && r.syncs[i].Synced.After(floor) {
				s := r.syncs[i]
				r.mu.Unlock()
				return s, nil
			}
		}
		ch, err := r.changed, r.gatherErr
		// A poll that records nothing may be the first after after, which
		// the last-queued acceptance needs; past it, only a new sync can
		// end the wait.
		var tick <-chan time.Time
		if !r.polledAt.After(after) {
			tick = polls.C
		}
		r.mu.Unlock()
		if err != nil {
			return Sync{}, err
		}
		select {
		case <-ctx.Done():
			return Sync{}, ctx.Err()
		case <-ch:
		case <-tick:
		case <-report.C:
			r.mu.Lock()
			var last Sync
			if n := len(r.syncs); n > 0 {
				last = r.syncs[n-1]
			}
			klog.InfoS("Still waiting for a sync", "after", after, "floor", floor, "syncs", len(r.syncs),
				"lastSync", last, "lastQueued", r.seen.LastQueued, "lastSynced", r.seen.LastSynced, "polledAt", r.polledAt)
			r.mu.Unlock()
		}
	}
}

// waitReportEvery is how often a waitFor that goes on logs what it has.
const waitReportEvery = 10 * time.Second
