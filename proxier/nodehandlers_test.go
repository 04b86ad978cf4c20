package proxier

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	v1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/proxy/config"
)

// runningNodeInformer is what proxy.NewNodeManager leaves behind: a Node
// informer that is started and synced before any config is built on it.
func runningNodeInformer(t *testing.T, ctx context.Context) v1informers.NodeInformer {
	t.Helper()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   "node-a",
		Labels: map[string]string{v1.LabelTopologyZone: "zone-a"},
	}})
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes()
	inf.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("node informer did not sync")
	}
	return inf
}

type topologyCalls struct {
	mu    sync.Mutex
	got   map[string]string
	calls chan struct{}
}

func newTopologyCalls() *topologyCalls { return &topologyCalls{calls: make(chan struct{}, 16)} }

func (c *topologyCalls) OnTopologyChange(labels map[string]string) {
	c.mu.Lock()
	c.got = labels
	c.mu.Unlock()
	c.calls <- struct{}{}
}

type nodeCalls struct{ calls chan *v1.Node }

func (c nodeCalls) OnNodeChange(n *v1.Node) { c.calls <- n }
func (c nodeCalls) OnNodeDelete(*v1.Node)   {}
func (c nodeCalls) OnNodeSynced()           {}

// gap stands for the scheduling that, in about one start in twenty, lets
// the running informer deliver the Node between building a config and
// registering its handler.
const gap = 200 * time.Millisecond

// TestUpstreamNodeTopologyRace shows the race kpsim works around, with
// kube-proxy's own calls in kube-proxy's order: the Node arrives between
// NewNodeTopologyConfig and RegisterEventHandler and the handler is never
// called. If this test fails, kube-proxy fixed the race and the hold in
// nodehandlers.go can go.
func TestUpstreamNodeTopologyRace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := runningNodeInformer(t, ctx)

	topo := newTopologyCalls()
	c := config.NewNodeTopologyConfig(ctx, inf, 0)
	time.Sleep(gap)
	c.RegisterEventHandler(topo)
	select {
	case <-topo.calls:
		t.Fatalf("OnTopologyChange was called (%v): kube-proxy no longer drops the Node that arrives before its handler", topo.got)
	case <-time.After(time.Second):
	}
}

// TestNodeHandlersHeld: with the same gap, kpsim's wiring hands both
// handlers the Node, the zone included, and counts the held events.
func TestNodeHandlersHeld(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := runningNodeInformer(t, ctx)

	topo := newTopologyCalls()
	nodes := nodeCalls{calls: make(chan *v1.Node, 16)}
	hold := newNodeEventHold()
	wireNodeHandlers(ctx, 0, inf, nodes, topo, hold, func() { time.Sleep(gap) })

	select {
	case <-topo.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("OnTopologyChange was never called")
	}
	topo.mu.Lock()
	zone := topo.got[v1.LabelTopologyZone]
	topo.mu.Unlock()
	if zone != "zone-a" {
		t.Errorf("OnTopologyChange got zone %q, want zone-a", zone)
	}
	select {
	case n := <-nodes.calls:
		if n.Name != "node-a" {
			t.Errorf("OnNodeChange got node %q, want node-a", n.Name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnNodeChange was never called")
	}
	// Both configs' initial Add came during a gap, before registration.
	if got := hold.Early(); got != 2 {
		t.Errorf("held %d early Node events, want 2 (one per config)", got)
	}
}
