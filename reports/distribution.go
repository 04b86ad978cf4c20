package reports

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// DistributionMethod says, for reports, how AnalyzeDistribution decides.
const DistributionMethod = "Pearson chi-square goodness of fit per service against the expected shares; " +
	"pooled Wald chi-square of counts by chain position across services; " +
	"family-wise alpha split in half between the per-service family (Holm) and the pooled test (Bonferroni)"

// Distribution verdicts.
const (
	// VerdictOK: the counts are consistent with the expected shares and
	// the rules imply them.
	VerdictOK = "ok"
	// VerdictSkewed: the counts reject the expected shares at the
	// family-wise level.
	VerdictSkewed = "skewed"
	// VerdictRules: the rules themselves imply shares that differ from the
	// expected ones by more than the tolerance, whatever the sample says.
	VerdictRules = "rules"
	// VerdictUntested: fewer than two endpoints can receive traffic, or
	// no probe was answered.
	VerdictUntested = "untested"
)

// ServiceSample is the input for one service port: its endpoints in chain
// order (the order of the iptables cascade or of the nft numgen map, so
// that a position means the same in every service), the shares the API
// state promises, optionally the shares the rules imply (from
// rules.ImpliedIPTables, ImpliedNFTables or ImpliedIPVS), and the replies
// counted.
type ServiceSample struct {
	Service   string
	Endpoints []string
	Expected  []float64
	// Implied may be nil when the rules were not parsed.
	Implied []float64
	Counts  []int
}

// DistributionOptions tunes AnalyzeDistribution; zero fields take the
// defaults.
type DistributionOptions struct {
	// Alpha is the family-wise false-alarm probability (default 0.01).
	Alpha float64
	// RuleTolerance is the largest relative difference between implied
	// and expected shares still counted as exact (default 1e-6): iptables
	// quantizes each branch probability to a multiple of 2⁻³¹, which
	// moves shares by about 1e-9 relative per branch.
	RuleTolerance float64
}

// DistributionReport is the distribution check of one mode.
type DistributionReport struct {
	Method        string  `json:"method"`
	Alpha         float64 `json:"alpha"`
	RuleTolerance float64 `json:"ruleTolerance"`
	// Services are the per-service tests, in input order.
	Services []ServiceDistribution `json:"services"`
	// Pooled is the test of counts pooled by chain position; nil when
	// fewer than two positions can be tested.
	Pooled *PooledDistribution `json:"pooled,omitempty"`
	// Flagged counts services whose verdict is skewed or rules.
	Flagged int  `json:"flagged"`
	Passed  bool `json:"passed"`
}

// EndpointDistribution is one endpoint of a service.
type EndpointDistribution struct {
	Endpoint string `json:"endpoint"`
	// Expected is the share promised by the API state (normalized).
	Expected float64 `json:"expected"`
	// Implied is the exact share the rules give it, when known.
	Implied *float64 `json:"implied,omitempty"`
	Count   int      `json:"count"`
}

// ServiceDistribution is the test of one service port.
type ServiceDistribution struct {
	Service   string                 `json:"service"`
	Endpoints []EndpointDistribution `json:"endpoints"`
	// Probes is N, the answered probes counted at the endpoints.
	Probes int `json:"probes"`
	// Statistic is Pearson's X² = Σ (O_i - N p_i)²/(N p_i) with DF = k - 1
	// (k endpoints with p_i > 0). A reply from an endpoint with p_i = 0
	// makes X² infinite, stored as math.MaxFloat64 (JSON has no infinity).
	Statistic float64 `json:"statistic"`
	DF        int     `json:"df"`
	// PValue is P(χ²_DF ≥ X²). AdjustedPValue is min(1, 2 · Holm-adjusted
	// p) within the per-service family: compare it with Alpha directly.
	PValue         float64 `json:"pValue"`
	AdjustedPValue float64 `json:"adjustedPValue"`
	// LargestDeviation is O_i/(N p_i) - 1 of largest magnitude: the
	// measured relative excess (positive) or shortfall, sampling error
	// included; LargestDeviationEndpoint names that endpoint.
	LargestDeviation         float64 `json:"largestDeviation"`
	LargestDeviationEndpoint string  `json:"largestDeviationEndpoint,omitempty"`
	// RuleError is max_i |implied_i/p_i - 1|: how far the rules
	// themselves are from the expected shares, free of sampling error;
	// nil when the implied shares are unknown.
	RuleError *float64 `json:"ruleError,omitempty"`
	Verdict   string   `json:"verdict"`
}

