package scenarios

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The conntrack budget of probes.
//
// Every probe connection makes one conntrack entry in the node's
// namespace. The prober flushes that table only between batches of
// ProbeConntrackBatch connections to one Service port, never between
// Service ports or steps, so entries add up across a step's Services and
// across steps until a flush. A reset TCP connection's entry lives 10 s
// (nf_conntrack_tcp_timeout_close), a UDP exchange's 30 s; the budget
// counts none of them as expired, because how many do depends on the
// probe rate, which only the run knows.
//
// The kernel compares each namespace's entry count with the global
// nf_conntrack_max (read-only inside a namespace). Probes get half of it:
// the hash table it sizes is shared with the host's own connections and
// any other namespace, and the end-to-end latency probes of churn steps
// (small, not counted here) land in the same table. A full table drops new
// connections unless it can evict a closed one, and says so in the host's
// kernel log.
const (
	// DefaultConntrackMax is nf_conntrack_max where it cannot be read: the
	// kernel's largest automatic size (machines with more than 4 GiB).
	// Validation checks against it; kpsim run against the real value.
	DefaultConntrackMax = 262144
	// ProbeConntrackBatch is how many connections to one Service port
	// the prober makes between conntrack flushes: the default of
	// netns.ProbeSpec.ConntrackBatch, which kpsim run uses.
	ProbeConntrackBatch = 20000
)

// ConntrackBudget is how many entries probes may hold at once under
// nf_conntrack_max max.
func ConntrackBudget(max int64) int64 { return max / 2 }

// ProbeLoad is the conntrack load of one probe step: Targets Service
// ports probed one after another, Connections to each.
type ProbeLoad struct {
	// Step is the index in spec.steps.
	Step int
	// Targets is how many Service ports the step probes, at most.
	Targets int
	// Connections to each; Auto when the scenario leaves it to the power
	// calculation.
	Connections int
	Auto        bool
}

// ProbeLoads returns the scenario's probe steps, in order. auto gives the
// connections of a step whose count is automatic (0) for the given number
// of Services and endpoints per Service; nil leaves them at 0.
func (s *Scenario) ProbeLoads(auto func(p *ProbeStep, services, endpoints int) int) []ProbeLoad {
	grown := map[string]int{} // Services created by churn so far, by group
	var out []ProbeLoad
	for i, st := range s.Spec.Steps {
		if c := st.Churn; c != nil && c.Action == ChurnCreateServices {
			grown[c.Group] += churnMutations(c)
		}
		p := st.Probe
		if p == nil {
			continue
		}
		var services, targets, maxPorts, maxEndpoints int
		for _, g := range s.Spec.ServiceGroups {
			if (p.Group != "" && g.Name != p.Group) || g.Headless {
				continue
			}
			n := g.Count + grown[g.Name]
			services += n
			targets += n * max(len(g.Ports), 1)
			maxPorts = max(maxPorts, len(g.Ports), 1)
			if g.Endpoints != nil {
				maxEndpoints = max(maxEndpoints, g.Endpoints.Max)
			}
		}
		if p.Services > 0 && p.Services < services {
			services = p.Services
			targets = min(targets, p.Services*maxPorts)
		}
		l := ProbeLoad{Step: i, Targets: targets, Connections: p.Connections}
		if p.Connections == 0 {
			l.Auto = true
			if auto != nil {
				l.Connections = auto(p, services, maxEndpoints)
			}
		}
		out = append(out, l)
	}
	return out
}

// ConntrackPeak is the most entries the loads hold at once with the
// prober's flushes every batch connections to one target, and the index
// (into loads) of the first load that reaches it.
func ConntrackPeak(loads []ProbeLoad, batch int) (peak int64, at int) {
	var live int64
	at = -1
	for i, l := range loads {
		c := int64(l.Connections)
		b := int64(batch)
		for range l.Targets {
			if c <= b {
				live += c
			} else {
				// A flush before every batch after the first: the first
				// batch sits on what was there, the last one is left.
				if live+b > peak {
					peak, at = live+b, i
				}
				live = c - b*((c-1)/b)
			}
			if live > peak {
				peak, at = live, i
			}
		}
	}
	return peak, at
}

