package main

import (
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// expectation is where a probe's connections should go, derived from the
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
//     pods or the node itself to a NodePort) cluster-wide ones.
//   - Every eligible endpoint gets an equal share, except under
//     sessionAffinity ClientIP, where one client's connections all go to
//     one of them.
type expectation struct {
	// Eligible endpoints, address:targetPort, sorted as kube-proxy orders
	// them (as text).
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

func (n *node) expected(svc sim.Service, port sim.Port, from, target string) expectation {
	g := n.group(svc.Group)
	node := n.s.Spec.Cluster.Node
	eps := svc.Endpoints()

	var ready, servingTerminating, localReady, localServingTerminating []sim.Endpoint
	for _, ep := range eps {
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
		// The simulated slices hint each endpoint for its own node
		// (PreferSameNode) and zone (all modes), so every ready endpoint
		// has hints.
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
		case g.TrafficDistribution == "PreferSameNode" && len(sameNode) > 0:
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

	e := expectation{Affinity: g != nil && g.SessionAffinity == corev1.ServiceAffinityClientIP}
	useLocal := false
	switch {
	case target == scenarios.TargetClusterIP:
		useLocal = g != nil && g.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	case from == scenarios.FromExternal:
		useLocal = g != nil && g.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	}
	chosen := cluster
	if useLocal {
		chosen, rule, e.Local = local, localRule+" (traffic policy Local)", true
	}
	e.Rule = rule
	for _, ep := range chosen {
		e.Eligible = append(e.Eligible, netip.AddrPortFrom(ep.IP, uint16(port.TargetPort)))
	}
	sort.Slice(e.Eligible, func(i, j int) bool { return e.Eligible[i].String() < e.Eligible[j].String() })

	masqAll := n.s.Spec.Proxy.MasqueradeAll != nil && *n.s.Spec.Proxy.MasqueradeAll
	if o := n.ms.Proxy.MasqueradeAll; o != nil {
		masqAll = *o
	}
	switch {
	case from == scenarios.FromPod && target == scenarios.TargetClusterIP && !masqAll:
		e.SourcePreserved = ptr.To(true)
	case from == scenarios.FromExternal && useLocal:
		e.SourcePreserved = ptr.To(true)
	case from == scenarios.FromExternal:
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

func (n *node) group(name string) *scenarios.ServiceGroup {
	for i := range n.s.Spec.ServiceGroups {
		if n.s.Spec.ServiceGroups[i].Name == name {
			return &n.s.Spec.ServiceGroups[i]
		}
	}
	return nil
}
