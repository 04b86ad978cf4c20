package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/kpsim/kpsim/scenarios"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// clearActionsEvery bounds the fake clientset's action log, which keeps a
// deep copy of every call and would otherwise grow for the whole run.
const clearActionsEvery = 1024

// Engine applies churn steps to a Cluster through its clientset, so real
// watch events flow to informers. It is the only writer of Services and
// EndpointSlices: before each write it waits until every watch the write
// reaches has room in its buffer, so the fake's watchers never panic with
// "channel full", whatever rate a step asks for.
type Engine struct {
	c            *Cluster
	rng          *rand.Rand // targets
	jitterRNG    *rand.Rand // kept apart so jitter does not move targets
	backpressure bool
	onMutation   func(Mutation)
	now          func() time.Time

	runMu  sync.Mutex // one Run at a time
	logMu  sync.Mutex
	log    []Mutation
	seq    int
	writes int
	// broken is set when a write failed half-way: the model and the API
	// may differ, so further churn is refused.
	broken error
	// noLog: keep no mutation records (WithoutLog).
	noLog bool
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// OnMutation registers f, called synchronously after each mutation
// (including skipped ones) with its record. f must be quick and must not
// call the engine.
func OnMutation(f func(Mutation)) EngineOption {
	return func(e *Engine) { e.onMutation = f }
}

// WithoutLog makes the engine keep no record of its mutations: Log and
// Run return none, and OnMutation is the only way to see them. A long
// churn (a soak: 100,000 mutations) would otherwise hold every record,
// which grows the process by tens of megabytes.
func WithoutLog() EngineOption {
	return func(e *Engine) { e.noLog = true }
}

// withoutBackpressure disables the wait for watch buffers (tests only: it
// shows the wait is what keeps the fake from panicking).
func withoutBackpressure() EngineOption {
	return func(e *Engine) { e.backpressure = false }
}

// NewEngine returns the cluster's churn engine. A cluster has at most one
// engine, since back-pressure relies on a single writer.
func (c *Cluster) NewEngine(opts ...EngineOption) (*Engine, error) {
	c.engineMu.Lock()
	defer c.engineMu.Unlock()
	if c.engine != nil {
		return nil, errors.New("cluster already has a churn engine: only one writer is allowed")
	}
	e := &Engine{
		c:            c,
		rng:          scenarios.NewRNG(c.st.seed, "churn"),
		jitterRNG:    scenarios.NewRNG(c.st.seed, "jitter"),
		backpressure: true,
		now:          time.Now,
	}
	for _, o := range opts {
		o(e)
	}
	c.engine = e
	return e, nil
}

// Log returns a copy of every mutation made so far, in order.
func (e *Engine) Log() []Mutation {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return append([]Mutation(nil), e.log...)
}

// Run applies step: Count mutations, or mutations for Duration (whichever
// ends first when both are set), at Rate per second; rate 0 means as fast
// as the watchers drain (with Duration: until it has passed). Mutation i
// is due at start + i/rate, moved by up to ±jitter/rate at random. A
// mutation with no possible target (scaleDown with every Service at one
// endpoint, deleteServices with none left) is logged as skipped and still
// counts. Run returns the mutations it made; on error (or ctx cancelled)
// those made so far and the error (none with WithoutLog).
func (e *Engine) Run(ctx context.Context, step scenarios.ChurnStep) ([]Mutation, error) {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.broken != nil {
		return nil, fmt.Errorf("churn engine stopped after an earlier failure: %w", e.broken)
	}
	e.c.mu.Lock()
	g, ok := e.c.st.byName[step.Group]
	e.c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("churn %s: unknown service group %q", step.Action, step.Group)
	}
	if !validAction(step.Action) {
		return nil, fmt.Errorf("churn: unknown action %q (want one of %v)", step.Action, scenarios.ChurnActions)
	}
	if step.Rate < 0 || step.Jitter < 0 || step.Jitter >= 1 || step.Count < 0 {
		return nil, fmt.Errorf("churn %s on %s: need rate >= 0, count >= 0 and jitter in [0, 1), got rate %v, count %d, jitter %v",
			step.Action, step.Group, step.Rate, step.Count, step.Jitter)
	}
	if step.Count == 0 && step.Duration == nil {
		return nil, fmt.Errorf("churn %s on %s: set count or duration", step.Action, step.Group)
	}

	var done []Mutation
	start := e.now()
	var deadline time.Time
	if step.Duration != nil {
		deadline = start.Add(step.Duration.Duration)
	}
	interval := 0.0
	if step.Rate > 0 {
		interval = float64(time.Second) / step.Rate
	}
	for i := 0; step.Count == 0 || i < step.Count; i++ {
		var due time.Time
		if step.Rate > 0 {
			nominal := start.Add(time.Duration(float64(i) * interval))
			if !deadline.IsZero() && !nominal.Before(deadline) {
				break
			}
			due = nominal
			if step.Jitter > 0 {
				due = due.Add(time.Duration((e.jitterRNG.Float64()*2 - 1) * step.Jitter * interval))
			}
			if err := sleepUntil(ctx, due, e.now); err != nil {
				return done, fmt.Errorf("churn %s on %s: %w", step.Action, step.Group, err)
			}
		} else if !deadline.IsZero() && !e.now().Before(deadline) {
			break
		}
		m, err := e.mutate(ctx, step.Action, g)
		m.Due = due
		if m.Action != "" {
			e.record(m)
			if !e.noLog {
				done = append(done, m)
			}
		}
		if err != nil {
			return done, fmt.Errorf("churn %s on %s: %w", step.Action, step.Group, err)
		}
	}
	return done, nil
}

