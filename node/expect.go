package node

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// Expectation is where a probe's connections should go, derived from the
// API state and kube-proxy's documented semantics (not from its code):
//
//   - Endpoints that take cluster-wide traffic are the ready ones; when
//     none is ready, the serving-and-terminating ones (graceful
//     termination fallback). With topology hints on every ready endpoint
//     (trafficDistribution), only those hinted for this node
//     (PreferSameNode) or this node's zone (PreferClose, PreferSameZone)
//     when there is at least one.
//   - Local endpoints are the ready ones on this node, else its serving
//     and terminating ones.
//   - ClusterIP traffic uses local endpoints under internalTrafficPolicy
//     Local, NodePort and LoadBalancer traffic from outside the cluster
//     under externalTrafficPolicy Local; otherwise (and for traffic from
//     pods or the node itself to a NodePort) cluster-wide ones. With no
//     local endpoint, the connection is dropped.
//   - IPVS differs (pkg/proxy/ipvs/proxier.go syncEndpoint): a NodePort
//     or LoadBalancer virtual server takes externalTrafficPolicy whoever
//     connects, pods and the node included, and a Local policy with no
//     local endpoint falls back to the cluster-wide ones
//     (kubernetes/kubernetes#97081).
//   - Every eligible endpoint gets an equal share, except under
//     sessionAffinity ClientIP, where one client's connections all go to
//     one of them.
type Expectation struct {
	// Eligible endpoints, address:targetPort, sorted as kube-proxy orders
	// them (as text). Nil when no endpoint may take the connections.
	Eligible []netip.AddrPort
	// Local says the local-policy endpoints apply (kube-proxy's separate
	// local chain).
	Local bool
	// Affinity: all connections of one client go to one endpoint.
	Affinity bool
	// SourcePreserved: whether the pod should see the client's own
	// address (no masquerade); nil when not checked.
	SourcePreserved *bool
	// Rule names the semantics applied, for the report.
	Rule string
}

// ExpectInput is everything Expect reads: one Service port, the shape of
// its group, the simulated node, the mode's masquerade setting and the
// probe's client and target.
type ExpectInput struct {
	// Service is the probed Service with its endpoints as the API holds
	// them (sim.Model.Services).
	Service sim.Service
	// Port is the probed port of Service; Eligible carry its TargetPort.
	Port sim.Port
	// Group is the service group that generated Service; nil means none
	// (no traffic policy, affinity or hints apply).
	Group *scenarios.ServiceGroup
	// Node is the simulated node (spec.cluster.node): its name tells the
	// local endpoints, its zone the hinted ones.
	Node scenarios.Node
	// MasqueradeAll is kube-proxy's masqueradeAll as the mode runs it:
	// the mode's spec.modes[].proxy override, else spec.proxy's.
	MasqueradeAll bool
	// From is the probe client: scenarios.FromPod, FromExternal or
	// FromNode.
	From string
	// Target is what is probed: scenarios.TargetClusterIP, TargetNodePort
	// or TargetLoadBalancer.
	Target string
	// Mode is the proxy mode (scenarios.ModeIPVS, ...): IPVS applies the
	// traffic policies its own way.
	Mode string
}

// Expect returns where the probe described by in should land. It reads
// nothing but in.
func Expect(in ExpectInput) Expectation {
	g, node := in.Group, in.Node

	var ready, servingTerminating, localReady, localServingTerminating []sim.Endpoint
	for _, ep := range in.Service.Endpoints() {
		r, s, t := ep.Condition.Flags()
		local := ep.Node == node.Name
		switch {
		case r:
			ready = append(ready, ep)
			if local {
				localReady = append(localReady, ep)
			}
		case s && t:
			servingTerminating = append(servingTerminating, ep)
			if local {
				localServingTerminating = append(localServingTerminating, ep)
			}
		}
	}
	cluster, rule := ready, "ready endpoints"
	if g != nil && g.TrafficDistribution != "" && len(ready) > 0 {
		// The simulated slices hint each endpoint that has a zone for
		// its own node (PreferSameNode) and zone (sim/slices.go), and
		// kube-proxy uses hints only when every ready endpoint has them
		// (pkg/proxy/topology.go): so only when every one has a zone.
		var sameNode, sameZone []sim.Endpoint
		for _, ep := range ready {
			if ep.Node == node.Name {
				sameNode = append(sameNode, ep)
			}
			if ep.Zone != "" && ep.Zone == node.Zone {
				sameZone = append(sameZone, ep)
			}
		}
		switch {
		case g.TrafficDistribution == corev1.ServiceTrafficDistributionPreferSameNode && len(sameNode) > 0 && allZoned(ready):
			cluster, rule = sameNode, "ready endpoints hinted for this node (PreferSameNode)"
		case len(sameZone) > 0 && allZoned(ready):
			cluster, rule = sameZone, "ready endpoints hinted for this node's zone ("+g.TrafficDistribution+")"
		}
	}
	if len(cluster) == 0 {
		cluster, rule = servingTerminating, "serving terminating endpoints (no ready one)"
	}
	local, localRule := localReady, "ready endpoints on this node"
	if len(local) == 0 {
		local, localRule = localServingTerminating, "serving terminating endpoints on this node"
	}

	ipvs := in.Mode == scenarios.ModeIPVS
	e := Expectation{Affinity: g != nil && g.SessionAffinity == corev1.ServiceAffinityClientIP}
	useLocal := false
	switch {
	case in.Target == scenarios.TargetClusterIP:
		useLocal = g != nil && g.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	case in.From == scenarios.FromExternal || ipvs:
		useLocal = g != nil && g.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	}
	chosen, ipvsFallback := cluster, false
	switch {
	case useLocal && ipvs && len(local) == 0:
		ipvsFallback = true
		rule = rule + " (traffic policy Local, none on this node: IPVS falls back to cluster-wide)"
	case useLocal:
		chosen, rule, e.Local = local, localRule+" (traffic policy Local)", true
	}
	e.Rule = rule
	for _, ep := range chosen {
		e.Eligible = append(e.Eligible, netip.AddrPortFrom(ep.IP, uint16(in.Port.TargetPort)))
	}
	// kube-proxy sorts a Service port's endpoints by their "ip:port"
	// string (pkg/proxy/endpointslicecache.go byEndpoint).
	slices.SortFunc(e.Eligible, func(a, b netip.AddrPort) int { return strings.Compare(a.String(), b.String()) })

	switch {
	case in.From == scenarios.FromPod && in.Target == scenarios.TargetClusterIP && !in.MasqueradeAll:
		e.SourcePreserved = ptr.To(true)
	case in.From == scenarios.FromExternal && ipvsFallback:
		// Not masqueraded, to a remote endpoint: on a real node its reply
		// would bypass this node (the PR's comment); kpsim's pods all
		// answer through the node, so only the endpoint is checked.
	case in.From == scenarios.FromExternal && useLocal:
		e.SourcePreserved = ptr.To(true)
	case in.From == scenarios.FromExternal:
		e.SourcePreserved = ptr.To(false)
	}
	return e
}

func allZoned(eps []sim.Endpoint) bool {
	for _, ep := range eps {
		if ep.Zone == "" {
			return false
		}
	}
	return true
}
