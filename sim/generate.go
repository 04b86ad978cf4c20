package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/scenarios"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// GroupLabel is added to every generated Service (and so to its
// EndpointSlices) so later stages can find a group's objects.
const GroupLabel = "kpsim.dev/group"

// maxEndpointsPerSlice is the EndpointSlice controller's default
// --max-endpoints-per-slice (scenarios.Counts counts slices with it).
const maxEndpointsPerSlice = scenarios.MaxEndpointsPerSlice

// state is the fake cluster's desired state plus everything needed to
// change it: allocators, placement cursors and per-group bookkeeping. The
// generator builds it; the churn engine mutates it.
type state struct {
	seed int64

	serviceCIDR, podCIDR, lbCIDR netip.Prefix
	svcIPs, podIPs, lbIPs        *IPAllocator
	nodePorts                    *PortAllocator

	nodes  []NodeInfo
	groups []*groupState
	byName map[string]*groupState
	// services holds every generated Service by namespace/name.
	services map[string]*Service

	literalServices []*corev1.Service
	literalSlices   []*discoveryv1.EndpointSlice
	// literalKeys maps a literal Service's namespace/name to where the
	// scenario defines it.
	literalKeys map[string]string
}

type groupState struct {
	spec scenarios.ServiceGroup
	// localFraction is the resolved share of endpoints on the simulated
	// node.
	localFraction float64
	// remote are the other nodes endpoints may go to (Zones applied).
	remote []NodeInfo
	rrNext int
	// width is the zero-padding of Service indexes, from the initial count.
	width     int
	nextIndex int
	// services are the group's live Services in creation order.
	services []*Service
	labels   map[string]string
}

// build generates the desired state of the scenario. s must be defaulted
// (scenarios.Default; build calls it, it is idempotent).
func build(s *scenarios.Scenario) (*state, error) {
	scenarios.Default(s)
	sp := &s.Spec
	st := &state{seed: sp.Seed, byName: map[string]*groupState{}, services: map[string]*Service{}}

	var err error
	if st.serviceCIDR, err = parseV4Prefix("spec.cluster.serviceCIDR", sp.Cluster.ServiceCIDR); err != nil {
		return nil, err
	}
	if st.podCIDR, err = parseV4Prefix("spec.cluster.podCIDR", sp.Cluster.PodCIDR); err != nil {
		return nil, err
	}
	if st.lbCIDR, err = parseV4Prefix("spec.cluster.loadBalancerCIDR", sp.Cluster.LoadBalancerCIDR); err != nil {
		return nil, err
	}
	for _, pair := range [][2]netip.Prefix{{st.serviceCIDR, st.podCIDR}, {st.serviceCIDR, st.lbCIDR}, {st.podCIDR, st.lbCIDR}} {
		if pair[0].Overlaps(pair[1]) {
			return nil, fmt.Errorf("spec.cluster: CIDRs %s and %s overlap", pair[0], pair[1])
		}
	}
	// The first usable ClusterIP is the "kubernetes" Service's (skip 2:
	// the network address and that one).
	st.svcIPs, _ = NewIPAllocator("service CIDR", st.serviceCIDR, 2)
	st.svcIPs.note = "the first is kept for the kubernetes Service"
	st.podIPs, _ = NewIPAllocator("pod CIDR", st.podCIDR, scenarios.ReservedPodAddresses)
	st.podIPs.note = fmt.Sprintf("the first %d are kept for client pods", scenarios.ReservedPodAddresses)
	st.lbIPs, _ = NewIPAllocator("load-balancer CIDR", st.lbCIDR, 0)
	st.nodePorts = NewPortAllocator("NodePort range", NodePortMin, NodePortMax)

	if err := st.buildNodes(sp.Cluster); err != nil {
		return nil, err
	}
	pending, err := st.reserveLiterals(sp.Objects)
	if err != nil {
		return nil, err
	}
	plans, err := st.planGroups(sp.ServiceGroups)
	if err != nil {
		return nil, err
	}
	if err := st.checkCapacity(s.Counts().Generated, pending); err != nil {
		return nil, err
	}
	for _, p := range plans {
		if err := st.generateGroup(p); err != nil {
			return nil, err
		}
	}
	if err := st.allocateLiterals(pending); err != nil {
		return nil, err
	}
	return st, nil
}

