package node

import (
	"slices"
	"testing"

	"github.com/kpsim/kpsim/scenarios"
)

// TestPlanConnectionsPowerFor: an automatic count gives the test powerFor
// names at least the designed power, and no more connections than that
// test needs; both takes the larger need.
func TestPlanConnectionsPowerFor(t *testing.T) {
	eligible := slices.Repeat([]int{10}, 20) // 2000x10's probe step: 20 Services of 10
	const alpha = 0.01
	counts := map[string]int{}
	for _, pf := range []string{scenarios.PowerForService, scenarios.PowerForPooled, scenarios.PowerForBoth} {
		n, plan, err := PlanConnections(alpha, 0, pf, eligible)
		if err != nil || plan == nil {
			t.Fatalf("%s: plan %v, err %v", pf, plan, err)
		}
		counts[pf] = n
		service, pooled := plan.PowerAt(n)
		switch pf {
		case scenarios.PowerForService:
			if service < 0.9 || n != plan.ServiceProbes {
				t.Errorf("service: %d connections (plan %d) give power %.3f", n, plan.ServiceProbes, service)
			}
		case scenarios.PowerForPooled:
			if pooled < 0.9 || n*plan.Services < plan.PooledProbes || (n-1)*plan.Services >= plan.PooledProbes {
				t.Errorf("pooled: %d connections x %d Services (plan %d in all) give power %.3f", n, plan.Services, plan.PooledProbes, pooled)
			}
		default:
			if service < 0.9 || pooled < 0.9 {
				t.Errorf("both: %d connections give powers %.3f and %.3f", n, service, pooled)
			}
		}
	}
	if counts[scenarios.PowerForBoth] != max(counts[scenarios.PowerForService], counts[scenarios.PowerForPooled]) {
		t.Errorf("both = %d, want the larger of %v", counts[scenarios.PowerForBoth], counts)
	}
	// 2000x10's per-Service design asks thousands, far fewer than pooled.
	if s, p := counts[scenarios.PowerForService], counts[scenarios.PowerForPooled]; s < 1000 || s*3 > p {
		t.Errorf("service %d, pooled %d: want thousands, and pooled several times as many", s, p)
	}
	// A set count is kept whatever powerFor says.
	if n, _, _ := PlanConnections(alpha, 2000, scenarios.PowerForService, eligible); n != 2000 {
		t.Errorf("set count: %d, want 2000", n)
	}
	t.Logf("connections per Service: %v", counts)
}
