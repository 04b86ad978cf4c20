package remoteapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/rpc"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
)

// serviceName is the net/rpc service name.
const serviceName = "API"

// Request is one forwarded action.
type Request struct {
	Verb        string
	Namespace   string
	Resource    schema.GroupVersionResource
	Subresource string
	Kind        schema.GroupVersionKind
	Name        string
	ListOptions metav1.ListOptions
	GetOptions  metav1.GetOptions
}

// Object is a runtime.Object on the wire: its kind and its JSON.
type Object struct {
	Kind schema.GroupVersionKind
	JSON []byte
}

// Failure is an error on the wire: an API status when it was one.
type Failure struct {
	Status  []byte // metav1.Status JSON
	Message string
}

// Reply answers Invoke.
type Reply struct {
	Object  *Object
	Failure *Failure
}

// WatchReply answers Watch.
type WatchReply struct {
	ID      int64
	Failure *Failure
}

// Event is one watch event on the wire.
type Event struct {
	Type   watch.EventType
	Object Object
}

// Events answers Next: the events queued since the last call, and whether
// the watch has ended after them.
type Events struct {
	Events []Event
	Closed bool
}

// Invoker is what the node's fake clientset does with an action.
type Invoker interface {
	Invokes(action clienttesting.Action, defaultReturnObj runtime.Object) (runtime.Object, error)
	InvokesWatch(action clienttesting.Action) (watch.Interface, error)
}

// Register serves api on srv.
func Register(srv *rpc.Server, api Invoker) error {
	return srv.RegisterName(serviceName, NewService(api))
}

// NewService is the served side of api, for rpc.Server.RegisterName with
// ServiceName.
func NewService(api Invoker) *Service {
	return &Service{api: api, watches: map[int64]*queue{}}
}

// ServiceName is the name Register registers the service under.
const ServiceName = serviceName

// StopAll ends every watch: the client is gone (its process exited), and
// nothing would take their events.
func (s *Service) StopAll() {
	s.mu.Lock()
	ws := s.watches
	s.watches = map[int64]*queue{}
	s.mu.Unlock()
	for _, q := range ws {
		q.w.Stop()
	}
}

// Service is the served side. It is exported for net/rpc only.
type Service struct {
	api     Invoker
	mu      sync.Mutex
	next    int64
	watches map[int64]*queue
}

// Invoke runs a get or list action.
func (s *Service) Invoke(req Request, reply *Reply) error {
	action, err := req.action()
	if err != nil {
		return err
	}
	obj, err := s.api.Invokes(action, nil)
	if err != nil {
		reply.Failure = failure(err)
		return nil
	}
	if obj == nil {
		reply.Failure = &Failure{Message: fmt.Sprintf("%s %s: no object", req.Verb, req.Resource.Resource)}
		return nil
	}
	o, err := encode(obj)
	if err != nil {
		return err
	}
	reply.Object = &o
	return nil
}

// Watch starts a watch; its events are drained into a queue at once.
func (s *Service) Watch(req Request, reply *WatchReply) error {
	action, err := req.action()
	if err != nil {
		return err
	}
	w, err := s.api.InvokesWatch(action)
	if err != nil {
		reply.Failure = failure(err)
		return nil
	}
	q := newQueue(w)
	s.mu.Lock()
	s.next++
	reply.ID = s.next
	s.watches[reply.ID] = q
	s.mu.Unlock()
	return nil
}

// nextWait bounds one Next call, so a reader whose watch was stopped on
// its side is not held for long.
const nextWait = time.Second

// Next returns the watch's queued events, waiting up to nextWait for one.
func (s *Service) Next(id int64, reply *Events) error {
	s.mu.Lock()
	q := s.watches[id]
	s.mu.Unlock()
	if q == nil {
		reply.Closed = true
		return nil
	}
	evs, closed := q.take(nextWait)
	for _, ev := range evs {
		o, err := encode(ev.Object)
		if err != nil {
			return err
		}
		reply.Events = append(reply.Events, Event{Type: ev.Type, Object: o})
	}
	reply.Closed = closed
	if len(evs) > 0 {
		q.mu.Lock()
		q.handed = time.Now()
		q.count += int64(len(evs))
		q.mu.Unlock()
	}
	if closed {
		s.mu.Lock()
		delete(s.watches, id)
		s.mu.Unlock()
	}
	return nil
}