func validAction(a string) bool {
	for _, v := range scenarios.ChurnActions {
		if a == v {
			return true
		}
	}
	return false
}

func sleepUntil(ctx context.Context, t time.Time, now func() time.Time) error {
	d := t.Sub(now())
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func (e *Engine) record(m Mutation) {
	if !e.noLog {
		e.logMu.Lock()
		e.log = append(e.log, m)
		e.logMu.Unlock()
	}
	if e.onMutation != nil {
		e.onMutation(m)
	}
}

// pendingWrite is one API call a mutation makes.
type pendingWrite struct {
	verb string
	gvr  schema.GroupVersionResource
	ns   string
	name string
	svc  *corev1.Service
	sl   *discoveryv1.EndpointSlice
}

// mutate makes one mutation: it waits for room for the first write,
// changes the model (stamping the trigger time), then writes.
func (e *Engine) mutate(ctx context.Context, action string, g *groupState) (Mutation, error) {
	first := endpointSlicesResource
	if action == scenarios.ChurnCreateServices || action == scenarios.ChurnDeleteServices {
		first = servicesResource
	}
	ns := g.spec.Namespace
	var blocked time.Duration
	if e.backpressure {
		b, err := e.c.waitRoom(ctx, first, ns, 1)
		blocked += b
		if err != nil {
			return Mutation{}, err
		}
	}
	trigger := e.now()
	e.c.mu.Lock()
	m, writes, err := e.apply(action, g, trigger)
	e.c.mu.Unlock()
	if err != nil {
		// Nothing was changed or written: no record, no sequence number.
		return Mutation{}, fmt.Errorf("mutation %d: %w", e.seq, err)
	}
	m.Seq, m.Action, m.Group, m.Blocked = e.seq, action, g.spec.Name, blocked
	e.seq++
	if len(writes) > 0 {
		m.TriggerTime = trigger
	}
	for i, w := range writes {
		if i > 0 && e.backpressure {
			b, err := e.c.waitRoom(ctx, w.gvr, w.ns, 1)
			m.Blocked += b
			if err != nil {
				e.broken = fmt.Errorf("mutation %d interrupted after %d of %d writes: %w", m.Seq, i, len(writes), err)
				return m, err
			}
		}
		rec := Write{Verb: w.verb, Resource: w.gvr.Resource, Namespace: w.ns, Name: w.name}
		rec.Start = e.now()
		err := e.doRetrying(ctx, w, &rec.Retries)
		rec.End = e.now()
		m.Writes = append(m.Writes, rec)
		if i == 0 {
			m.Start = rec.Start
		}
		m.End = rec.End
		if err != nil {
			e.broken = fmt.Errorf("mutation %d: %s %s %s/%s: %w", m.Seq, w.verb, w.gvr.Resource, w.ns, w.name, err)
			return m, e.broken
		}
		e.writes++
		if e.writes%clearActionsEvery == 0 {
			e.c.Clientset.ClearActions()
		}
	}
	return m, nil
}

// Write retries: a server error (500, 503, 504, 429) is retried as a
// controller's client would, with a doubling pause, up to writeRetries
// times.
const (
	writeRetries      = 100
	writeRetryPause   = 5 * time.Millisecond
	writeRetryMaxWait = 200 * time.Millisecond
)

// doRetrying makes one write, retrying server errors; retries counts them.
func (e *Engine) doRetrying(ctx context.Context, w pendingWrite, retries *int) error {
	pause := writeRetryPause
	for {
		err := e.do(ctx, w)
		if err == nil || *retries >= writeRetries || !retryable(err) {
			return err
		}
		*retries++
		if err := sleepUntil(ctx, e.now().Add(pause), e.now); err != nil {
			return err
		}
		pause = min(2*pause, writeRetryMaxWait)
	}
}

func retryable(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err)
}

