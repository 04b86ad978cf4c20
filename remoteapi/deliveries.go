package remoteapi

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Deliveries follows, in the client's process, the watch events of some
// resources from the moment the watch's reader (an informer's reflector)
// takes them until the reader's consumer says it is done with them. In
// kube-proxy's process the consumer is kube-proxy's Service and
// EndpointSlice handlers: the node, having handed kube-proxy a write's
// events ([Service.Handed]), learns when kube-proxy has handled them, so
// that it waits for a sync that began after that.
//
// Handed is not handled. The informer takes an event, queues it and hands
// it to its handlers on goroutines of its own: on a loaded machine that
// took long enough for a sync to begin in between and leave the event to
// the next one (a CI run's probe met an endpoint a flap had made not
// ready).
//
// An event is known by its object: the one decoded here is the one the
// informer hands its handlers (its transform changes it in place), so
// Done takes that object. Objects from lists are not followed.
type Deliveries struct {
	// Lag, for tests, holds each followed event this long before its
	// reader can take it, as a loaded machine does. Set it before the
	// first watch starts.
	Lag time.Duration

	follow map[string]bool
	now    func() time.Time

	mu      sync.Mutex
	watches map[int64]*delivery
	pending map[runtime.Object]pendingEvent
	changed chan struct{} // closed and replaced on every change
}

type delivery struct {
	resource string
	// taken is how many events of every type the reader has taken.
	taken int64
	// ended: the watch is over, and takes nothing more.
	ended bool
	// doneAt is when Done last returned for one of its events.
	doneAt time.Time
}

type pendingEvent struct {
	watch int64
	seq   int64 // the event's number on its watch, from 1
}

// NewDeliveries follows the watches of the resources named ("services").
func NewDeliveries(resources ...string) *Deliveries {
	d := &Deliveries{follow: map[string]bool{}, now: time.Now, watches: map[int64]*delivery{},
		pending: map[runtime.Object]pendingEvent{}, changed: make(chan struct{})}
	for _, r := range resources {
		d.follow[r] = true
	}
	return d
}

func (d *Deliveries) changedLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// started registers watch id of resource; it says whether it is followed.
func (d *Deliveries) started(id int64, resource string) bool {
	if d == nil || !d.follow[resource] {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.watches[id] = &delivery{resource: resource}
	return true
}

// offer registers ev, the next event of watch id, before its reader can
// take it (and its consumer be done with it).
func (d *Deliveries) offer(id int64, ev watch.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.watches[id]
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		// An Error or Bookmark event reaches no handler.
		d.pending[ev.Object] = pendingEvent{watch: id, seq: w.taken + 1}
	}
}

// took records that the reader took the event offered last.
func (d *Deliveries) took(id int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.watches[id].taken++
	d.changedLocked()
}

// end records that watch id takes nothing more; an event offered and not
// taken is forgotten.
func (d *Deliveries) end(id int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.watches[id]
	w.ended = true
	for obj, p := range d.pending {
		if p.watch == id && p.seq > w.taken {
			delete(d.pending, obj)
		}
	}
	d.changedLocked()
}

// Done says the consumer is done with obj, an object a watch event
// carried; other objects are ignored.
func (d *Deliveries) Done(obj runtime.Object) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[obj]
	if !ok {
		return
	}
	delete(d.pending, obj)
	d.watches[p.watch].doneAt = d.now()
	d.changedLocked()
}

// WaitDone waits until, on every followed watch, the reader has taken the
// events counted in handed (Handover.Events: per watch, how many were
// handed) and the consumer is done with each of them. It returns when
// that was: the last Done of those watches, which is no earlier than the
// last of those events'. Watches not followed, or not in handed, are not
// waited for.
//
// When ctx ends first it says what was missing, and forgets the events it
// waited for: a later wait does not wait for them again.
func (d *Deliveries) WaitDone(ctx context.Context, handed map[int64]int64) (time.Time, error) {
	for {
		d.mu.Lock()
		at, missing := d.doneLocked(handed)
		ch := d.changed
		if len(missing) == 0 {
			d.mu.Unlock()
			return at, nil
		}
		select {
		case <-ctx.Done():
			d.forgetLocked(handed)
			d.mu.Unlock()
			sort.Strings(missing)
			return time.Time{}, fmt.Errorf("events handed and not handled: %s: %w", strings.Join(missing, "; "), ctx.Err())
		default:
		}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-ch:
		}
	}
}

// doneLocked returns the last Done among the watches in handed, and what
// is still missing, one string per watch.
func (d *Deliveries) doneLocked(handed map[int64]int64) (time.Time, []string) {
	var at time.Time
	var missing []string
	waiting := map[int64]int{}
	for _, p := range d.pending {
		if n, ok := handed[p.watch]; ok && p.seq <= n {
			waiting[p.watch]++
		}
	}
	for id, n := range handed {
		// A followed watch registers before its first Next: one not
		// here is not followed.
		w := d.watches[id]
		if w == nil {
			continue
		}
		if w.taken < n && !w.ended {
			missing = append(missing, fmt.Sprintf("%s (watch %d): %d of %d handed events taken", w.resource, id, w.taken, n))
			continue
		}
		if k := waiting[id]; k > 0 {
			missing = append(missing, fmt.Sprintf("%s (watch %d): %d events not handled", w.resource, id, k))
			continue
		}
		if w.doneAt.After(at) {
			at = w.doneAt
		}
	}
	return at, missing
}

func (d *Deliveries) forgetLocked(handed map[int64]int64) {
	for obj, p := range d.pending {
		if n, ok := handed[p.watch]; ok && p.seq <= n {
			delete(d.pending, obj)
		}
	}
}
