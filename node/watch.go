package node

import (
	"context"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// A watch keeps sending connections while a lifecycle step stops, starts
// or tampers with kube-proxy: one connection at a time, at a fixed rate,
// to sampled Services' ClusterIPs in turn, from the client pod. Each
// answer is judged against the API as it is when the connection is sent:
// an endpoint the API holds and would route to is ok, another one (a
// removed pod still answers) is stale, no answer is failed.

// watchBucket is the width of Watch.Buckets.
const watchBucket = 500 * time.Millisecond

// watchTimeout bounds one watch connection.
const watchTimeout = time.Second

// watchRefresh is how often the watch re-reads the API model.
const watchRefresh = 250 * time.Millisecond

// vmWatchRate caps a watch's rate in a VM: under software emulation 50
// connections a second took most of the guest's CPU and slowed the churn
// and kube-proxy it watches several times over.
const vmWatchRate = 10

type watchTarget struct {
	key    string // namespace/name:port
	svc    string // namespace/name
	target netip.AddrPort
	proto  netns.Protocol
	port   string
}

type watchSend struct {
	at       time.Time
	target   int
	result   int // watchOK, watchStale, watchFailed
	failure  string
	endpoint string
}

const (
	watchOK = iota
	watchStale
	watchFailed
)

type watchPhase struct {
	name string
	at   time.Time
}

type watch struct {
	n       *node
	rate    float64
	targets []watchTarget
	start   time.Time
	cancel  context.CancelFunc
	loop    sync.WaitGroup
	flying  sync.WaitGroup

	mu       sync.Mutex
	sends    []watchSend
	eligible map[string][]netip.AddrPort // by target key, as of the last refresh
	marks    []reports.WatchMark
	phases   []watchPhase
}

// startWatch samples the targets (prefer first, when it names a Service
// the sample can hold) and starts sending. phase names the first phase.
func (n *node) startWatch(ctx context.Context, index int, wp scenarios.WatchProbes, prefer, phase string) *watch {
	model := n.cluster.Snapshot()
	var all []watchTarget
	for _, svc := range model.Services {
		if svc.Headless || !svc.ClusterIP.IsValid() || len(svc.Ports) == 0 || (wp.Group != "" && svc.Group != wp.Group) {
			continue
		}
		port := svc.Ports[0]
		for _, p := range svc.Ports {
			if p.Protocol == corev1.ProtocolTCP {
				port = p
				break
			}
		}
		if port.Protocol == corev1.ProtocolSCTP && !n.pods.SCTPSupported() {
			continue
		}
		t := watchTarget{key: svc.Key() + portSuffix(port.Name), svc: svc.Key(), port: port.Name,
			target: netip.AddrPortFrom(svc.ClusterIP, uint16(port.Port)), proto: protocol(port.Protocol)}
		if len(n.expectWatch(svc, port)) == 0 {
			continue // nothing to answer even before the step
		}
		all = append(all, t)
	}
	// Seeded by the scenario and the step: every mode probes the same
	// Services.
	rng := rand.New(rand.NewPCG(uint64(n.s.Spec.Seed), uint64(index)+1<<20))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	if i := slices.IndexFunc(all, func(t watchTarget) bool { return t.svc == prefer }); i > 0 {
		all[0], all[i] = all[i], all[0]
	}
	if wp.Services < len(all) {
		all = all[:wp.Services]
	}
	rate := wp.Rate
	if n.inVM && rate > vmWatchRate {
		rate = vmWatchRate
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{n: n, rate: rate, targets: all, start: time.Now(), cancel: cancel}
	w.phases = []watchPhase{{name: phase, at: w.start}}
	w.refresh(model)
	if len(all) == 0 {
		klog.Background().Info("Lifecycle step probes nothing: no Service with an endpoint to answer", "step", index)
		return w
	}
	w.loop.Add(1)
	go w.run(ctx)
	return w
}

// expectWatch is the endpoints a watch connection to svc's port may reach
// as the API holds them.
func (n *node) expectWatch(svc sim.Service, port sim.Port) []netip.AddrPort {
	return Expect(ExpectInput{Service: svc, Port: port, Group: n.group(svc.Group), Node: n.s.Spec.Cluster.Node,
		MasqueradeAll: n.masqueradeAll(), From: scenarios.FromPod, Target: scenarios.TargetClusterIP, Mode: n.ms.Mode}).Eligible
}

// refresh re-reads which endpoints each target may reach. A target whose
// Service is gone may reach none.
func (w *watch) refresh(model *sim.Model) {
	byKey := map[string][]netip.AddrPort{}
	for _, svc := range model.Services {
		if !slices.ContainsFunc(w.targets, func(t watchTarget) bool { return t.svc == svc.Key() }) {
			continue
		}
		for _, p := range svc.Ports {
			byKey[svc.Key()+portSuffix(p.Name)] = w.n.expectWatch(svc, p)
		}
	}
	w.mu.Lock()
	w.eligible = byKey
	w.mu.Unlock()
}

func (w *watch) run(ctx context.Context) {
	defer w.loop.Done()
	every := time.Duration(float64(time.Second) / w.rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	refreshed := time.Now()
	// At most this many connections in flight: a second's worth, so a
	// dataplane that drops everything keeps the rate without piling up.
	sem := make(chan struct{}, max(1, int(math.Ceil(w.rate*watchTimeout.Seconds()))+1))
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case at := <-tick.C:
			if time.Since(refreshed) > watchRefresh {
				w.refresh(w.n.cluster.Snapshot())
				refreshed = time.Now()
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // every slot waits on a timeout: skip this send
			}
			ti := i % len(w.targets)
			w.flying.Add(1)
			go func() {
				defer w.flying.Done()
				defer func() { <-sem }()
				w.send(ctx, at, ti)
			}()
		}
	}
}

func (w *watch) send(ctx context.Context, at time.Time, ti int) {
	t := w.targets[ti]
	r, err := w.n.pods.Probe(context.WithoutCancel(ctx), netns.ProbeSpec{From: netns.ClientPod, Target: t.target, Protocol: t.proto,
		Count: 1, Concurrency: 1, Timeout: watchTimeout, ConntrackBatch: -1})
	s := watchSend{at: at, target: ti, result: watchFailed}
	switch {
	case err != nil:
		s.failure = "error"
	case r.OK == 1:
		for ap := range r.Endpoints {
			s.endpoint = ap.String()
			w.mu.Lock()
			ok := slices.Contains(w.eligible[t.key], ap)
			w.mu.Unlock()
			s.result = watchStale
			if ok {
				s.result = watchOK
			}
		}
	default:
		for k := range r.Failures {
			s.failure = string(k)
		}
	}
	w.mu.Lock()
	w.sends = append(w.sends, s)
	w.mu.Unlock()
}

// mark records a moment of the step, now.
func (w *watch) mark(name string) { w.markAt(name, time.Now()) }

// markAt records a moment of the step.
func (w *watch) markAt(name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks = append(w.marks, reports.WatchMark{Name: name, Seconds: at.Sub(w.start).Seconds()})
}

// phase begins a phase now.
func (w *watch) phase(name string) { w.phaseAt(name, time.Now()) }

// phaseAt begins a phase at a moment after the last one's start.
func (w *watch) phaseAt(name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if last := w.phases[len(w.phases)-1].at; at.Before(last) {
		at = last
	}
	w.phases = append(w.phases, watchPhase{name: name, at: at})
}

// stop ends the sending, waits for the connections in flight and returns
// the counts.
func (w *watch) stop() *reports.Watch {
	w.cancel()
	w.loop.Wait()
	w.flying.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	end := time.Now()
	out := &reports.Watch{Start: w.start, End: end, Rate: w.rate, BucketSeconds: watchBucket.Seconds(), Marks: w.marks}
	for _, t := range w.targets {
		out.Services = append(out.Services, t.key)
	}
	nb := int(end.Sub(w.start)/watchBucket) + 1
	out.Buckets = make([]reports.WatchBucket, nb)
	// Totals, buckets and phases count alike: as WatchBuckets.
	var total reports.WatchBucket
	byPhase := make([]reports.WatchBucket, len(w.phases))
	for _, s := range w.sends {
		pi := 0
		for i, p := range w.phases {
			if !s.at.Before(p.at) {
				pi = i
			}
		}
		for _, c := range []*reports.WatchBucket{&total, &byPhase[pi], &out.Buckets[min(nb-1, int(s.at.Sub(w.start)/watchBucket))]} {
			c.Sent++
			switch s.result {
			case watchOK:
				c.OK++
			case watchStale:
				c.Stale++
			default:
				c.Failed++
			}
		}
		switch s.result {
		case watchStale:
			if out.StaleTo == nil {
				out.StaleTo = map[string]int{}
			}
			out.StaleTo[w.targets[s.target].key+" -> "+s.endpoint]++
		case watchFailed:
			if out.Failures == nil {
				out.Failures = map[string]int{}
			}
			out.Failures[s.failure]++
		}
	}
	out.Sent, out.OK, out.Stale, out.Failed = total.Sent, total.OK, total.Stale, total.Failed
	for i, p := range w.phases {
		until := end
		if i+1 < len(w.phases) {
			until = w.phases[i+1].at
		}
		c := byPhase[i]
		out.Phases = append(out.Phases, reports.WatchPhase{Name: p.name, Seconds: until.Sub(p.at).Seconds(),
			Sent: c.Sent, OK: c.OK, Stale: c.Stale, Failed: c.Failed})
	}
	return out
}
