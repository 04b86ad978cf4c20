package scenarios

import (
	"math"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// MaxEndpointsPerSlice is the EndpointSlice controller's default
// --max-endpoints-per-slice: generated Services get one slice per 100
// endpoints, and at least one.
const MaxEndpointsPerSlice = 100

// Counts is what a scenario's cluster holds, derived from the scenario
// alone: the one place that counts Services, endpoints and what they take
// from the cluster's ranges (validation, the memory estimate, the fake
// cluster's capacity check, kpsim validate's summary and sweep sizes all
// read it).
type Counts struct {
	// Generated is what the service groups create before the first step.
	// Endpoint counts drawn from a range ({min, max}) are drawn with the
	// scenario's seed exactly as the sim package draws them, so this is
	// the generated cluster, not an estimate.
	Generated Tally
	// Literal is what spec.objects hold, as written.
	Literal Tally
	// Start is the cluster kube-proxy first lists: Generated plus Literal.
	Start Tally
	// Peak bounds what the cluster can hold at once during the run: every
	// group's Services at the group's largest endpoint count, what churn
	// steps can add (createServices: Services with their endpoints;
	// scaleUp: an address each; rollingUpdate: one address per step, as
	// it holds the new address before it frees the old one), and Literal.
	// Deletions are not subtracted. Capacity checks and the memory
	// estimate size for it.
	Peak Tally
}

// Tally counts a cluster's objects and what they take from its ranges.
type Tally struct {
	// Services is the Service objects.
	Services int
	// ClusterIPs is the Services that hold a ClusterIP: all but headless
	// ones.
	ClusterIPs int
	// NodePorts is the NodePorts of NodePort and LoadBalancer Services,
	// plus their health check node ports (generated: LoadBalancer
	// Services with externalTrafficPolicy Local; literal: those set).
	NodePorts int
	// LoadBalancerIPs is the ingress IPs of LoadBalancer Services: one per
	// generated Service; for a literal one, the IPs its status lists, or
	// one kpsim allocates when it lists none.
	LoadBalancerIPs int
	// Endpoints is the endpoint addresses in EndpointSlices. An address
	// that several literal slices repeat counts each time, as kube-proxy
	// sees it once per slice.
	Endpoints int64
	// EndpointSlices is the EndpointSlice objects.
	EndpointSlices int64
}

func (t Tally) plus(u Tally) Tally {
	return Tally{
		Services:        t.Services + u.Services,
		ClusterIPs:      t.ClusterIPs + u.ClusterIPs,
		NodePorts:       t.NodePorts + u.NodePorts,
		LoadBalancerIPs: t.LoadBalancerIPs + u.LoadBalancerIPs,
		Endpoints:       t.Endpoints + u.Endpoints,
		EndpointSlices:  t.EndpointSlices + u.EndpointSlices,
	}
}

// Counts counts the scenario's cluster. s must be defaulted (Load and
// sim.New do it). Its cost grows with the Services of groups whose
// endpoints are a range, one draw each.
func (s *Scenario) Counts() Counts {
	c := Counts{Literal: s.literal(), Peak: s.peak()}
	for i := range s.Spec.ServiceGroups {
		g := &s.Spec.ServiceGroups[i]
		c.Generated = c.Generated.plus(g.services(g.Count, NewRNG(s.Spec.Seed, "group", g.Name)))
	}
	c.Start = c.Generated.plus(c.Literal)
	return c
}

// peak is Counts().Peak, without drawing: validation sizes the ranges with
// it, so a scenario of absurd counts is refused without being drawn.
func (s *Scenario) peak() Tally {
	t := s.literal()
	for i := range s.Spec.ServiceGroups {
		g := &s.Spec.ServiceGroups[i]
		t = t.plus(g.services(g.Count, nil))
	}
	for _, st := range s.Spec.Steps {
		c := st.Churn
		if c == nil {
			continue
		}
		i := slices.IndexFunc(s.Spec.ServiceGroups, func(g ServiceGroup) bool { return g.Name == c.Group })
		if i < 0 {
			continue // refused by validation
		}
		k := churnMutations(c)
		switch c.Action {
		case ChurnCreateServices:
			t = t.plus(s.Spec.ServiceGroups[i].services(k, nil))
		case ChurnScaleUp:
			t.Endpoints += int64(k)
		case ChurnRollingUpdate:
			// Each replacement holds the new address before it frees the
			// old one: one more at a time, however many it makes.
			t.Endpoints++
		}
	}
	return t
}

// services counts n Services of group g. With rng nil every Service has
// the group's largest endpoint count; else each draws its count from rng,
// which must be the group's fresh stream (NewRNG(seed, "group", name)): the
// sim package's generator draws the counts first from that stream too.
func (g *ServiceGroup) services(n int, rng *rand.Rand) Tally {
	n = max(n, 0)
	t := Tally{Services: n}
	if !g.Headless {
		t.ClusterIPs = n
	}
	if g.Type == corev1.ServiceTypeNodePort || g.Type == corev1.ServiceTypeLoadBalancer {
		t.NodePorts = n * len(g.Ports)
	}
	if g.Type == corev1.ServiceTypeLoadBalancer {
		t.LoadBalancerIPs = n
		if g.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			t.NodePorts += n // health check node ports
		}
	}
	var r IntRange
	if g.Endpoints != nil {
		r = *g.Endpoints
	}
	if rng == nil || r.Fixed() {
		t.Endpoints = int64(n) * int64(r.Max)
		t.EndpointSlices = int64(n) * slicesFor(r.Max)
		return t
	}
	for range n {
		e := r.Draw(rng)
		t.Endpoints += int64(e)
		t.EndpointSlices += slicesFor(e)
	}
	return t
}

// slicesFor is how many EndpointSlices a generated Service with n
// endpoints has.
func slicesFor(n int) int64 {
	return max(int64(n+MaxEndpointsPerSlice-1)/MaxEndpointsPerSlice, 1)
}

// literal counts spec.objects.
func (s *Scenario) literal() Tally {
	var t Tally
	for _, o := range s.Spec.Objects {
		switch {
		case o.Service != nil:
			sp := &o.Service.Spec
			t.Services++
			if sp.ClusterIP != corev1.ClusterIPNone {
				t.ClusterIPs++
			}
			if sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer {
				t.NodePorts += len(sp.Ports)
			}
			if sp.HealthCheckNodePort != 0 {
				t.NodePorts++
			}
			if sp.Type == corev1.ServiceTypeLoadBalancer {
				in := o.Service.Status.LoadBalancer.Ingress
				if len(in) == 0 {
					t.LoadBalancerIPs++
				}
				for _, i := range in {
					if i.IP != "" {
						t.LoadBalancerIPs++
					}
				}
			}
		case o.EndpointSlice != nil:
			t.EndpointSlices++
			for _, ep := range o.EndpointSlice.Endpoints {
				t.Endpoints += int64(len(ep.Addresses))
			}
		}
	}
	return t
}

// churnMutations is how many mutations a churn step makes at most: its
// count, or its rate over its duration.
func churnMutations(c *ChurnStep) int {
	if c.Duration != nil {
		return int(math.Ceil(c.Rate * c.Duration.Seconds()))
	}
	return c.Count
}
