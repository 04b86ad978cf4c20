package node

import (
	"fmt"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// ReachabilityConnections is what a probe step makes to each Service port
// when no share test applies (fewer than two eligible endpoints, or
// session affinity) and the scenario sets no count.
const ReachabilityConnections = 100

// PlanConnections is the one place a probe step's connection count is
// worked out: the node plans the step it runs with it, and the
// orchestrator plans a step's conntrack load before anything is created.
// eligible holds, per Service port that takes a share test, its number of
// eligible endpoints. connections is the scenario's count (0: kpsim's,
// the count that gives the test powerFor names the designed power).
// The plan is nil when no Service port takes a share test.
func PlanConnections(alpha float64, connections int, powerFor string, eligible []int) (int, *reports.ProbePlan, error) {
	var shares [][]float64
	for _, k := range eligible {
		if k < 2 {
			continue
		}
		s := make([]float64, k)
		for i := range s {
			s[i] = 1 / float64(k)
		}
		shares = append(shares, s)
	}
	if len(shares) == 0 {
		if connections == 0 {
			connections = ReachabilityConnections
		}
		return connections, nil, nil
	}
	design := reports.DefaultProbeDesign()
	design.Alpha = alpha
	plan, err := reports.PlanProbes(design, shares)
	if err != nil {
		return 0, nil, fmt.Errorf("planning probes: %w", err)
	}
	if connections == 0 {
		switch powerFor {
		case scenarios.PowerForService:
			connections = plan.ServiceProbes
		case scenarios.PowerForPooled:
			connections = (plan.PooledProbes + plan.Services - 1) / plan.Services
		default:
			connections = plan.ProbesPerService
		}
	}
	return connections, &plan, nil
}