func parseV4Prefix(field, v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: %w", field, err)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%s: %s is not IPv4 (kpsim simulates single-stack IPv4 clusters)", field, v)
	}
	return p.Masked(), nil
}

func (st *state) buildNodes(c scenarios.Cluster) error {
	ip, err := netip.ParseAddr(c.Node.IP)
	if err != nil || !ip.Is4() {
		return fmt.Errorf("spec.cluster.node.ip: %q is not an IPv4 address", c.Node.IP)
	}
	st.nodes = append(st.nodes, NodeInfo{Name: c.Node.Name, IP: ip, Zone: c.Node.Zone, Local: true})
	seen := map[string]bool{c.Node.Name: true}
	for i, n := range c.OtherNodes {
		if n.Name == "" {
			return fmt.Errorf("spec.cluster.otherNodes[%d].name: required", i)
		}
		if seen[n.Name] {
			return fmt.Errorf("spec.cluster.otherNodes[%d].name: duplicate node name %q", i, n.Name)
		}
		seen[n.Name] = true
		// Only the simulated node's address is used (doc on Node.IP).
		st.nodes = append(st.nodes, NodeInfo{Name: n.Name, Zone: n.Zone})
	}
	// Keep the node's address out of every pool that could hand it out.
	for _, a := range []*IPAllocator{st.svcIPs, st.podIPs, st.lbIPs} {
		if a.Contains(ip) {
			_ = a.Reserve(ip)
		}
	}
	return nil
}

// groupPlan is a group's Services before any address is allocated, so
// capacity can be checked for the whole scenario first.
type groupPlan struct {
	g      *groupState
	counts []int // endpoints per Service
	total  int
	rng    *rand.Rand
}

