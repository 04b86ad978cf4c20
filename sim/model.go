package sim

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Condition is the state of one endpoint, as the four shares of
// scenarios.ConditionMix name them.
type Condition int

// Endpoint conditions.
const (
	// Ready: ready, serving, not terminating.
	Ready Condition = iota
	// ServingTerminating: not ready, serving, terminating.
	ServingTerminating
	// Terminating: not ready, not serving, terminating.
	Terminating
	// NotReady: not ready, not serving, not terminating.
	NotReady
)

var conditionNames = [...]string{"ready", "servingTerminating", "terminating", "notReady"}

func (c Condition) String() string {
	if c < 0 || int(c) >= len(conditionNames) {
		return "unknown"
	}
	return conditionNames[c]
}

// Flags returns the EndpointConditions booleans of c.
func (c Condition) Flags() (ready, serving, terminating bool) {
	switch c {
	case Ready:
		return true, true, false
	case ServingTerminating:
		return false, true, true
	case Terminating:
		return false, false, true
	default:
		return false, false, false
	}
}

// Endpoint is one fake pod behind a Service.
type Endpoint struct {
	// Pod is the pod name, unique in the namespace; the slice's targetRef.
	Pod string
	// IP is the pod address, from the pod CIDR.
	IP netip.Addr
	// Node is the node the pod runs on.
	Node string
	// Zone is the node's zone; empty when the node has none.
	Zone string
	// Condition is the endpoint's state.
	Condition Condition
}

// Slice is one EndpointSlice of a generated Service.
type Slice struct {
	// Name is <service>-<n>, n counting up per Service and never reused.
	Name string
	// Endpoints in the order the slice lists them.
	Endpoints []Endpoint
	// TriggerTime is the endpoints.kubernetes.io/last-change-trigger-time
	// of the last write; zero for slices of the initial state, which carry
	// no annotation (see doc.go).
	TriggerTime time.Time
}

// Port is one port of a generated Service.
type Port struct {
	Name       string
	Protocol   corev1.Protocol
	Port       int32
	TargetPort int32
	// NodePort is 0 for ClusterIP Services.
	NodePort int32
}

// Service is one generated Service with its endpoints, as the API holds it
// (the desired state: after churn, the oracle compares against this).
type Service struct {
	Namespace string
	Name      string
	// Group is the service group that generated the Service.
	Group    string
	UID      types.UID
	Type     corev1.ServiceType
	Headless bool
	// ClusterIP is invalid (the zero Addr) for headless Services.
	ClusterIP netip.Addr
	// LoadBalancerIP is set for LoadBalancer Services only.
	LoadBalancerIP netip.Addr
	// HealthCheckNodePort is set for LoadBalancer Services with
	// externalTrafficPolicy Local, as the API server allocates it.
	HealthCheckNodePort int32
	Ports               []Port
	Slices              []Slice

	// Bookkeeping for names handed out later by churn.
	nextPod   int
	nextSlice int
}

// Key is namespace/name.
func (s *Service) Key() string { return s.Namespace + "/" + s.Name }

// Endpoints lists every endpoint of every slice, in slice order.
func (s *Service) Endpoints() []Endpoint {
	var out []Endpoint
	for _, sl := range s.Slices {
		out = append(out, sl.Endpoints...)
	}
	return out
}

// EndpointCount is the number of endpoints over all slices.
func (s *Service) EndpointCount() int {
	n := 0
	for _, sl := range s.Slices {
		n += len(sl.Endpoints)
	}
	return n
}

func (s *Service) deepCopy() Service {
	out := *s
	out.Ports = append([]Port(nil), s.Ports...)
	out.Slices = make([]Slice, len(s.Slices))
	for i, sl := range s.Slices {
		out.Slices[i] = sl
		out.Slices[i].Endpoints = append([]Endpoint(nil), sl.Endpoints...)
	}
	return out
}

// NodeInfo is one node of the simulated cluster.
type NodeInfo struct {
	Name string
	// IP is set for the simulated node only.
	IP   netip.Addr
	Zone string
	// Local marks the simulated node (the one kube-proxy runs on).
	Local bool
}

// Model is the desired state of the fake cluster: what the API holds once
// every write the engine made has landed.
type Model struct {
	// ServiceCIDR, PodCIDR and LoadBalancerCIDR are the parsed cluster
	// ranges.
	ServiceCIDR, PodCIDR, LoadBalancerCIDR netip.Prefix
	// Nodes: the simulated node first, then the others in scenario order.
	Nodes []NodeInfo
	// Services are the generated Services, sorted by namespace/name.
	Services []Service
	// LiteralServices and LiteralSlices are spec.objects as added (with
	// the ClusterIP, NodePorts and LoadBalancer IP filled in when unset).
	LiteralServices []*corev1.Service
	LiteralSlices   []*discoveryv1.EndpointSlice
}