func (e *Engine) do(ctx context.Context, w pendingWrite) error {
	cs := e.c.Clientset
	var err error
	switch {
	case w.gvr == servicesResource && w.verb == VerbCreate:
		_, err = cs.CoreV1().Services(w.ns).Create(ctx, w.svc, metav1.CreateOptions{})
	case w.gvr == servicesResource && w.verb == VerbDelete:
		err = cs.CoreV1().Services(w.ns).Delete(ctx, w.name, metav1.DeleteOptions{})
	case w.verb == VerbCreate:
		_, err = cs.DiscoveryV1().EndpointSlices(w.ns).Create(ctx, w.sl, metav1.CreateOptions{})
	case w.verb == VerbUpdate:
		_, err = cs.DiscoveryV1().EndpointSlices(w.ns).Update(ctx, w.sl, metav1.UpdateOptions{})
	case w.verb == VerbDelete:
		err = cs.DiscoveryV1().EndpointSlices(w.ns).Delete(ctx, w.name, metav1.DeleteOptions{})
	default:
		err = fmt.Errorf("unsupported write %s %s", w.verb, w.gvr.Resource)
	}
	return err
}

// apply changes the model for one mutation and returns the writes that
// carry the change to the API. Called with c.mu held. On error the model
// is unchanged.
func (e *Engine) apply(action string, g *groupState, trigger time.Time) (Mutation, []pendingWrite, error) {
	st := e.c.st
	var m Mutation
	switch action {
	case scenarios.ChurnFlap:
		svc, si, ei, ok := e.pickEndpoint(g, func(ep Endpoint) bool { return ep.Condition == Ready || ep.Condition == NotReady })
		if !ok {
			m.Skipped = "no ready or not-ready endpoint to flap"
			return m, nil, nil
		}
		ep := &svc.Slices[si].Endpoints[ei]
		if ep.Condition == Ready {
			ep.Condition = NotReady
		} else {
			ep.Condition = Ready
		}
		m.Changed = []netip.Addr{ep.IP}
		return e.sliceWrite(m, svc, si, VerbUpdate, trigger)

	case scenarios.ChurnRollingUpdate:
		svc, si, ei, ok := e.pickEndpoint(g, func(Endpoint) bool { return true })
		if !ok {
			m.Skipped = "no endpoint to replace"
			return m, nil, nil
		}
		old := svc.Slices[si].Endpoints[ei]
		// The new pod keeps the old one's node and condition, so a rolling
		// update does not move the group's placement or condition mix.
		ip, err := st.podIPs.Allocate()
		if err != nil {
			return m, nil, fmt.Errorf("service %s: new pod: %w", svc.Key(), err)
		}
		_ = st.podIPs.Release(old.IP)
		nep := old
		nep.IP = ip
		nep.Pod = fmt.Sprintf("%s-pod-%d", svc.Name, svc.nextPod)
		svc.nextPod++
		svc.Slices[si].Endpoints[ei] = nep
		m.Added, m.Removed = []netip.Addr{ip}, []netip.Addr{old.IP}
		return e.sliceWrite(m, svc, si, VerbUpdate, trigger)

	case scenarios.ChurnScaleUp:
		if len(g.services) == 0 {
			m.Skipped = "group has no Service to scale up"
			return m, nil, nil
		}
		svc := g.services[e.rng.IntN(len(g.services))]
		local := e.rng.Float64() < g.localFraction
		ep, err := st.newEndpoint(g, svc, local, Ready)
		if err != nil {
			return m, nil, err
		}
		m.Added = []netip.Addr{ep.IP}
		for si := range svc.Slices {
			if len(svc.Slices[si].Endpoints) < maxEndpointsPerSlice {
				svc.Slices[si].Endpoints = append(svc.Slices[si].Endpoints, ep)
				return e.sliceWrite(m, svc, si, VerbUpdate, trigger)
			}
		}
		svc.Slices = append(svc.Slices, Slice{Name: svc.nextSliceName(), Endpoints: []Endpoint{ep}})
		return e.sliceWrite(m, svc, len(svc.Slices)-1, VerbCreate, trigger)

	case scenarios.ChurnScaleDown:
		var cands []*Service
		for _, svc := range g.services {
			if svc.EndpointCount() > 1 {
				cands = append(cands, svc)
			}
		}
		if len(cands) == 0 {
			m.Skipped = "every Service is at its last endpoint"
			return m, nil, nil
		}
		svc := cands[e.rng.IntN(len(cands))]
		si, ei := locate(svc, e.rng.IntN(svc.EndpointCount()))
		sl := &svc.Slices[si]
		ep := sl.Endpoints[ei]
		sl.Endpoints = append(sl.Endpoints[:ei], sl.Endpoints[ei+1:]...)
		_ = st.podIPs.Release(ep.IP)
		m.Removed = []netip.Addr{ep.IP}
		if len(sl.Endpoints) == 0 && len(svc.Slices) > 1 {
			m, writes, _ := e.sliceWrite(m, svc, si, VerbDelete, trigger)
			svc.Slices = append(svc.Slices[:si], svc.Slices[si+1:]...)
			return m, writes, nil
		}
		return e.sliceWrite(m, svc, si, VerbUpdate, trigger)

	case scenarios.ChurnCreateServices:
		n := g.spec.Endpoints.Draw(e.rng)
		if st.podIPs.Free() < n {
			return m, nil, st.podIPs.need(n, fmt.Sprintf("the %d endpoints of a new Service of group %s", n, g.spec.Name))
		}
		svc, err := st.newService(g)
		if err != nil {
			return m, nil, err
		}
		shares := mixShares(g.spec.Conditions)
		eps := make([]Endpoint, 0, n)
		for range n {
			local := e.rng.Float64() < g.localFraction
			ep, err := st.newEndpoint(g, svc, local, drawCondition(e.rng, shares))
			if err != nil {
				return m, nil, err // unreachable: capacity checked above
			}
			eps = append(eps, ep)
			m.Added = append(m.Added, ep.IP)
		}
		svc.Slices = packSlices(svc, eps)
		m.Service = svc.Key()
		writes := []pendingWrite{{verb: VerbCreate, gvr: servicesResource, ns: svc.Namespace, name: svc.Name, svc: st.serviceObject(svc)}}
		for si := range svc.Slices {
			svc.Slices[si].TriggerTime = trigger
			sl := &svc.Slices[si]
			writes = append(writes, pendingWrite{verb: VerbCreate, gvr: endpointSlicesResource, ns: svc.Namespace, name: sl.Name, sl: st.sliceObject(svc, sl)})
			m.Slices = append(m.Slices, sl.Name)
		}
		return m, writes, nil

	case scenarios.ChurnDeleteServices:
		if len(g.services) == 0 {
			m.Skipped = "group has no Service left to delete"
			return m, nil, nil
		}
		svc := g.services[e.rng.IntN(len(g.services))]
		m.Service = svc.Key()
		// The Service goes first; the garbage collector then deletes its
		// slices through their ownerReference.
		writes := []pendingWrite{{verb: VerbDelete, gvr: servicesResource, ns: svc.Namespace, name: svc.Name}}
		for _, sl := range svc.Slices {
			writes = append(writes, pendingWrite{verb: VerbDelete, gvr: endpointSlicesResource, ns: svc.Namespace, name: sl.Name})
			m.Slices = append(m.Slices, sl.Name)
			for _, ep := range sl.Endpoints {
				m.Removed = append(m.Removed, ep.IP)
			}
		}
		st.releaseService(g, svc)
		return m, writes, nil
	}
	return m, nil, fmt.Errorf("unknown action %q", action)
}