func (st *state) planGroups(groups []scenarios.ServiceGroup) ([]groupPlan, error) {
	var plans []groupPlan
	for i := range groups {
		spec := groups[i]
		field := fmt.Sprintf("spec.serviceGroups[%d]", i)
		if spec.Name == "" {
			return nil, fmt.Errorf("%s.name: required", field)
		}
		if _, dup := st.byName[spec.Name]; dup {
			return nil, fmt.Errorf("%s.name: duplicate group %q", field, spec.Name)
		}
		if spec.Count < 0 {
			return nil, fmt.Errorf("%s.count: %d is negative", field, spec.Count)
		}
		if spec.Endpoints == nil || spec.Endpoints.Min < 0 || spec.Endpoints.Max < spec.Endpoints.Min {
			return nil, fmt.Errorf("%s.endpoints: need 0 <= min <= max, got %+v", field, spec.Endpoints)
		}
		if spec.Headless && spec.Type != corev1.ServiceTypeClusterIP {
			return nil, fmt.Errorf("%s.headless: a headless Service must be type ClusterIP, not %s", field, spec.Type)
		}
		g := &groupState{spec: spec, width: len(strconv.Itoa(max(spec.Count-1, 0)))}
		g.labels = map[string]string{GroupLabel: spec.Name}
		for k, v := range spec.Labels {
			g.labels[k] = v
		}
		if err := st.resolvePlacement(g, field); err != nil {
			return nil, err
		}
		st.groups = append(st.groups, g)
		st.byName[spec.Name] = g

		// The endpoint counts are the first draws from the group's
		// stream: scenarios.Counts draws them the same way.
		p := groupPlan{g: g, rng: scenarios.NewRNG(st.seed, "group", spec.Name)}
		p.counts = make([]int, spec.Count)
		for j := range p.counts {
			p.counts[j] = spec.Endpoints.Draw(p.rng)
			p.total += p.counts[j]
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// resolvePlacement fixes the group's local share and the other nodes it
// may use. Default local share (unset): 1 without other nodes, else an
// even spread over the simulated node and the eligible other nodes.
func (st *state) resolvePlacement(g *groupState, field string) error {
	zones := map[string]bool{}
	for _, z := range g.spec.Zones {
		zones[z] = true
	}
	for _, n := range st.nodes[1:] {
		if len(zones) == 0 || zones[n.Zone] {
			g.remote = append(g.remote, n)
		}
	}
	switch {
	case g.spec.LocalFraction != nil:
		g.localFraction = *g.spec.LocalFraction
	case len(g.remote) == 0:
		g.localFraction = 1
	default:
		g.localFraction = 1 / float64(len(g.remote)+1)
	}
	if g.localFraction < 0 || g.localFraction > 1 || math.IsNaN(g.localFraction) {
		return fmt.Errorf("%s.localFraction: %v is not in [0, 1]", field, g.localFraction)
	}
	if g.localFraction < 1 && len(g.remote) == 0 {
		if len(g.spec.Zones) > 0 {
			return fmt.Errorf("%s.localFraction: %v puts endpoints off the simulated node, but no other node is in zones %v", field, g.localFraction, g.spec.Zones)
		}
		return fmt.Errorf("%s.localFraction: %v puts endpoints off the simulated node, but spec.cluster.otherNodes is empty", field, g.localFraction)
	}
	return nil
}

// checkCapacity refuses a scenario whose initial objects do not fit its
// ranges, naming the range, its capacity and the demand: what the groups
// generate (scenarios.Counts().Generated) and what literal Services left
// to allocate. What the literal objects set is reserved already.
func (st *state) checkCapacity(gen scenarios.Tally, pending *literalPending) error {
	clusterIPs := gen.ClusterIPs + len(pending.clusterIPs)
	lbIPs := gen.LoadBalancerIPs + len(pending.lbIPs)
	nodePorts := gen.NodePorts + len(pending.nodePorts)
	if err := st.svcIPs.need(clusterIPs, fmt.Sprintf("the ClusterIPs of %d Services", clusterIPs)); err != nil {
		return err
	}
	if err := st.podIPs.need(int(gen.Endpoints), fmt.Sprintf("%d endpoints of %d Services", gen.Endpoints, gen.Services)); err != nil {
		return err
	}
	if err := st.lbIPs.need(lbIPs, fmt.Sprintf("the ingress IPs of %d LoadBalancer Services", lbIPs)); err != nil {
		return err
	}
	return st.nodePorts.need(nodePorts, "the NodePorts (and health check ports) of NodePort and LoadBalancer Services")
}

func (st *state) generateGroup(p groupPlan) error {
	g := p.g
	// Placement and conditions are apportioned over the whole group, then
	// scattered over positions with the group's RNG.
	local := make([]bool, p.total)
	nLocal := int(math.Round(float64(p.total) * g.localFraction))
	for _, i := range p.rng.Perm(p.total)[:nLocal] {
		local[i] = true
	}
	if len(g.remote) > 0 {
		g.rrNext = p.rng.IntN(len(g.remote))
	}
	conds := make([]Condition, p.total)
	perm := p.rng.Perm(p.total)
	k := 0
	for c, n := range apportion(p.total, mixShares(g.spec.Conditions)) {
		for ; n > 0; n-- {
			conds[perm[k]] = Condition(c)
			k++
		}
	}

	pos := 0
	for _, n := range p.counts {
		svc, err := st.newService(g)
		if err != nil {
			return err
		}
		eps := make([]Endpoint, 0, n)
		for j := 0; j < n; j++ {
			ep, err := st.newEndpoint(g, svc, local[pos], conds[pos])
			if err != nil {
				return err
			}
			eps = append(eps, ep)
			pos++
		}
		svc.Slices = packSlices(svc, eps)
	}
	return nil
}

// newService allocates the next Service of the group (no endpoints yet)
// and registers it.
func (st *state) newService(g *groupState) (_ *Service, err error) {
	spec := &g.spec
	idx := strconv.Itoa(g.nextIndex)
	if len(idx) < g.width {
		idx = strings.Repeat("0", g.width-len(idx)) + idx
	}
	g.nextIndex++
	svc := &Service{
		Namespace: spec.Namespace,
		Name:      spec.Name + "-" + idx,
		Group:     spec.Name,
		Type:      spec.Type,
		Headless:  spec.Headless,
	}
	if where, clash := st.literalKeys[svc.Key()]; clash {
		return nil, fmt.Errorf("service group %s generates Service %s, which %s already defines", spec.Name, svc.Key(), where)
	}
	svc.UID = uidFor("Service", svc.Namespace, svc.Name)
	// Give back what was allocated when a later allocation fails, so a
	// failed createServices leaves the pools as they were.
	defer func() {
		if err != nil {
			st.releaseService(g, svc)
		}
	}()
	if !spec.Headless {
		if svc.ClusterIP, err = st.svcIPs.Allocate(); err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.Key(), err)
		}
	}
	external := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer
	for _, p := range spec.Ports {
		port := Port{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort}
		if port.TargetPort == 0 {
			port.TargetPort = port.Port
		}
		if port.Protocol == "" {
			port.Protocol = corev1.ProtocolTCP
		}
		if external {
			if port.NodePort, err = st.nodePorts.Allocate(); err != nil {
				return nil, fmt.Errorf("service %s: %w", svc.Key(), err)
			}
		}
		svc.Ports = append(svc.Ports, port)
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		if spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			if svc.HealthCheckNodePort, err = st.nodePorts.Allocate(); err != nil {
				return nil, fmt.Errorf("service %s: health check node port: %w", svc.Key(), err)
			}
		}
		if svc.LoadBalancerIP, err = st.lbIPs.Allocate(); err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.Key(), err)
		}
	}
	st.services[svc.Key()] = svc
	g.services = append(g.services, svc)
	return svc, nil
}

