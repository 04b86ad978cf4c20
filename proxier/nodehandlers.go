package proxier

import (
	"sync/atomic"
	"time"

	v1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// kube-proxy v1.37.1 (cmd/kube-proxy/app/server.go, lines ~630-635) builds
// NodeConfig and NodeTopologyConfig on the Node informer that
// proxy.NewNodeManager has already started and synced, and registers their
// handlers afterwards:
//
//	nodeConfig := config.NewNodeConfig(ctx, s.NodeManager.NodeInformer(), ...)
//	nodeConfig.RegisterEventHandler(s.NodeManager)
//
// NewNodeConfig adds its informer handler first, and a running informer
// delivers the Node at once, on the informer's own goroutine, which reads
// the handler slice that RegisterEventHandler appends to: a data race.
// Seen here (about 1 start in 15-30, more often under load or in the VM):
//
//   - NodeTopologyConfig handles the Node before its handler is appended,
//     remembers the zone label and calls nobody; later events carry the
//     same labels and are skipped, so the proxier never learns its zone and
//     topology-aware Services spread over every zone.
//   - NodeConfig reads a half-written slice and calls OnNodeChange on a nil
//     *NodeManager: the process panics (node.go:189).
//
// kpsim keeps kube-proxy's order but holds the informer's events for those
// two configs until both handlers are registered, and counts the events
// that came too early: each is one that upstream would have handled before
// its handler was registered.
type heldNodeInformer struct {
	v1informers.NodeInformer
	hold *nodeEventHold
}

func (h heldNodeInformer) Informer() cache.SharedIndexInformer {
	return heldInformer{SharedIndexInformer: h.NodeInformer.Informer(), hold: h.hold}
}

type heldInformer struct {
	cache.SharedIndexInformer
	hold *nodeEventHold
}

// AddEventHandlerWithResyncPeriod is the call NewNodeConfig and
// NewNodeTopologyConfig make.
func (h heldInformer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return h.SharedIndexInformer.AddEventHandlerWithResyncPeriod(heldHandler{next: handler, hold: h.hold}, resync)
}

// nodeEventHold is released once kube-proxy's Node handlers are registered.
type nodeEventHold struct {
	released chan struct{}
	early    atomic.Int64
}

func newNodeEventHold() *nodeEventHold {
	return &nodeEventHold{released: make(chan struct{})}
}

func (h *nodeEventHold) release() { close(h.released) }

// wait blocks until release, counting the calls that had to wait.
func (h *nodeEventHold) wait() {
	select {
	case <-h.released:
	default:
		h.early.Add(1)
		<-h.released
	}
}

// Early is how many Node events arrived before the handlers were
// registered.
func (h *nodeEventHold) Early() int { return int(h.early.Load()) }

type heldHandler struct {
	next cache.ResourceEventHandler
	hold *nodeEventHold
}

func (h heldHandler) OnAdd(obj interface{}, isInInitialList bool) {
	h.hold.wait()
	h.next.OnAdd(obj, isInInitialList)
}

func (h heldHandler) OnUpdate(oldObj, newObj interface{}) {
	h.hold.wait()
	h.next.OnUpdate(oldObj, newObj)
}

func (h heldHandler) OnDelete(obj interface{}) {
	h.hold.wait()
	h.next.OnDelete(obj)
}
