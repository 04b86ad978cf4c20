package proxier

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/proxy/config"
)

// kube-proxy's initialization gate (isInitialized in every proxier) waits
// for the Service and EndpointSlice informers only. The node's topology
// labels reach the proxier through NodeTopologyConfig, whose handler
// cmd/kube-proxy registers on the already running Node informer after the
// other informers start, and the ServiceCIDRs through ServiceCIDRConfig:
// both arrive asynchronously and may come after the first sync. kube-proxy
// then syncs again (OnTopologyChange forces a full sync), at the earliest
// minSyncPeriod after the previous one. Until that sync, topology-aware
// Services spread over every endpoint.
//
// inputs records what those two handlers were given and when, so that a
// wait for "the API state is programmed" covers them too and a run can
// report a first sync that ran without them.
type inputs struct {
	now func() time.Time

	// nodeEvents holds the Node configs' events until their handlers are
	// registered (nodehandlers.go).
	nodeEvents *nodeEventHold

	mu       sync.Mutex
	received Inputs
	changed  chan struct{} // closed and replaced on every delivery
}

// Inputs is what kube-proxy's proxier was handed besides Services and
// EndpointSlices.
type Inputs struct {
	// TopologyLabels are the node's topology labels the proxier last got
	// (OnTopologyChange); nil before the first call. NodeTopologyConfig
	// calls it only when the labels differ from none, so a node without a
	// zone label never gets a call.
	TopologyLabels map[string]string `json:"topologyLabels,omitempty"`
	// TopologyAt is when OnTopologyChange returned: a sync that began
	// later used TopologyLabels.
	TopologyAt time.Time `json:"topologyAt,omitempty"`
	// ServiceCIDRs are the CIDRs the proxier last got
	// (OnServiceCIDRsChanged), sorted; nil before the first call.
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	// ServiceCIDRsAt is when OnServiceCIDRsChanged returned.
	ServiceCIDRsAt time.Time `json:"serviceCIDRsAt,omitempty"`
	// NotHanded is the topology labels the API held when WaitForAPI gave
	// up waiting for the proxier to be handed them (inputsWait); nil when
	// it was.
	NotHanded map[string]string `json:"notHanded,omitempty"`
	// NodeEventsHeld counts the Node events that reached kube-proxy's
	// NodeConfig or NodeTopologyConfig before their handlers were
	// registered: upstream would have handled each with a missing handler
	// (nodehandlers.go); kpsim held them until the handlers were there.
	NodeEventsHeld int `json:"nodeEventsHeld,omitempty"`
	// Cleanup is what kube-proxy's startup cleanup did before the proxier
	// was built (startupcleanup.go).
	Cleanup *StartupCleanup `json:"cleanup,omitempty"`
}

// inputsWait bounds how long WaitForAPI waits for the proxier to be handed
// the Node's topology labels and the ServiceCIDRs. They normally arrive
// within milliseconds of the informers' sync. Before the Node events were
// held (nodehandlers.go), about one start in twenty never got them at all:
// a sync step then goes on without them and the run reports it rather
// than waiting out the step's timeout.
const inputsWait = 20 * time.Second

func newInputs() *inputs {
	return &inputs{now: time.Now, changed: make(chan struct{}), nodeEvents: newNodeEventHold()}
}

func (in *inputs) snapshot() Inputs {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.received
	r.TopologyLabels = maps.Clone(r.TopologyLabels)
	r.ServiceCIDRs = slices.Clone(r.ServiceCIDRs)
	r.NotHanded = maps.Clone(r.NotHanded)
	r.NodeEventsHeld = in.nodeEvents.Early()
	if r.Cleanup != nil {
		c := *r.Cleanup
		c.Modes, c.Programs = slices.Clone(c.Modes), maps.Clone(c.Programs)
		r.Cleanup = &c
	}
	return r
}

func (in *inputs) record(f func(r *Inputs, at time.Time)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f(&in.received, in.now())
	close(in.changed)
	in.changed = make(chan struct{})
}

// topologyObserver hands the node's topology labels to the proxier and
// records them once it has them.
type topologyObserver struct {
	next config.NodeTopologyHandler
	in   *inputs
	// delay holds a delivery back before the proxier gets it; tests use it
	// to make the startup race of a loaded machine happen every time.
	delay time.Duration
}

func (o topologyObserver) OnTopologyChange(labels map[string]string) {
	if o.delay > 0 {
		time.Sleep(o.delay)
	}
	o.next.OnTopologyChange(labels)
	o.in.record(func(r *Inputs, at time.Time) {
		r.TopologyLabels, r.TopologyAt = maps.Clone(labels), at
		if r.TopologyLabels == nil {
			r.TopologyLabels = map[string]string{}
		}
	})
}

// serviceCIDRObserver does the same for the ServiceCIDRs.
type serviceCIDRObserver struct {
	next config.ServiceCIDRHandler
	in   *inputs
}