// PooledDistribution is the test of counts pooled by chain position.
type PooledDistribution struct {
	Positions []PositionDistribution `json:"positions"`
	// Services is how many services were pooled (tested ones without
	// replies from zero-share endpoints); Probes their answered probes.
	Services int `json:"services"`
	Probes   int `json:"probes"`
	// Statistic is the Wald statistic dᵀV⁺d of the position totals'
	// deviations d_j = Σ_s (O_sj - N_s p_sj) with covariance
	// V = Σ_s N_s (diag p_s - p_s p_sᵀ), DF = rank V. With identical
	// services it equals Pearson's X² of the position totals.
	Statistic float64 `json:"statistic"`
	DF        int     `json:"df"`
	PValue    float64 `json:"pValue"`
	// AdjustedPValue is min(1, 2 p) (the pooled half of alpha).
	AdjustedPValue float64 `json:"adjustedPValue"`
	// LargestDeviation is O_j/E_j - 1 of largest magnitude, at position
	// LargestDeviationPosition.
	LargestDeviation         float64 `json:"largestDeviation"`
	LargestDeviationPosition int     `json:"largestDeviationPosition"`
	Verdict                  string  `json:"verdict"`
}

// PositionDistribution is one chain position, pooled over services.
type PositionDistribution struct {
	Position int `json:"position"`
	// Expected is Σ_s N_s p_sj, in probes.
	Expected float64 `json:"expected"`
	Count    int     `json:"count"`
}

// AnalyzeDistribution tests every sample and the pooled positions.
//
// False alarms are controlled with Holm's step-down method, not
// Benjamini-Hochberg: the check is a pass/fail gate, so what must be
// bounded is the probability of any false alarm in the run (family-wise
// error), which Holm bounds under any dependence between services; BH
// bounds only the expected share of false alarms among the flagged
// services, which allows a failing run by chance far more often than
// alpha when most services are fine. Holm is uniformly more powerful than
// Bonferroni. Alpha is split in half between the per-service family and
// the pooled test (union bound), the split PlanProbes designs for.
func AnalyzeDistribution(samples []ServiceSample, opts DistributionOptions) (*DistributionReport, error) {
	if opts.Alpha == 0 {
		opts.Alpha = 0.01
	}
	if opts.RuleTolerance == 0 {
		opts.RuleTolerance = 1e-6
	}
	if opts.Alpha <= 0 || opts.Alpha >= 1 {
		return nil, fmt.Errorf("alpha %v not in (0, 1)", opts.Alpha)
	}
	rep := &DistributionReport{Method: DistributionMethod, Alpha: opts.Alpha, RuleTolerance: opts.RuleTolerance, Passed: true}
	var (
		tested []int // indexes into rep.Services of tested services
		ps     []float64
		pooled []int // indexes into samples pooled by position
		shares = make([][]float64, len(samples))
	)
	for i, s := range samples {
		sd, p, err := analyzeService(s, opts.RuleTolerance)
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Service, err)
		}
		shares[i] = p
		rep.Services = append(rep.Services, sd)
		if sd.Verdict == VerdictUntested {
			continue
		}
		tested = append(tested, i)
		ps = append(ps, sd.PValue)
		if sd.Statistic != math.MaxFloat64 {
			pooled = append(pooled, i)
		}
	}
	for r, a := range Holm(ps) {
		sd := &rep.Services[tested[r]]
		sd.AdjustedPValue = math.Min(1, 2*a)
		if sd.AdjustedPValue <= opts.Alpha && sd.Verdict == VerdictOK {
			sd.Verdict = VerdictSkewed
		}
	}
	for _, sd := range rep.Services {
		if sd.Verdict == VerdictSkewed || sd.Verdict == VerdictRules {
			rep.Flagged++
			rep.Passed = false
		}
	}
	pd, err := analyzePooled(samples, shares, pooled)
	if err != nil {
		return nil, err
	}
	if pd != nil {
		pd.AdjustedPValue = math.Min(1, 2*pd.PValue)
		if pd.AdjustedPValue <= opts.Alpha {
			pd.Verdict = VerdictSkewed
			rep.Passed = false
		}
		rep.Pooled = pd
	}
	return rep, nil
}

