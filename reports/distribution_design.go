package reports

import (
	"errors"
	"fmt"
)

// ProbeDesign is what the distribution check must be able to see: the
// smallest skews worth detecting, with what power, at what family-wise
// false-alarm rate.
type ProbeDesign struct {
	// Alpha is the family-wise false-alarm probability of the whole check
	// (every per-service test and the pooled test together).
	Alpha float64 `json:"alpha"`
	// Power is the probability of flagging each designed skew.
	Power float64 `json:"power"`
	// ServiceExcess is skew (a): one endpoint of one service receives this
	// relative excess over its share (0.2 = 20% more).
	ServiceExcess float64 `json:"serviceExcess"`
	// PooledExcess is skew (b): the endpoint at one chain position receives
	// this relative excess in every service. A biased probability cascade
	// (iptables statistic thresholds, nft numgen) errs by position, so
	// pooling counts by position detects it with far fewer probes per
	// service than testing each service alone.
	PooledExcess float64 `json:"pooledExcess"`
}

// DefaultProbeDesign is the design: power 0.9 at family-wise alpha
// 0.01 for (a) a 20% excess on one endpoint of a service and (b) a 2%
// excess at one chain position in every service.
func DefaultProbeDesign() ProbeDesign {
	return ProbeDesign{Alpha: 0.01, Power: 0.9, ServiceExcess: 0.2, PooledExcess: 0.02}
}

// ProbePlan is the probe count a ProbeDesign needs for a set of services.
//
// The family-wise alpha is split by Bonferroni between two families, half
// each: the per-service tests (Holm within the family, so each test is
// designed at the Bonferroni level Alpha/2/m, Holm's first step and a
// lower bound of its power) and the pooled-position test (Alpha/2). The
// union bound keeps the whole check's false-alarm probability ≤ Alpha.
type ProbePlan struct {
	Design ProbeDesign `json:"design"`
	// Services is m, the number of services tested.
	Services int `json:"services"`
	// ServiceAlpha = Alpha/2/m and PooledAlpha = Alpha/2 are the levels
	// the two skews are designed at.
	ServiceAlpha float64 `json:"serviceAlpha"`
	PooledAlpha  float64 `json:"pooledAlpha"`
	// ServiceProbes is skew (a)'s need: probes per service so that the
	// hardest service and position (smallest noncentrality) is flagged
	// with the designed power.
	ServiceProbes int `json:"serviceProbes"`
	// PooledProbes is skew (b)'s need: probes in all, spread evenly over
	// the services, for the hardest position.
	PooledProbes int `json:"pooledProbes"`
	// ProbesPerService = max(ServiceProbes, ⌈PooledProbes/m⌉) meets both.
	ProbesPerService int `json:"probesPerService"`
	// ServicePower and PooledPower are the designed powers at
	// ProbesPerService (at least Design.Power).
	ServicePower float64 `json:"servicePower"`
	PooledPower  float64 `json:"pooledPower"`

	serviceCurve, pooledCurve PowerCurve
}