func (o serviceCIDRObserver) OnServiceCIDRsChanged(cidrs []string) {
	o.next.OnServiceCIDRsChanged(cidrs)
	o.in.record(func(r *Inputs, at time.Time) {
		r.ServiceCIDRs, r.ServiceCIDRsAt = sorted(cidrs), at
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	if s == nil {
		s = []string{}
	}
	slices.Sort(s)
	return s
}

// apiInputs reads what the proxier should be handed from the API: the
// node's topology labels as NodeTopologyConfig filters them, and every
// ServiceCIDR's CIDRs (nil when kube-proxy does not watch them).
func apiInputs(ctx context.Context, client kubernetes.Interface, nodeName string, watchCIDRs bool) (Inputs, error) {
	var want Inputs
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return want, fmt.Errorf("get node %q: %w", nodeName, err)
	default:
		want.TopologyLabels = map[string]string{}
		if zone, ok := node.Labels[v1.LabelTopologyZone]; ok {
			want.TopologyLabels[v1.LabelTopologyZone] = zone
		}
	}
	if watchCIDRs {
		list, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
		if err != nil {
			return want, fmt.Errorf("list ServiceCIDRs: %w", err)
		}
		all := sets.New[string]()
		for _, c := range list.Items {
			all.Insert(c.Spec.CIDRs...)
		}
		want.ServiceCIDRs = sets.List(all)
	}
	return want, nil
}

// has says whether the proxier was handed want. Empty topology labels are
// the proxier's state before any call, and so are empty ServiceCIDRs.
func (r Inputs) has(want Inputs) bool {
	if len(want.TopologyLabels) > 0 || len(r.TopologyLabels) > 0 {
		if !maps.Equal(r.TopologyLabels, want.TopologyLabels) {
			return false
		}
	}
	if len(want.ServiceCIDRs) > 0 || len(r.ServiceCIDRs) > 0 {
		if !slices.Equal(r.ServiceCIDRs, want.ServiceCIDRs) {
			return false
		}
	}
	return true
}

// waitFor waits until the proxier was handed want and returns what it
// holds then.
func (in *inputs) waitFor(ctx context.Context, want Inputs) (Inputs, error) {
	for {
		in.mu.Lock()
		r, ch := in.received, in.changed
		in.mu.Unlock()
		if r.has(want) {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("kube-proxy was handed topology labels %v and ServiceCIDRs %v, the API holds %v and %v: %w",
				r.TopologyLabels, r.ServiceCIDRs, want.TopologyLabels, want.ServiceCIDRs, ctx.Err())
		case <-ch:
		}
	}
}

// Inputs returns the topology labels and ServiceCIDRs the proxier was
// handed, and when.
func (p *Proxier) Inputs() Inputs { return p.inputs.snapshot() }

// WaitForAPI waits until the proxier has programmed the API state as of
// after: it was handed the Node's topology labels and the ServiceCIDRs the
// API holds now, and a sync that began after every change delivered by
// after and after the topology labels has completed (WaitForSync). This
// is what a sync step waits for: kube-proxy's own first sync may come
// before the topology labels (see inputs); OnTopologyChange queues a full
// sync, at the earliest minSyncPeriod after the last one.
//
// The ServiceCIDRs are waited for but no sync after them: only nftables
// mode programs from them (its "drop traffic to unallocated ClusterIPs"
// rule), and its OnServiceCIDRsChanged queues no sync, so when they come
// after the first sync the rule waits for kube-proxy's next sync for
// another reason, at the latest its FullSyncPeriod (1 h). The run reports
// that (reports.ModeResult.ServiceCIDRsLate) instead of waiting an hour.
func (p *Proxier) WaitForAPI(ctx context.Context, after time.Time) (Sync, error) {
	want, err := apiInputs(ctx, p.client, p.nodeName, p.watchCIDRs)
	if err != nil {
		return Sync{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, inputsWait)
	got, err := p.inputs.waitFor(wctx, want)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return Sync{}, err
		}
		p.inputs.record(func(r *Inputs, _ time.Time) { r.NotHanded = maps.Clone(want.TopologyLabels) })
		want.TopologyLabels = nil
	}
	// OnTopologyChange sets the labels under the proxier's lock, which a
	// sync holds from start to end, then queues a sync (kube-proxy's
	// last-queued timestamp). So a sync that was running then ended
	// before the labels were set, and a sync that sets kube-proxy's
	// last-successful-sync timestamp after that queueing began after it
	// and used them. Both timestamps are kube-proxy's own, exact.
	var floor time.Time
	if len(want.TopologyLabels) > 0 && !got.TopologyAt.IsZero() {
		if floor, err = p.rec.queuedAfter(ctx, got.TopologyAt); err != nil {
			return Sync{}, err
		}
	}
	s, err := p.rec.waitFor(ctx, after, floor)
	if err != nil {
		syncs := p.rec.Syncs()
		failed := 0
		for _, s := range syncs {
			if !s.Succeeded {
				failed++
			}
		}
		return s, fmt.Errorf("no successful sync began after %s and ended after kube-proxy queued one for the topology labels (%s); %d syncs so far, %d of them failed: %w",
			after.Format(time.RFC3339Nano), floor.Format(time.RFC3339Nano), len(syncs), failed, err)
	}
	return s, nil
}