// Handover is what the client has been handed: when the last event went,
// and how many events each watch has handed (its ID's count).
type Handover struct {
	At     time.Time
	Events map[int64]int64
}

// Handed says whether every event of every watch has been handed to the
// client (none waits in a queue or in the watch's channel), when the last
// of them was, and how many each watch has handed: the client has had
// every write made before the call since then. An event the queue's
// goroutine has taken from the channel and not yet queued is not seen for
// that instant: ask twice, a moment apart, and trust an answer that held.
//
// Handed to the client is not yet seen by its reader: the counts are for
// [Deliveries.WaitDone] on the client's side.
func (s *Service) Handed() (Handover, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := Handover{Events: make(map[int64]int64, len(s.watches))}
	for id, q := range s.watches {
		q.mu.Lock()
		waiting := len(q.events) > 0 || len(q.w.ResultChan()) > 0
		handed, count := q.handed, q.count
		q.mu.Unlock()
		if waiting {
			return Handover{}, false
		}
		if handed.After(h.At) {
			h.At = handed
		}
		h.Events[id] = count
	}
	return h, true
}

// Stop ends a watch.
func (s *Service) Stop(id int64, _ *struct{}) error {
	s.mu.Lock()
	q := s.watches[id]
	delete(s.watches, id)
	s.mu.Unlock()
	if q != nil {
		q.w.Stop()
	}
	return nil
}

func (r Request) action() (clienttesting.Action, error) {
	switch r.Verb {
	case "get":
		return clienttesting.NewGetActionWithOptions(r.Resource, r.Namespace, r.Name, r.GetOptions), nil
	case "list":
		return clienttesting.NewListActionWithOptions(r.Resource, r.Kind, r.Namespace, r.ListOptions), nil
	case "watch":
		return clienttesting.NewWatchActionWithOptions(r.Resource, r.Namespace, r.ListOptions), nil
	}
	return nil, fmt.Errorf("remoteapi: %s %s is not served (only get, list and watch)", r.Verb, r.Resource.Resource)
}

func request(a clienttesting.Action) (Request, error) {
	r := Request{Verb: a.GetVerb(), Namespace: a.GetNamespace(), Resource: a.GetResource(), Subresource: a.GetSubresource()}
	switch a := a.(type) {
	case clienttesting.GetActionImpl:
		r.Name, r.GetOptions = a.Name, a.GetOptions
	case clienttesting.ListActionImpl:
		r.Kind, r.Name, r.ListOptions = a.Kind, a.Name, a.ListOptions
	case clienttesting.WatchActionImpl:
		r.ListOptions = a.ListOptions
	default:
		return r, fmt.Errorf("remoteapi: %s %s (%T) is not served (only get, list and watch)", r.Verb, r.Resource.Resource, a)
	}
	return r, nil
}

func encode(obj runtime.Object) (Object, error) {
	kinds, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(kinds) == 0 {
		return Object{}, fmt.Errorf("remoteapi: kind of %T: %v", obj, err)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return Object{}, fmt.Errorf("remoteapi: encode %s: %w", kinds[0].Kind, err)
	}
	return Object{Kind: kinds[0], JSON: b}, nil
}

func (o Object) decode() (runtime.Object, error) {
	obj, err := scheme.Scheme.New(o.Kind)
	if err != nil {
		return nil, fmt.Errorf("remoteapi: %w", err)
	}
	if err := json.Unmarshal(o.JSON, obj); err != nil {
		return nil, fmt.Errorf("remoteapi: decode %s: %w", o.Kind.Kind, err)
	}
	return obj, nil
}

func failure(err error) *Failure {
	f := &Failure{Message: err.Error()}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		if b, jerr := json.Marshal(st.Status()); jerr == nil {
			f.Status = b
		}
	}
	return f
}