// PlanProbes computes the probes each service needs. shares holds each
// tested service's expected shares, endpoints in chain order.
//
// Skew (a): for service s and each position j, q = SkewedShares(p_s, j,
// ServiceExcess); the smallest n with power ≥ Power for Pearson's test at
// ServiceAlpha (ServicePowerCurve); the largest n over positions and
// services.
//
// Skew (b): every service's position j gets PooledExcess. With n probes
// per service the position totals deviate by n·Σ_s (q_s - p_s), the pooled
// Wald statistic uses V⁺, V = n Σ_s (diag p_s - p_s p_sᵀ), df = rank V
// (pooledPowerCurve); the hardest position sets n and PooledProbes = n·m.
// With m identical services of k equal shares the noncentrality is
// n·m·r²/(k-1), the same as one service with n·m probes.
//
// Both use PowerCurve (the Liu-Tang-Zhang noncentral chi-square
// approximation of the statistic under the skew), not the local shortcut
// λ = N·Σ(q-p)²/p, which overstates power for the 20% skew.
func PlanProbes(d ProbeDesign, shares [][]float64) (ProbePlan, error) {
	switch {
	case d.Alpha <= 0 || d.Alpha >= 1:
		return ProbePlan{}, fmt.Errorf("alpha %v not in (0, 1)", d.Alpha)
	case d.Power <= 0 || d.Power >= 1:
		return ProbePlan{}, fmt.Errorf("power %v not in (0, 1)", d.Power)
	case d.ServiceExcess <= 0 || d.PooledExcess <= 0:
		return ProbePlan{}, errors.New("excesses must be positive")
	}
	ps := make([][]float64, 0, len(shares))
	for s, sh := range shares {
		p, err := normalize(sh)
		if err != nil {
			return ProbePlan{}, fmt.Errorf("service %d: %w", s, err)
		}
		if positive(p) >= 2 {
			ps = append(ps, p)
		}
	}
	m := len(ps)
	if m == 0 {
		return ProbePlan{}, errors.New("no service with two or more endpoints to test")
	}
	plan := ProbePlan{Design: d, Services: m, ServiceAlpha: d.Alpha / 2 / float64(m), PooledAlpha: d.Alpha / 2}

	// (a) Identical share vectors are common (every service with k equal
	// shares), so needs are cached by share vector.
	type need struct {
		n     int
		curve PowerCurve
	}
	cache := map[string]need{}
	var worstA PowerCurve
	for s, p := range ps {
		key := fmt.Sprint(p)
		nd, ok := cache[key]
		if !ok {
			for j := range p {
				q, err := SkewedShares(p, j, d.ServiceExcess)
				if err != nil {
					continue
				}
				pc, err := ServicePowerCurve(p, q, plan.ServiceAlpha)
				if err != nil {
					return ProbePlan{}, fmt.Errorf("service %d: %w", s, err)
				}
				n, err := ProbesForPower(pc.Power, d.Power)
				if err != nil {
					return ProbePlan{}, fmt.Errorf("service %d position %d: %w", s, j, err)
				}
				if n > nd.n {
					nd = need{n, pc}
				}
			}
			if nd.n == 0 {
				return ProbePlan{}, fmt.Errorf("service %d: no endpoint can take a %v excess", s, d.ServiceExcess)
			}
			cache[key] = nd
		}
		if nd.n > plan.ServiceProbes {
			plan.ServiceProbes, worstA = nd.n, nd.curve
		}
	}

	// (b) n probes per service, the hardest position.
	width := 0
	for _, p := range ps {
		width = max(width, len(p))
	}
	var (
		worstB PowerCurve
		perSvc int
	)
	for j := range width {
		qs := make([][]float64, m)
		found := false
		for s, p := range ps {
			qs[s] = p
			if j >= len(p) {
				continue
			}
			if q, err := SkewedShares(p, j, d.PooledExcess); err == nil {
				qs[s], found = q, true
			}
		}
		if !found {
			continue
		}
		pc, err := pooledPowerCurve(ps, qs, width, plan.PooledAlpha)
		if err != nil {
			return ProbePlan{}, fmt.Errorf("pooled position %d: %w", j, err)
		}
		n, err := ProbesForPower(pc.Power, d.Power)
		if err != nil {
			return ProbePlan{}, fmt.Errorf("pooled position %d: %w", j, err)
		}
		if n > perSvc {
			perSvc, worstB = n, pc
		}
	}
	if perSvc == 0 {
		return ProbePlan{}, errors.New("no chain position can take the pooled excess")
	}
	plan.PooledProbes = perSvc * m
	plan.ProbesPerService = max(plan.ServiceProbes, perSvc)
	plan.serviceCurve, plan.pooledCurve = worstA, worstB
	plan.ServicePower, plan.PooledPower = plan.PowerAt(plan.ProbesPerService)
	return plan, nil
}

// PowerAt returns the designed skews' power (hardest service and
// position) when every service gets n probes instead of the planned
// count: what a scenario that fixes its probe count can detect.
func (p ProbePlan) PowerAt(n int) (service, pooled float64) {
	if p.serviceCurve.DF == 0 || p.pooledCurve.DF == 0 {
		return 0, 0
	}
	return p.serviceCurve.Power(float64(n)), p.pooledCurve.Power(float64(n))
}

// positive counts the shares above zero.
func positive(p []float64) int {
	n := 0
	for _, x := range p {
		if x > 0 {
			n++
		}
	}
	return n
}
