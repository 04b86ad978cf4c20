package netns

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// The node process's wire, for runners other than StartNode: package vm
// boots a node process in a guest and speaks this to it. The process and
// its main are the same; only the transport differs (the guest's console
// and an output disk instead of pipes).

const (
	// EnvNodeName and EnvNodeConfig tell Init which registered main to run
	// and with which spec (EncodeNodeSpec). Init unsets them so programs
	// the node main starts (iptables, nft) do not inherit them.
	EnvNodeName   = "KPSIM_NETNS_NODE"
	EnvNodeConfig = "KPSIM_NETNS_CONFIG"
	// NodeArgv0 is the node process's argv[0], so leftovers can be found
	// in /proc/*/cmdline by Cleanup.
	NodeArgv0 = "kpsim-node"
	// ConsoleEventsEnv set to "1" makes NodeEnv.Emit also write each event
	// to stderr as a line starting with ConsoleEventMarker: a guest's
	// console is live while its output reaches the host only at the end.
	ConsoleEventsEnv   = "KPSIM_VM_CONSOLE_EVENTS"
	ConsoleEventMarker = "kpsim-vm-event: "
)

// NodeMainRegistered says whether RegisterNodeMain registered name.
func NodeMainRegistered(name string) bool {
	_, ok := lookupNodeMain(name)
	return ok
}

// nodeSpec is what the orchestrator hands the node process in EnvNodeConfig.
type nodeSpec struct {
	Config NodeConfig `json:"config"`
	// Namespaces of the orchestrator: the node refuses to touch anything
	// if it finds itself still in them.
	HostNetNS uint64 `json:"hostNetNS"`
	HostMntNS uint64 `json:"hostMntNS"`
	ParentPID int    `json:"parentPID"`
}

// EncodeNodeSpec is the EnvNodeConfig value for a node of cfg whose
// parent (that it dies with) is parentPID, with the orchestrator's
// namespaces left 0 ("hostNetNS":0, "hostMntNS":0) for a runner that
// knows them only later (a guest's /init).
func EncodeNodeSpec(cfg NodeConfig, parentPID int) ([]byte, error) {
	raw, err := json.Marshal(nodeSpec{Config: cfg, ParentPID: parentPID})
	if err != nil {
		return nil, fmt.Errorf("encode node spec: %w", err)
	}
	return raw, nil
}

// WireMsg is one JSON line of the node's output: an event, or the result
// the node main ends with.
type WireMsg struct {
	Type  string          `json:"type"` // "event" or "result"
	Kind  string          `json:"kind,omitempty"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error string          `json:"error,omitempty"`
}

// Event is m as an Event.
func (m WireMsg) Event() Event { return Event{Kind: m.Kind, Time: m.Time, Data: m.Data} }

// EventQueue is an unbounded queue of a node's events: the reader of the
// node's output never blocks on whoever consumes them.
type EventQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []Event
	closed bool
}

// NewEventQueue returns an empty, open queue.
func NewEventQueue() *EventQueue {
	q := &EventQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push appends ev; it never blocks.
func (q *EventQueue) Push(ev Event) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	q.mu.Unlock()
	q.cond.Signal()
}

// Close ends the queue: Pop returns what is queued, then false.
func (q *EventQueue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// Pop blocks until an event is queued or the queue is closed and empty.
func (q *EventQueue) Pop() (Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return Event{}, false
	}
	ev := q.items[0]
	q.items = q.items[1:]
	return ev, true
}

// Complete is c with the defaults StartNode fills in, checked as StartNode
// checks it.
func (c NodeConfig) Complete() (NodeConfig, error) {
	c = c.withDefaults()
	return c, c.validate()
}