func (f *Failure) err() error {
	if len(f.Status) > 0 {
		var st metav1.Status
		if json.Unmarshal(f.Status, &st) == nil {
			return &apierrors.StatusError{ErrStatus: st}
		}
	}
	return errors.New(f.Message)
}

// queue drains a watch into memory as fast as it delivers.
type queue struct {
	w      watch.Interface
	mu     sync.Mutex
	events []watch.Event
	closed bool
	ready  chan struct{} // closed and replaced when events arrive or the watch ends
	// handed is when Next last handed events to the client, and count
	// how many it has handed in all.
	handed time.Time
	count  int64
}

func newQueue(w watch.Interface) *queue {
	q := &queue{w: w, ready: make(chan struct{})}
	go func() {
		for ev := range w.ResultChan() {
			q.mu.Lock()
			q.events = append(q.events, ev)
			close(q.ready)
			q.ready = make(chan struct{})
			q.mu.Unlock()
		}
		q.mu.Lock()
		q.closed = true
		close(q.ready)
		q.ready = make(chan struct{})
		q.mu.Unlock()
	}()
	return q
}

func (q *queue) take(wait time.Duration) ([]watch.Event, bool) {
	q.mu.Lock()
	if len(q.events) == 0 && !q.closed {
		ready := q.ready
		q.mu.Unlock()
		select {
		case <-ready:
		case <-time.After(wait):
		}
		q.mu.Lock()
	}
	defer q.mu.Unlock()
	evs := q.events
	q.events = nil
	return evs, q.closed
}

// NewClientset returns a clientset whose get, list and watch actions are
// answered by the API served on c. Other verbs fail. When d is not nil, it
// follows the events of its resources' watches.
func NewClientset(c *rpc.Client, d *Deliveries) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		req, err := request(a)
		if err != nil {
			return true, nil, err
		}
		var reply Reply
		if err := c.Call(serviceName+".Invoke", req, &reply); err != nil {
			return true, nil, fmt.Errorf("remote API: %w", err)
		}
		if reply.Failure != nil {
			return true, nil, reply.Failure.err()
		}
		obj, err := reply.Object.decode()
		return true, obj, err
	})
	cs.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		req, err := request(a)
		if err != nil {
			return true, nil, err
		}
		var reply WatchReply
		if err := c.Call(serviceName+".Watch", req, &reply); err != nil {
			return true, nil, fmt.Errorf("remote API: %w", err)
		}
		if reply.Failure != nil {
			return true, nil, reply.Failure.err()
		}
		follow := d
		if !d.started(reply.ID, req.Resource.Resource) {
			follow = nil
		}
		return true, remoteWatch(c, reply.ID, follow), nil
	})
	return cs
}

// remoteWatch feeds a watch.Interface from Next calls until the remote
// watch ends or the reader stops it; d, when not nil, follows its events.
func remoteWatch(c *rpc.Client, id int64, d *Deliveries) watch.Interface {
	ch := make(chan watch.Event)
	pw := watch.NewProxyWatcher(ch)
	stop := func() { c.Go(serviceName+".Stop", id, &struct{}{}, make(chan *rpc.Call, 1)) }
	go func() {
		defer close(ch)
		if d != nil {
			defer d.end(id)
		}
		for {
			var evs Events
			call := c.Go(serviceName+".Next", id, &evs, make(chan *rpc.Call, 1))
			select {
			case <-call.Done:
			case <-pw.StopChan():
				stop()
				return
			}
			if call.Error != nil {
				return // the connection is gone: the informer will re-list
			}
			for _, e := range evs.Events {
				obj, err := e.Object.decode()
				if err != nil {
					obj = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
					e.Type = watch.Error
				}
				ev := watch.Event{Type: e.Type, Object: obj}
				if d != nil {
					if d.Lag > 0 {
						time.Sleep(d.Lag)
					}
					d.offer(id, ev)
				}
				select {
				case ch <- ev:
					if d != nil {
						d.took(id)
					}
				case <-pw.StopChan():
					stop()
					return
				}
			}
			if evs.Closed {
				return
			}
		}
	}()
	return pw
}