// ConntrackMisfit says which probe step takes the probes past a budget.
type ConntrackMisfit struct {
	// Load is the first probe step past the budget.
	Load ProbeLoad
	// Peak is the most entries the scenario's probes hold at once.
	Peak int64
	// Largest is the largest connections of that step that fits, the
	// other steps unchanged.
	Largest int
}

// CheckConntrack returns the first probe step that takes the loads past
// the budget, if any.
func CheckConntrack(loads []ProbeLoad, budget int64, batch int) (ConntrackMisfit, bool) {
	peak, at := ConntrackPeak(loads, batch)
	if peak <= budget {
		return ConntrackMisfit{}, true
	}
	// The first load past the budget: the loads before it fit.
	first := at
	for i := range loads {
		if p, _ := ConntrackPeak(loads[:i+1], batch); p > budget {
			first = i
			break
		}
	}
	l := loads[first]
	// Steps after it are judged once it fits.
	try := make([]ProbeLoad, first+1)
	copy(try, loads)
	peak, _ = ConntrackPeak(try, batch)
	// Up to one batch no flush happens in the step, so the peak grows
	// with its connections and a binary search finds the largest fit.
	largest := sort.Search(min(l.Connections, batch)+1, func(x int) bool {
		try[first].Connections = x
		p, _ := ConntrackPeak(try, batch)
		return p > budget
	}) - 1
	return ConntrackMisfit{Load: l, Peak: peak, Largest: max(largest, 0)}, false
}

// Error describes the misfit for the step's field path.
func (m ConntrackMisfit) Error(steps *field.Path, conntrackMax int64, where string) *field.Error {
	what := fmt.Sprintf("%d connections to each of up to %d Service ports", m.Load.Connections, m.Load.Targets)
	if m.Load.Auto {
		what = fmt.Sprintf("automatic count: %d connections to each of up to %d Service ports", m.Load.Connections, m.Load.Targets)
	}
	return field.Invalid(steps.Index(m.Load.Step).Child("probe", "connections"), m.Load.Connections,
		fmt.Sprintf("%s: the probes would hold up to %d conntrack entries in the node's namespace at once (no flush between Service ports or steps, only every %d connections to one port), over the budget of %d, half of nf_conntrack_max %d %s; the largest connections for this step that fits is %d (or probe fewer Services)",
			what, m.Peak, ProbeConntrackBatch, ConntrackBudget(conntrackMax), conntrackMax, where, m.Largest))
}

// conntrack refuses probes that exceed the budget under the kernel's
// default nf_conntrack_max; steps with an automatic count are checked by
// kpsim run, which knows it.
func (v *validator) conntrack(spec *field.Path) field.ErrorList {
	m, ok := CheckConntrack(v.s.ProbeLoads(nil), ConntrackBudget(DefaultConntrackMax), ProbeConntrackBatch)
	if ok {
		return nil
	}
	return field.ErrorList{m.Error(spec.Child("steps"), DefaultConntrackMax, "(the kernel's default on machines over 4 GiB)")}
}

// Size is what a scenario's cluster can grow to: what a node's memory
// scales with. It is the part of Counts().Peak the memory estimate reads.
type Size struct {
	Services int
	// Endpoints is the endpoint addresses (each group at its largest
	// endpoints per Service, plus scale-ups, plus literal slices).
	Endpoints int64
	// EndpointSlices is the slices of the Services (100 endpoints each).
	EndpointSlices int64
}

// Size returns what the scenario can grow to (Counts().Peak, as the
// capacity check counts it).
func (s *Scenario) Size() Size {
	p := s.peak()
	return Size{Services: p.Services, Endpoints: p.Endpoints, EndpointSlices: p.EndpointSlices}
}