// releaseService returns every address and port of svc to its pool and
// forgets it.
func (st *state) releaseService(g *groupState, svc *Service) {
	if svc.ClusterIP.IsValid() {
		_ = st.svcIPs.Release(svc.ClusterIP)
	}
	if svc.LoadBalancerIP.IsValid() {
		_ = st.lbIPs.Release(svc.LoadBalancerIP)
	}
	for _, p := range svc.Ports {
		if p.NodePort != 0 {
			_ = st.nodePorts.Release(p.NodePort)
		}
	}
	if svc.HealthCheckNodePort != 0 {
		_ = st.nodePorts.Release(svc.HealthCheckNodePort)
	}
	for _, ep := range svc.Endpoints() {
		_ = st.podIPs.Release(ep.IP)
	}
	delete(st.services, svc.Key())
	for i, s := range g.services {
		if s == svc {
			g.services = append(g.services[:i], g.services[i+1:]...)
			break
		}
	}
}

// newEndpoint allocates a pod address and places the pod: on the
// simulated node when local, else on the next eligible other node.
func (st *state) newEndpoint(g *groupState, svc *Service, local bool, c Condition) (Endpoint, error) {
	ip, err := st.podIPs.Allocate()
	if err != nil {
		return Endpoint{}, fmt.Errorf("service %s: endpoint: %w", svc.Key(), err)
	}
	node := st.nodes[0]
	if !local {
		node = g.remote[g.rrNext]
		g.rrNext = (g.rrNext + 1) % len(g.remote)
	}
	ep := Endpoint{Pod: fmt.Sprintf("%s-pod-%d", svc.Name, svc.nextPod), IP: ip, Node: node.Name, Zone: node.Zone, Condition: c}
	svc.nextPod++
	return ep, nil
}

// mixShares orders a ConditionMix as the Condition constants; all zero
// means all ready (the documented default).
func mixShares(m scenarios.ConditionMix) []float64 {
	s := []float64{m.Ready, m.ServingTerminating, m.Terminating, m.NotReady}
	if s[0]+s[1]+s[2]+s[3] <= 0 {
		s[0] = 1
	}
	return s
}

// apportion splits total into parts proportional to shares by largest
// remainder (ties to the earlier share), so the parts add up to total.
func apportion(total int, shares []float64) []int {
	sum := 0.0
	for _, s := range shares {
		sum += s
	}
	out := make([]int, len(shares))
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, len(shares))
	given := 0
	for i, s := range shares {
		q := float64(total) * s / sum
		out[i] = int(math.Floor(q))
		given += out[i]
		rems[i] = rem{i, q - math.Floor(q)}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < total; k = (k + 1) % len(rems) {
		out[rems[k].i]++
		given++
	}
	return out
}

// uidFor derives a stable UID so the same scenario gives byte-identical
// objects (the fake clientset assigns none).
func uidFor(kind, ns, name string) types.UID {
	sum := sha1.Sum([]byte("kpsim/" + kind + "/" + ns + "/" + name))
	h := hex.EncodeToString(sum[:16])
	return types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}
