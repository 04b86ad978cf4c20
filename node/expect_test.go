package node

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// Test conventions, as pkg/proxy's proxier tests fix theirs: the
// simulated node is kpsim-node in zone-a; its endpoints are 10.244.0.x,
// those of node-b (also zone-a) 10.244.1.x, of node-c (zone-b) 10.244.2.x
// and of node-d (no zone) 10.244.3.x. The last octet names the state: .1
// and .5 ready, .2 and .4 serving-terminating, .3 terminating (not
// serving), .6 not ready. Upstream citations are files of
// k8s.io/kubernetes v1.37.1 pkg/proxy unless they name another directory.

const (
	thisNode = "kpsim-node"
	zoneA    = "zone-a"
	zoneB    = "zone-b"
)

var simNode = scenarios.Node{Name: thisNode, Zone: zoneA}

// webPort is the port most cases probe: Eligible carry its targetPort.
var webPort = sim.Port{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: 8080, NodePort: 30080}

func endpoint(ip, node, zone string, c sim.Condition) sim.Endpoint {
	return sim.Endpoint{Pod: "pod-" + ip, IP: netip.MustParseAddr(ip), Node: node, Zone: zone, Condition: c}
}

// Endpoints on the simulated node and on each other node.
func here(ip string, c sim.Condition) sim.Endpoint     { return endpoint(ip, thisNode, zoneA, c) }
func sameZone(ip string, c sim.Condition) sim.Endpoint { return endpoint(ip, "node-b", zoneA, c) }
func farZone(ip string, c sim.Condition) sim.Endpoint  { return endpoint(ip, "node-c", zoneB, c) }
func noZone(ip string, c sim.Condition) sim.Endpoint   { return endpoint(ip, "node-d", "", c) }

// service is ns/web with its endpoints in one slice.
func service(eps ...sim.Endpoint) sim.Service {
	return sim.Service{
		Namespace: "ns", Name: "web", Group: "web",
		ClusterIP: netip.MustParseAddr("10.96.0.10"),
		Ports:     []sim.Port{webPort},
		Slices:    []sim.Slice{{Name: "web-0", Endpoints: eps}},
	}
}

// group is the "web" service group with the defaults the loader sets
// (Cluster policies, no affinity, no hints), changed by set.
func group(set func(g *scenarios.ServiceGroup)) *scenarios.ServiceGroup {
	g := &scenarios.ServiceGroup{
		Name: "web", Namespace: "ns", Count: 1, Type: corev1.ServiceTypeClusterIP,
		SessionAffinity:       corev1.ServiceAffinityNone,
		InternalTrafficPolicy: corev1.ServiceInternalTrafficPolicyCluster,
	}
	if set != nil {
		set(g)
	}
	return g
}

func nodePortGroup(etp corev1.ServiceExternalTrafficPolicy, set func(g *scenarios.ServiceGroup)) *scenarios.ServiceGroup {
	return group(func(g *scenarios.ServiceGroup) {
		g.Type, g.ExternalTrafficPolicy = corev1.ServiceTypeNodePort, etp
		if set != nil {
			set(g)
		}
	})
}

func lbGroup(etp corev1.ServiceExternalTrafficPolicy) *scenarios.ServiceGroup {
	return group(func(g *scenarios.ServiceGroup) {
		g.Type, g.ExternalTrafficPolicy = corev1.ServiceTypeLoadBalancer, etp
	})
}

func withDistribution(d string) func(g *scenarios.ServiceGroup) {
	return func(g *scenarios.ServiceGroup) { g.TrafficDistribution = d }
}

// equateAddrs compares netip values, whose fields are unexported, by ==.
var equateAddrs = cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})