// sliceWrite stamps slice si of svc and returns m completed with the one
// write that carries it. For a delete the slice must still be in svc.
func (e *Engine) sliceWrite(m Mutation, svc *Service, si int, verb string, trigger time.Time) (Mutation, []pendingWrite, error) {
	sl := &svc.Slices[si]
	m.Service = svc.Key()
	m.Slices = []string{sl.Name}
	w := pendingWrite{verb: verb, gvr: endpointSlicesResource, ns: svc.Namespace, name: sl.Name}
	if verb != VerbDelete {
		sl.TriggerTime = trigger
		w.sl = e.c.st.sliceObject(svc, sl)
	}
	return m, []pendingWrite{w}, nil
}

// pickEndpoint picks a Service uniformly among those of g with an endpoint
// matching ok, then one such endpoint uniformly.
func (e *Engine) pickEndpoint(g *groupState, ok func(Endpoint) bool) (*Service, int, int, bool) {
	var cands []*Service
	for _, svc := range g.services {
		for _, sl := range svc.Slices {
			if hasMatch(sl.Endpoints, ok) {
				cands = append(cands, svc)
				break
			}
		}
	}
	if len(cands) == 0 {
		return nil, 0, 0, false
	}
	svc := cands[e.rng.IntN(len(cands))]
	type pos struct{ si, ei int }
	var ps []pos
	for si, sl := range svc.Slices {
		for ei, ep := range sl.Endpoints {
			if ok(ep) {
				ps = append(ps, pos{si, ei})
			}
		}
	}
	p := ps[e.rng.IntN(len(ps))]
	return svc, p.si, p.ei, true
}

func hasMatch(eps []Endpoint, ok func(Endpoint) bool) bool {
	for _, ep := range eps {
		if ok(ep) {
			return true
		}
	}
	return false
}

// locate maps the i-th endpoint of svc (in slice order) to its slice and
// position.
func locate(svc *Service, i int) (int, int) {
	for si, sl := range svc.Slices {
		if i < len(sl.Endpoints) {
			return si, i
		}
		i -= len(sl.Endpoints)
	}
	panic("sim: endpoint index out of range")
}

func drawCondition(rng *rand.Rand, shares []float64) Condition {
	sum := 0.0
	for _, s := range shares {
		sum += s
	}
	x := rng.Float64() * sum
	for i, s := range shares {
		if x < s {
			return Condition(i)
		}
		x -= s
	}
	return Ready
}
