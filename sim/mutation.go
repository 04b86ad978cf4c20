package sim

import (
	"net/netip"
	"time"
)

// Mutation is one churn mutation as the engine made it. Later stages
// measure network programming latency from Start/End and TriggerTime and
// the addresses that changed.
type Mutation struct {
	// Seq counts mutations over the engine's life, from 0.
	Seq int
	// Action is the churn action (scenarios.ChurnFlap, ...).
	Action string
	// Group is the service group the mutation applies to.
	Group string
	// Service is namespace/name of the Service changed; empty when
	// skipped.
	Service string
	// Slices are the names of the EndpointSlices written, in write order.
	Slices []string
	// Added, Removed and Changed are endpoint addresses that appeared,
	// disappeared or changed condition.
	Added, Removed, Changed []netip.Addr
	// Due is when the rate asked for the mutation (zero at rate 0).
	Due time.Time
	// TriggerTime is the endpoints.kubernetes.io/last-change-trigger-time
	// stamped on the slices written (the moment the change was made).
	TriggerTime time.Time
	// Start is just before the first API call, End just after the last
	// one returned.
	Start, End time.Time
	// Blocked is the time spent waiting for watch buffers to drain before
	// the writes (back-pressure); it lies before Start for the first write.
	Blocked time.Duration
	// Writes are the API calls made, in order.
	Writes []Write
	// Skipped says why nothing was written (for example scaleDown when
	// every Service is at one endpoint); empty otherwise.
	Skipped string
}

// Write is one API call of a mutation.
type Write struct {
	// Verb is create, update or delete.
	Verb string
	// Resource is services or endpointslices.
	Resource  string
	Namespace string
	Name      string
	// Start is just before the call, End just after it returned.
	Start, End time.Time
	// Retries counts calls that failed with a retryable server error (an
	// injected API fault) before the one that went through.
	Retries int
}

// Write verbs.
const (
	VerbCreate = "create"
	VerbUpdate = "update"
	VerbDelete = "delete"
)