func addrPorts(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

// Rule texts, as the report prints them.
const (
	ruleReady          = "ready endpoints"
	ruleTerminating    = "serving terminating endpoints (no ready one)"
	ruleLocalReady     = "ready endpoints on this node (traffic policy Local)"
	ruleLocalServingTm = "serving terminating endpoints on this node (traffic policy Local)"
	ruleSameNode       = "ready endpoints hinted for this node (PreferSameNode)"
	ruleIPVSFallback   = " (traffic policy Local, none on this node: IPVS falls back to cluster-wide)"
)

func ruleSameZone(dist string) string {
	return "ready endpoints hinted for this node's zone (" + dist + ")"
}

var (
	kept         = ptr.To(true)
	masqueraded  = ptr.To(false)
	etpLocal     = corev1.ServiceExternalTrafficPolicyLocal
	etpCluster   = corev1.ServiceExternalTrafficPolicyCluster
	itpLocal     = func(g *scenarios.ServiceGroup) { g.InternalTrafficPolicy = corev1.ServiceInternalTrafficPolicyLocal }
	clientIP     = func(g *scenarios.ServiceGroup) { g.SessionAffinity = corev1.ServiceAffinityClientIP }
	preferClose  = withDistribution(corev1.ServiceTrafficDistributionPreferClose)
	preferSameZn = withDistribution(corev1.ServiceTrafficDistributionPreferSameZone)
	preferSameNd = withDistribution(corev1.ServiceTrafficDistributionPreferSameNode)
)

// mixed holds one endpoint of every kind: ready here, serving-terminating
// here, ready in this zone, ready, terminating and not ready in the far
// zone.
func mixed() sim.Service {
	return service(
		here("10.244.0.1", sim.Ready), here("10.244.0.2", sim.ServingTerminating),
		sameZone("10.244.1.1", sim.Ready),
		farZone("10.244.2.1", sim.Ready), farZone("10.244.2.3", sim.Terminating), farZone("10.244.2.6", sim.NotReady),
	)
}

// zoned holds ready endpoints here, in this zone and in the far zone,
// every one with a zone (so the simulated slices hint all of them), and a
// serving-terminating one in the far zone.
func zoned() sim.Service {
	return service(
		here("10.244.0.1", sim.Ready), sameZone("10.244.1.1", sim.Ready),
		farZone("10.244.2.1", sim.Ready), farZone("10.244.2.4", sim.ServingTerminating),
	)
}

func TestExpect(t *testing.T) {
	allReadyOfMixed := addrPorts("10.244.0.1:8080", "10.244.1.1:8080", "10.244.2.1:8080")
	tests := []struct {
		name string
		// why cites the kube-proxy behaviour the case encodes.
		why  string
		in   ExpectInput // Node defaults to simNode, Port to webPort
		want Expectation
	}{
		// Ready, serving-terminating and unusable endpoints.
		{
			name: "ready endpoints only",
			why:  "topology.go:60-68 CategorizeEndpoints: cluster endpoints are the IsReady ones; terminating and not-ready ones are left out",
			in:   ExpectInput{Service: mixed(), Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "ready endpoint anywhere wins over serving-terminating ones",
			why:  "topology.go:70-82: serving-terminating endpoints are tried only when no cluster endpoint is ready",
			in: ExpectInput{Service: service(here("10.244.0.2", sim.ServingTerminating), farZone("10.244.2.1", sim.Ready)),
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.2.1:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "serving-terminating fallback when no endpoint is ready",
			why:  "topology.go:74-82: with no ready endpoint, every serving and terminating one (not the merely terminating or not-ready ones)",
			in: ExpectInput{Service: service(here("10.244.0.2", sim.ServingTerminating), farZone("10.244.2.4", sim.ServingTerminating),
				farZone("10.244.2.3", sim.Terminating), farZone("10.244.2.6", sim.NotReady)),
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.2:8080", "10.244.2.4:8080"), SourcePreserved: kept, Rule: ruleTerminating},
		},
		{
			name: "terminating endpoints that do not serve are never used",
			why:  "topology.go:75-81 wants IsServing && IsTerminating; with no usable endpoint iptables/proxier.go:889-897 REJECTs",
			in: ExpectInput{Service: service(farZone("10.244.2.3", sim.Terminating), farZone("10.244.2.6", sim.NotReady)),
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{SourcePreserved: kept, Rule: ruleTerminating},
		},
		{
			name: "service with no endpoints at all",
			why:  "topology.go:49-51 categorizes nothing; iptables/proxier.go:889-897 (nftables/proxier.go likewise) rejects the ClusterIP",
			in: ExpectInput{Service: sim.Service{Namespace: "ns", Name: "web", Group: "web", Ports: []sim.Port{webPort}},
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{SourcePreserved: kept, Rule: ruleTerminating},
		},
		{
			name: "placeholder slice without endpoints",
			why:  "an EndpointSlice with no endpoints adds none (endpointslicecache.go addEndpoints), so the Service has no endpoints",
			in: ExpectInput{Service: sim.Service{Namespace: "ns", Name: "web", Group: "web", Ports: []sim.Port{webPort}, Slices: []sim.Slice{{Name: "web-0"}}},
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{SourcePreserved: kept, Rule: ruleTerminating},
		},
		{
			name: "endpoints of every slice count",
			why:  "endpointslicecache.go:290-306 endpointsMapFromEndpointInfo merges the endpoints of all a Service's slices",
			in: ExpectInput{Service: sim.Service{Namespace: "ns", Name: "web", Group: "web", Ports: []sim.Port{webPort}, Slices: []sim.Slice{
				{Name: "web-0", Endpoints: []sim.Endpoint{farZone("10.244.2.1", sim.Ready)}},
				{Name: "web-1", Endpoints: []sim.Endpoint{here("10.244.0.1", sim.Ready), farZone("10.244.2.6", sim.NotReady)}},
			}}, Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080", "10.244.2.1:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "eligible endpoints sorted as text",
			why:  "endpointslicecache.go:303,331 sorts a port's endpoints by their ip:port string, so .10 comes before .9",
			in: ExpectInput{Service: service(farZone("10.244.2.1", sim.Ready), here("10.244.0.9", sim.Ready),
				noZone("10.244.10.1", sim.Ready), here("10.244.0.10", sim.Ready)),
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.10:8080", "10.244.0.9:8080", "10.244.10.1:8080", "10.244.2.1:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "eligible endpoints carry the probed port's targetPort",
			why:  "endpointslicecache.go addEndpoints keys an endpoint as ip:port with the slice port (the Service's targetPort) of that port name",
			in: ExpectInput{Service: mixed(), Port: sim.Port{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: 5353},
				Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:5353", "10.244.1.1:5353", "10.244.2.1:5353"), SourcePreserved: kept, Rule: ruleReady},
		},

		// internalTrafficPolicy.
		{
			name: "internalTrafficPolicy Local: ready endpoints on this node",
			why:  "iptables/proxier.go:843-851 (nftables/proxier.go:1381-1389) route ClusterIP traffic to the local chain; topology.go:114-117 local = ready and local",
			in:   ExpectInput{Service: mixed(), Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "internalTrafficPolicy Local without local endpoints: dropped",
			why:  "iptables/proxier.go:899-905 DROPs ClusterIP traffic \"has no local endpoints\" (IPVS differs: see the IPVS cases)",
			in: ExpectInput{Service: service(sameZone("10.244.1.1", sim.Ready), farZone("10.244.2.1", sim.Ready)),
				Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Local: true, SourcePreserved: kept, Rule: ruleLocalServingTm},
		},
		{
			name: "internalTrafficPolicy Local: local serving-terminating although remote ones are ready",
			why:  "topology.go:99-123: the Local fallback to serving-terminating endpoints looks at local endpoints only, independently of Cluster",
			in: ExpectInput{Service: service(here("10.244.0.2", sim.ServingTerminating), sameZone("10.244.1.1", sim.Ready)),
				Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.2:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalServingTm},
		},
		{
			name: "internalTrafficPolicy Local: local ready wins over local serving-terminating",
			why:  "topology.go:114-118: serving-terminating local endpoints only when no local one is ready",
			in: ExpectInput{Service: service(here("10.244.0.1", sim.Ready), here("10.244.0.2", sim.ServingTerminating)),
				Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "internalTrafficPolicy Local: local terminating or not-ready endpoints never used",
			why:  "topology.go:100-111 counts only ready or serving-terminating local endpoints; none here, so iptables/proxier.go:899-905 DROPs",
			in: ExpectInput{Service: service(here("10.244.0.3", sim.Terminating), here("10.244.0.6", sim.NotReady), sameZone("10.244.1.1", sim.Ready)),
				Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Local: true, SourcePreserved: kept, Rule: ruleLocalServingTm},
		},
		{
			name: "internalTrafficPolicy Local ignores topology hints",
			why:  "topology.go:114-123: local endpoints are not filtered by availableForTopology, only cluster ones (topology.go:60-68)",
			in: ExpectInput{Service: zoned(), Group: group(func(g *scenarios.ServiceGroup) { itpLocal(g); preferClose(g) }),
				From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "internalTrafficPolicy Local does not apply to NodePort traffic",
			why:  "iptables/proxier.go:861-867: external traffic follows externalTrafficPolicy (Cluster here) and is masqueraded (iptables/proxier.go:1104-1110)",
			in: ExpectInput{Service: mixed(), Group: nodePortGroup(etpCluster, itpLocal),
				From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: masqueraded, Rule: ruleReady},
		},

		// externalTrafficPolicy.
		{
			name: "externalTrafficPolicy Local from outside to a NodePort: local endpoints, source kept",
			why:  "iptables/proxier.go:1147-1152 falls through to the local policy chain with no KUBE-MARK-MASQ (that is Cluster only, :1104-1110); nftables/proxier.go:1645-1705 likewise",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpLocal, nil), From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "externalTrafficPolicy Local from outside without local endpoints: dropped",
			why:  "iptables/proxier.go:907-914 DROPs external traffic \"has no local endpoints\" (IPVS differs: see the IPVS cases)",
			in: ExpectInput{Service: service(sameZone("10.244.1.1", sim.Ready), farZone("10.244.2.1", sim.Ready)),
				Group: nodePortGroup(etpLocal, nil), From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Local: true, SourcePreserved: kept, Rule: ruleLocalServingTm},
		},
		{
			name: "externalTrafficPolicy Local from outside: local serving-terminating fallback",
			why:  "topology.go:118-123: no local ready endpoint, so the local serving-terminating ones, although a remote one is ready",
			in: ExpectInput{Service: service(here("10.244.0.2", sim.ServingTerminating), farZone("10.244.2.1", sim.Ready)),
				Group: nodePortGroup(etpLocal, nil), From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: addrPorts("10.244.0.2:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalServingTm},
		},
		{
			name: "externalTrafficPolicy Local from outside to a LoadBalancer IP",
			why:  "iptables/proxier.go:972-981 sends LoadBalancer IP traffic to the same EXT chain as NodePorts; ipvs/proxier.go:1017 syncs local endpoints only",
			in:   ExpectInput{Service: mixed(), Group: lbGroup(etpLocal), From: scenarios.FromExternal, Target: scenarios.TargetLoadBalancer},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "externalTrafficPolicy Local from a pod to a NodePort: cluster-wide",
			why:  "iptables/proxier.go:1115-1124 short-circuits pod traffic to the cluster policy chain (nftables/proxier.go:1659-1671); IPVS does not (see the IPVS cases)",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpLocal, nil), From: scenarios.FromPod, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: allReadyOfMixed, Rule: ruleReady},
		},
		{
			name: "externalTrafficPolicy Local from the node to a NodePort: cluster-wide",
			why:  "iptables/proxier.go:1126-1145 masquerades src-type LOCAL traffic and sends it to the cluster policy chain",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpLocal, nil), From: scenarios.FromNode, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: allReadyOfMixed, Rule: ruleReady},
		},
		{
			name: "externalTrafficPolicy Local does not apply to ClusterIP traffic",
			why:  "ipvs/proxier.go:848-850 \"ExternalTrafficPolicy only works for NodePort and external LB traffic, does not affect ClusterIP\"; iptables/proxier.go:843-851",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpLocal, nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "externalTrafficPolicy Cluster from outside to a NodePort: masqueraded",
			why:  "iptables/proxier.go:1104-1110 \"masquerade traffic for ... external destinations\" under Cluster policy",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpCluster, nil), From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: masqueraded, Rule: ruleReady},
		},
		{
			name: "externalTrafficPolicy Cluster from outside to a LoadBalancer IP: masqueraded",
			why:  "iptables/proxier.go:972-981 then :1104-1110: LoadBalancer IP traffic takes the EXT chain, which masquerades under Cluster",
			in:   ExpectInput{Service: mixed(), Group: lbGroup(etpCluster), From: scenarios.FromExternal, Target: scenarios.TargetLoadBalancer},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: masqueraded, Rule: ruleReady},
		},
		{
			name: "from a pod to a LoadBalancer IP: cluster-wide, source not checked",
			why:  "iptables/proxier.go:1104-1110 masquerades it too, but the model only checks sources for pod->ClusterIP and external clients",
			in:   ExpectInput{Service: mixed(), Group: lbGroup(etpCluster), From: scenarios.FromPod, Target: scenarios.TargetLoadBalancer},
			want: Expectation{Eligible: allReadyOfMixed, Rule: ruleReady},
		},

		// Masquerade per source kind.
		{
			name: "masqueradeAll: pod to ClusterIP source not checked",
			why:  "iptables/proxier.go:1077-1081 (nftables/proxier.go:735-743) masquerade every ClusterIP connection; the model then leaves the source unchecked",
			in:   ExpectInput{Service: mixed(), Group: group(nil), MasqueradeAll: true, From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: allReadyOfMixed, Rule: ruleReady},
		},
		{
			name: "from the node to a ClusterIP: source not checked",
			why:  "iptables/proxier.go:1082-1093 masquerades ClusterIP traffic from outside the cluster CIDR (the node's address); the model does not check it",
			in:   ExpectInput{Service: mixed(), Group: group(nil), From: scenarios.FromNode, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: allReadyOfMixed, Rule: ruleReady},
		},
		{
			name: "masqueradeAll leaves externalTrafficPolicy Local traffic unmasqueraded",
			why:  "masqueradeAll only adds rules for ClusterIP traffic (iptables/proxier.go:1077-1081, nftables/proxier.go:735-743, ipvs KUBE-CLUSTER-IP set)",
			in: ExpectInput{Service: mixed(), Group: nodePortGroup(etpLocal, nil), MasqueradeAll: true,
				From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "masqueradeAll with externalTrafficPolicy Cluster from outside: masqueraded",
			why:  "iptables/proxier.go:1104-1110 masquerades external traffic under Cluster policy whatever masqueradeAll says",
			in: ExpectInput{Service: mixed(), Group: nodePortGroup(etpCluster, nil), MasqueradeAll: true,
				From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: masqueraded, Rule: ruleReady},
		},

		// Topology hints (trafficDistribution).
		{
			name: "PreferClose: ready endpoints hinted for this zone",
			why:  "topology.go:204-206,229-230: every ready endpoint has a zone hint and some are for this zone, so only those",
			in:   ExpectInput{Service: zoned(), Group: group(preferClose), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080", "10.244.1.1:8080"), SourcePreserved: kept, Rule: ruleSameZone("PreferClose")},
		},
		{
			name: "PreferSameZone: ready endpoints hinted for this zone",
			why:  "topology.go:204-206: PreferSameZone is the same zone-hint mode as PreferClose (the controller writes the same hints)",
			in:   ExpectInput{Service: zoned(), Group: group(preferSameZn), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080", "10.244.1.1:8080"), SourcePreserved: kept, Rule: ruleSameZone("PreferSameZone")},
		},
		{
			name: "hints ignored when a ready endpoint has none",
			why:  "topology.go:182-183,204,213-214: one ready endpoint without a zone hint (sim/slices.go:171 writes none without a zone) turns hints off",
			in: ExpectInput{Service: service(here("10.244.0.1", sim.Ready), farZone("10.244.2.1", sim.Ready), noZone("10.244.3.1", sim.Ready)),
				Group: group(preferClose), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080", "10.244.2.1:8080", "10.244.3.1:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "an unhinted endpoint that is not ready does not turn hints off",
			why:  "topology.go:171-173: topologyModeFromHints skips endpoints that are not ready",
			in: ExpectInput{Service: service(here("10.244.0.1", sim.Ready), farZone("10.244.2.1", sim.Ready), noZone("10.244.3.4", sim.ServingTerminating)),
				Group: group(preferClose), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), SourcePreserved: kept, Rule: ruleSameZone("PreferClose")},
		},
		{
			name: "no ready endpoint in this zone: every ready one",
			why:  "topology.go:204-211: hints apply only when at least one is for the node's zone",
			in: ExpectInput{Service: service(farZone("10.244.2.1", sim.Ready), farZone("10.244.2.5", sim.Ready), sameZone("10.244.1.4", sim.ServingTerminating)),
				Group: group(preferClose), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.2.1:8080", "10.244.2.5:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "node without a zone: every ready endpoint",
			why:  "topology.go:208-209: a node missing topology.kubernetes.io/zone ignores zone hints",
			in: ExpectInput{Service: service(sameZone("10.244.1.1", sim.Ready), farZone("10.244.2.1", sim.Ready)),
				Group: group(preferClose), Node: scenarios.Node{Name: thisNode}, From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.1.1:8080", "10.244.2.1:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "no ready endpoint: serving-terminating fallback ignores hints",
			why:  "topology.go:189-191 no topology without ready endpoints; topology.go:74-82 then takes every serving-terminating one",
			in: ExpectInput{Service: service(sameZone("10.244.1.4", sim.ServingTerminating), farZone("10.244.2.4", sim.ServingTerminating)),
				Group: group(preferClose), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.1.4:8080", "10.244.2.4:8080"), SourcePreserved: kept, Rule: ruleTerminating},
		},
		{
			name: "PreferSameNode: ready endpoints on this node",
			why:  "topology.go:194-198,227-228 (PreferSameTrafficDistribution is GA, features/kube_features.go:2018): node hints for this node win",
			in:   ExpectInput{Service: zoned(), Group: group(preferSameNd), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), SourcePreserved: kept, Rule: ruleSameNode},
		},
		{
			name: "PreferSameNode: none ready on this node, falls back to the zone",
			why:  "topology.go:199 ignores node hints with none for this node, then topology.go:204-206 uses zone hints",
			in: ExpectInput{Service: service(here("10.244.0.2", sim.ServingTerminating), sameZone("10.244.1.1", sim.Ready), farZone("10.244.2.1", sim.Ready)),
				Group: group(preferSameNd), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.1.1:8080"), SourcePreserved: kept, Rule: ruleSameZone("PreferSameNode")},
		},
		{
			name: "PreferSameNode: none on this node or zone, every ready one",
			why:  "topology.go:199,210-211: neither node nor zone hints match, so topology mode \"\"",
			in: ExpectInput{Service: service(farZone("10.244.2.1", sim.Ready), farZone("10.244.2.5", sim.Ready)),
				Group: group(preferSameNd), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.2.1:8080", "10.244.2.5:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "PreferSameNode with an unhinted ready endpoint elsewhere: every ready endpoint",
			why:  "upstream topology.go:176-177,195 needs a node hint on every ready endpoint; sim/slices.go:171 writes none for the zoneless 10.244.3.1, so kube-proxy uses every ready endpoint",
			in: ExpectInput{Service: service(here("10.244.0.1", sim.Ready), noZone("10.244.3.1", sim.Ready)),
				Group: group(preferSameNd), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080", "10.244.3.1:8080"), SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "no trafficDistribution: zones alone are no hints",
			why:  "sim/slices.go:171 writes hints only under trafficDistribution; topology.go:176-187 without hints gives mode \"\"",
			in:   ExpectInput{Service: zoned(), Group: group(nil), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "hints apply to NodePort traffic under externalTrafficPolicy Cluster",
			why:  "iptables/proxier.go:861 external traffic uses the cluster policy chain, whose endpoints are topology-filtered (topology.go:60-68)",
			in:   ExpectInput{Service: zoned(), Group: nodePortGroup(etpCluster, preferClose), From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080", "10.244.1.1:8080"), SourcePreserved: masqueraded, Rule: ruleSameZone("PreferClose")},
		},

		// IPVS (pkg/proxy/ipvs/proxier.go v1.37.1).
		{
			name: "IPVS internalTrafficPolicy Local: ready endpoints on this node",
			why:  "ipvs/proxier.go:850-854 syncs the ClusterIP virtual server with internalNodeLocal; syncEndpoint:1606-1608 keeps the local endpoints",
			in:   ExpectInput{Service: mixed(), Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP, Mode: scenarios.ModeIPVS},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "IPVS internalTrafficPolicy Local without local endpoints: cluster-wide",
			why:  "ipvs/proxier.go:1609-1614: no local endpoint, so the cluster ones (kubernetes#97081), where iptables and nftables drop",
			in: ExpectInput{Service: service(sameZone("10.244.1.1", sim.Ready), farZone("10.244.2.1", sim.Ready)),
				Group: group(itpLocal), From: scenarios.FromPod, Target: scenarios.TargetClusterIP, Mode: scenarios.ModeIPVS},
			want: Expectation{Eligible: addrPorts("10.244.1.1:8080", "10.244.2.1:8080"), SourcePreserved: kept, Rule: ruleReady + ruleIPVSFallback},
		},
		{
			name: "IPVS externalTrafficPolicy Local from a pod to a NodePort: local endpoints",
			why:  "ipvs/proxier.go:1138 syncs the NodePort virtual server with ExternalPolicyLocal whoever connects; IPVS has no pod short-circuit like iptables/proxier.go:1115-1124",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpLocal, nil), From: scenarios.FromPod, Target: scenarios.TargetNodePort, Mode: scenarios.ModeIPVS},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, Rule: ruleLocalReady},
		},
		{
			name: "IPVS externalTrafficPolicy Local from the node to a LoadBalancer IP: local endpoints",
			why:  "ipvs/proxier.go:1017 syncs the LoadBalancer virtual server with ExternalPolicyLocal, for the node's own connections too",
			in:   ExpectInput{Service: mixed(), Group: lbGroup(etpLocal), From: scenarios.FromNode, Target: scenarios.TargetLoadBalancer, Mode: scenarios.ModeIPVS},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, Rule: ruleLocalReady},
		},
		{
			name: "IPVS externalTrafficPolicy Local from outside without local endpoints: cluster-wide, source not checked",
			why:  "ipvs/proxier.go:1609-1614 routes external traffic to the cluster endpoints, unmasqueraded: a real remote pod's reply would bypass the node",
			in: ExpectInput{Service: service(sameZone("10.244.1.1", sim.Ready), farZone("10.244.2.1", sim.Ready)),
				Group: nodePortGroup(etpLocal, nil), From: scenarios.FromExternal, Target: scenarios.TargetNodePort, Mode: scenarios.ModeIPVS},
			want: Expectation{Eligible: addrPorts("10.244.1.1:8080", "10.244.2.1:8080"), Rule: ruleReady + ruleIPVSFallback},
		},
		{
			name: "IPVS externalTrafficPolicy Cluster from outside: masqueraded, every ready endpoint",
			why:  "ipvs/proxier.go:1138 with ExternalPolicyLocal false syncs the cluster endpoints; the KUBE-NODE-PORT-TCP set jumps to KUBE-MARK-MASQ (ipvs/proxier.go:499)",
			in:   ExpectInput{Service: mixed(), Group: nodePortGroup(etpCluster, nil), From: scenarios.FromExternal, Target: scenarios.TargetNodePort, Mode: scenarios.ModeIPVS},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: masqueraded, Rule: ruleReady},
		},

		// Session affinity and groups.
		{
			name: "ClientIP session affinity",
			why:  "iptables/proxier.go:1238,1445 write -m recent per endpoint, ipvs/proxier.go:836-839 FlagPersistent: one client sticks to one endpoint",
			in:   ExpectInput{Service: mixed(), Group: group(clientIP), From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: allReadyOfMixed, Affinity: true, SourcePreserved: kept, Rule: ruleReady},
		},
		{
			name: "ClientIP session affinity with internalTrafficPolicy Local",
			why:  "affinity applies inside whichever policy chain the traffic takes (iptables/proxier.go local chain has the same -m recent rules)",
			in: ExpectInput{Service: mixed(), Group: group(func(g *scenarios.ServiceGroup) { clientIP(g); itpLocal(g) }),
				From: scenarios.FromPod, Target: scenarios.TargetClusterIP},
			want: Expectation{Eligible: addrPorts("10.244.0.1:8080"), Local: true, Affinity: true, SourcePreserved: kept, Rule: ruleLocalReady},
		},
		{
			name: "Service of no group: Cluster policies, no affinity, no hints",
			why:  "a Service without trafficDistribution, affinity or Local policies gets every ready endpoint (topology.go:60-68)",
			in:   ExpectInput{Service: zoned(), From: scenarios.FromExternal, Target: scenarios.TargetNodePort},
			want: Expectation{Eligible: allReadyOfMixed, SourcePreserved: masqueraded, Rule: ruleReady},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in.Node == (scenarios.Node{}) {
				in.Node = simNode
			}
			if in.Port == (sim.Port{}) {
				in.Port = webPort
			}
			got := Expect(in)
			if d := cmp.Diff(tc.want, got, equateAddrs); d != "" {
				t.Errorf("Expect (-want +got):\n%s\nwhy: %s", d, tc.why)
			}
		})
	}
}

// Expect must not change its input: callers share the Service with the
// cluster model.
func TestExpectLeavesInputAlone(t *testing.T) {
	svc := service(farZone("10.244.2.1", sim.Ready), here("10.244.0.1", sim.Ready))
	before := service(farZone("10.244.2.1", sim.Ready), here("10.244.0.1", sim.Ready))
	Expect(ExpectInput{Service: svc, Port: webPort, Group: group(preferClose), Node: simNode, From: scenarios.FromPod, Target: scenarios.TargetClusterIP})
	if d := cmp.Diff(before, svc, equateAddrs, cmp.AllowUnexported(sim.Service{})); d != "" {
		t.Errorf("input changed (-before +after):\n%s", d)
	}
}