// analyzeService runs the per-service test; the verdict is ok, rules or
// untested (skewed is decided after the correction). It also returns the
// normalized expected shares.
func analyzeService(s ServiceSample, tol float64) (ServiceDistribution, []float64, error) {
	k := len(s.Endpoints)
	if len(s.Expected) != k || len(s.Counts) != k || (s.Implied != nil && len(s.Implied) != k) {
		return ServiceDistribution{}, nil, fmt.Errorf("%d endpoints, %d expected shares, %d implied shares, %d counts: want the same number",
			k, len(s.Expected), len(s.Implied), len(s.Counts))
	}
	p, err := normalize(s.Expected)
	if err != nil {
		return ServiceDistribution{}, nil, fmt.Errorf("expected shares: %w", err)
	}
	stat, df, pv, err := PearsonChiSquare(s.Counts, p)
	if err != nil {
		return ServiceDistribution{}, nil, err
	}
	sd := ServiceDistribution{Service: s.Service, Statistic: finite(stat), DF: df, PValue: pv, AdjustedPValue: 1, Verdict: VerdictOK}
	for i, c := range s.Counts {
		sd.Probes += c
		ed := EndpointDistribution{Endpoint: s.Endpoints[i], Expected: p[i], Count: c}
		if s.Implied != nil {
			v := s.Implied[i]
			ed.Implied = &v
		}
		sd.Endpoints = append(sd.Endpoints, ed)
	}
	for i, c := range s.Counts {
		if sd.Probes == 0 {
			break
		}
		var dev float64
		switch {
		case p[i] > 0:
			dev = float64(c)/(float64(sd.Probes)*p[i]) - 1
		case c > 0:
			dev = math.MaxFloat64
		}
		if math.Abs(dev) > math.Abs(sd.LargestDeviation) {
			sd.LargestDeviation, sd.LargestDeviationEndpoint = dev, s.Endpoints[i]
		}
	}
	if s.Implied != nil {
		re := 0.0
		for i, q := range s.Implied {
			switch {
			case p[i] > 0:
				re = math.Max(re, math.Abs(q/p[i]-1))
			case q > 0:
				re = math.MaxFloat64
			}
		}
		sd.RuleError = &re
		if re > tol {
			sd.Verdict = VerdictRules
		}
	}
	if sd.Verdict == VerdictOK && (sd.Probes == 0 || (df == 0 && pv == 1)) {
		sd.Verdict = VerdictUntested
	}
	return sd, p, nil
}

// analyzePooled pools the counts of samples[idx] by chain position.
func analyzePooled(samples []ServiceSample, shares [][]float64, idx []int) (*PooledDistribution, error) {
	width := 0
	for _, i := range idx {
		width = max(width, len(shares[i]))
	}
	if width < 2 {
		return nil, nil
	}
	pd := &PooledDistribution{Services: len(idx), Verdict: VerdictOK}
	exp := make([]float64, width)
	obs := make([]int, width)
	n := make([]float64, len(idx))
	ps := make([][]float64, len(idx))
	for r, i := range idx {
		for _, c := range samples[i].Counts {
			n[r] += float64(c)
		}
		ps[r] = shares[i]
		pd.Probes += int(n[r])
		for j, c := range samples[i].Counts {
			obs[j] += c
			exp[j] += n[r] * shares[i][j]
		}
	}
	dev := make([]float64, width)
	for j := range width {
		dev[j] = float64(obs[j]) - exp[j]
		pd.Positions = append(pd.Positions, PositionDistribution{Position: j, Expected: exp[j], Count: obs[j]})
		if exp[j] > 0 {
			if d := float64(obs[j])/exp[j] - 1; math.Abs(d) > math.Abs(pd.LargestDeviation) {
				pd.LargestDeviation, pd.LargestDeviationPosition = d, j
			}
		}
	}
	w, rank, err := waldStatistic(dev, pooledCovariance(ps, n, width))
	if err != nil {
		return nil, err
	}
	if rank < 1 {
		return nil, nil
	}
	pd.Statistic, pd.DF = w, rank
	pd.PValue = ChiSquaredSurvival(rank, w)
	return pd, nil
}

// ChiSquaredSurvival returns P(χ²_df ≥ x).
func ChiSquaredSurvival(df int, x float64) float64 {
	if df < 1 {
		return math.NaN()
	}
	return distuv.ChiSquared{K: float64(df)}.Survival(x)
}

// finite maps +Inf to math.MaxFloat64 for JSON.
func finite(x float64) float64 {
	if math.IsInf(x, 1) {
		return math.MaxFloat64
	}
	return x
}
