package sim

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/kpsim/kpsim/scenarios"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Resources the engine writes.
var (
	servicesResource       = corev1.SchemeGroupVersion.WithResource("services")
	endpointSlicesResource = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
)

// Cluster is the fake cluster of one scenario: a fake clientset holding the
// scenario's initial objects, and the model of what it holds.
//
// Order of use: New, then start informers on Clientset and wait for them
// to sync, then churn (NewEngine, Engine.Run). The fake tracker replays to
// a new watch every object written since the List it follows, into a
// 100-event buffer, so writes made while an informer is between its List
// and its Watch can overflow it; the engine's back-pressure only covers
// watches that already exist.
type Cluster struct {
	// Clientset is the fake API server. Only the churn engine may write
	// Services and EndpointSlices to it: its back-pressure relies on being
	// the only writer.
	Clientset *fake.Clientset

	// mu guards st (the model and allocators) for Snapshot while the
	// engine mutates it.
	mu sync.Mutex
	st *state

	watchMu  sync.Mutex
	watchers []watcherRec

	engineMu sync.Mutex
	engine   *Engine
}

type watcherRec struct {
	gvr schema.GroupVersionResource
	ns  string
	w   *watch.RaceFreeFakeWatcher
}

// New builds the fake cluster for s: it defaults s in place
// (scenarios.Default, idempotent), generates every object and adds them
// to a new fake clientset before anything can watch it.
func New(s *scenarios.Scenario) (*Cluster, error) {
	st, err := build(s)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", scenarioName(s), err)
	}
	c := &Cluster{st: st}
	// NewSimpleClientset, not NewClientset: the field-managed tracker of
	// NewClientset computes managed fields on every write, which kube-proxy
	// never reads (it strips them) and which costs build and churn time.
	cs := fake.NewSimpleClientset()
	for _, obj := range st.objects() {
		if err := cs.Tracker().Add(obj); err != nil {
			return nil, fmt.Errorf("scenario %s: adding %s: %w", scenarioName(s), describeObject(obj), err)
		}
	}
	cs.PrependWatchReactor("*", c.watchReactor(cs.Tracker()))
	c.Clientset = cs
	return c, nil
}

func scenarioName(s *scenarios.Scenario) string {
	if s.File != "" {
		return s.File
	}
	if s.Metadata.Name != "" {
		return s.Metadata.Name
	}
	return "(unnamed)"
}

func describeObject(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return fmt.Sprintf("%T %s/%s", obj, m.GetNamespace(), m.GetName())
}

// watchReactor creates watches exactly as the fake's default reactor does
// (through the tracker, with the caller's ListOptions) and records each
// watcher so the engine can look at its buffer before writing.
func (c *Cluster) watchReactor(tracker k8stesting.ObjectTracker) k8stesting.WatchReactionFunc {
	return func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		gvr, ns := action.GetResource(), action.GetNamespace()
		w, err := tracker.Watch(gvr, ns, opts)
		if err != nil {
			return false, nil, err
		}
		if rf, ok := w.(*watch.RaceFreeFakeWatcher); ok {
			c.watchMu.Lock()
			c.watchers = append(c.watchers, watcherRec{gvr: gvr, ns: ns, w: rf})
			c.watchMu.Unlock()
		}
		return true, w, nil
	}
}

// hasRoom reports whether every live watcher that a write of one object
// of gvr in ns reaches can take that many more events. Stopped watchers
// are dropped: the tracker skips them.
func (c *Cluster) hasRoom(gvr schema.GroupVersionResource, ns string, events int) bool {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	live := c.watchers[:0]
	ok := true
	for _, rec := range c.watchers {
		if rec.w.IsStopped() {
			continue
		}
		live = append(live, rec)
		if rec.gvr != gvr || (rec.ns != "" && rec.ns != ns) {
			continue
		}
		ch := rec.w.ResultChan()
		if len(ch) > cap(ch)-events {
			ok = false
		}
	}
	clear(c.watchers[len(live):])
	c.watchers = live
	return ok
}

// waitRoom blocks until hasRoom, polling with a short backoff: a channel
// being drained signals nothing to wait on. Safe because the engine is
// the only writer: between this check and the write, buffers only drain.
func (c *Cluster) waitRoom(ctx context.Context, gvr schema.GroupVersionResource, ns string, events int) (time.Duration, error) {
	if c.hasRoom(gvr, ns, events) {
		return 0, nil
	}
	start := time.Now()
	delay := 50 * time.Microsecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("waiting for watchers of %s to drain: %w", gvr.Resource, ctx.Err())
		case <-t.C:
		}
		if c.hasRoom(gvr, ns, events) {
			return time.Since(start), nil
		}
		delay = min(2*delay, 5*time.Millisecond)
		t.Reset(delay)
	}
}

// Watchers is how many live watches the fake clientset serves (for tests
// and diagnostics).
func (c *Cluster) Watchers() int {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	n := 0
	for _, rec := range c.watchers {
		if !rec.w.IsStopped() {
			n++
		}
	}
	return n
}

// Snapshot returns a deep copy of the model: the desired state once every
// write made so far has landed.
func (c *Cluster) Snapshot() *Model {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	m := &Model{ServiceCIDR: st.serviceCIDR, PodCIDR: st.podCIDR, LoadBalancerCIDR: st.lbCIDR}
	m.Nodes = append(m.Nodes, st.nodes...)
	for _, svc := range st.sortedServices() {
		m.Services = append(m.Services, svc.deepCopy())
	}
	for _, o := range st.literalServices {
		m.LiteralServices = append(m.LiteralServices, o.DeepCopy())
	}
	for _, o := range st.literalSlices {
		m.LiteralSlices = append(m.LiteralSlices, o.DeepCopy())
	}
	return m
}

// DesiredObjects returns every object the API should hold now, rendered
// from the model, in a fixed order: Nodes, the ServiceCIDR, then for each
// Service (generated and literal, sorted) the Service and its slices, then
// literal slices. Right after New it is the initial content of the
// clientset; after churn it is what an oracle compares the API with.
func (c *Cluster) DesiredObjects() []runtime.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.objects()
}

func (st *state) sortedServices() []*Service {
	out := make([]*Service, 0, len(st.services))
	for _, svc := range st.services {
		out = append(out, svc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

func (st *state) objects() []runtime.Object {
	var out []runtime.Object
	// Only the simulated node becomes a Node object. kube-proxy watches
	// its own Node alone (field selector metadata.name=<node>), which the
	// fake clientset does not apply: another Node would reach kube-proxy's
	// NodeManager, which exits when it sees "its" node IPs change. The
	// other nodes live in the model (endpoints' nodeName and zone) only.
	for _, n := range st.nodes {
		if n.Local {
			out = append(out, nodeObject(n))
		}
	}
	out = append(out, serviceCIDRObject(st.serviceCIDR))
	for _, svc := range st.sortedServices() {
		out = append(out, st.serviceObject(svc))
		for i := range svc.Slices {
			out = append(out, st.sliceObject(svc, &svc.Slices[i]))
		}
	}
	for _, o := range st.literalServices {
		out = append(out, o.DeepCopy())
	}
	for _, o := range st.literalSlices {
		out = append(out, o.DeepCopy())
	}
	return out
}
