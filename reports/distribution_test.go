package reports

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// sampler draws multinomial counts from a seeded source.
type sampler struct{ src rand.Source }

func newSampler(seed uint64) *sampler {
	return &sampler{src: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
}

// multinomial draws n probes over shares p as a chain of binomials,
// count_i ~ Bin(n - Σ_{j<i} count_j, p_i / (1 - Σ_{j<i} p_j)), which is
// exact and O(k) per draw.
func (s *sampler) multinomial(n int, p []float64) []int {
	counts := make([]int, len(p))
	left, rest := n, 1.0
	for i, pi := range p {
		if left == 0 {
			break
		}
		if i == len(p)-1 || rest <= pi {
			counts[i] = left
			break
		}
		c := int(distuv.Binomial{N: float64(left), P: math.Min(1, pi/rest), Src: s.src}.Rand())
		counts[i] = c
		left -= c
		rest -= pi
	}
	return counts
}

// fleet returns m services of k equal shares, with the given skews applied
// to the true shares: every service's position pooledPos gets
// pooledExcess (if > 0), then service skewSvc's position skewPos gets
// serviceExcess (if > 0).
type skews struct {
	pooledPos     int
	pooledExcess  float64
	skewSvc       int
	skewPos       int
	serviceExcess float64
}

func fleet(t testing.TB, m, k int, sk skews) (expected, truth [][]float64) {
	for s := range m {
		p := uniform(k)
		q := p
		var err error
		if sk.pooledExcess > 0 {
			if q, err = SkewedShares(q, sk.pooledPos, sk.pooledExcess); err != nil {
				t.Fatal(err)
			}
		}
		if sk.serviceExcess > 0 && s == sk.skewSvc {
			if q, err = SkewedShares(q, sk.skewPos, sk.serviceExcess); err != nil {
				t.Fatal(err)
			}
		}
		expected = append(expected, p)
		truth = append(truth, q)
	}
	return expected, truth
}

func (s *sampler) samples(n int, expected, truth [][]float64) []ServiceSample {
	out := make([]ServiceSample, len(expected))
	for i := range expected {
		eps := make([]string, len(expected[i]))
		for j := range eps {
			eps[j] = fmt.Sprintf("10.244.%d.%d:8080", i, j+10)
		}
		out[i] = ServiceSample{Service: fmt.Sprintf("default/svc%d:http", i), Endpoints: eps, Expected: expected[i], Counts: s.multinomial(n, truth[i])}
	}
	return out
}

func TestAnalyzeDistributionDeliberateSkew(t *testing.T) {
	const m, k = 10, 10
	base, _ := fleet(t, m, k, skews{})
	plan, err := PlanProbes(DefaultProbeDesign(), base)
	if err != nil {
		t.Fatal(err)
	}
	n := plan.ProbesPerService
	smp := newSampler(42)

	// Unskewed: nothing is flagged.
	rep, err := AnalyzeDistribution(smp.samples(n, base, base), DistributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || rep.Flagged != 0 || rep.Pooled == nil || rep.Pooled.Verdict != VerdictOK {
		t.Errorf("unskewed run flagged: passed %v flagged %d pooled %+v", rep.Passed, rep.Flagged, rep.Pooled)
	}

	// One endpoint of service 3 at +20% and position 0 at +2% everywhere.
	exp, truth := fleet(t, m, k, skews{pooledPos: 0, pooledExcess: 0.02, skewSvc: 3, skewPos: 5, serviceExcess: 0.2})
	rep, err = AnalyzeDistribution(smp.samples(n, exp, truth), DistributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed {
		t.Error("skewed run passed")
	}
	for i, sd := range rep.Services {
		want := VerdictOK
		if i == 3 {
			want = VerdictSkewed
		}
		if sd.Verdict != want {
			t.Errorf("service %d: verdict %s (adjusted p %g), want %s", i, sd.Verdict, sd.AdjustedPValue, want)
		}
	}
	if sd := rep.Services[3]; sd.LargestDeviationEndpoint != "10.244.3.15:8080" || math.Abs(sd.LargestDeviation-0.2) > 0.06 {
		t.Errorf("service 3 largest deviation %v at %s, want about +0.2 at 10.244.3.15:8080", sd.LargestDeviation, sd.LargestDeviationEndpoint)
	}
	if p := rep.Pooled; p == nil || p.Verdict != VerdictSkewed || p.DF != k-1 {
		t.Errorf("pooled: %+v, want skewed with df %d", p, k-1)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report does not encode: %v", err)
	}
}

func TestAnalyzeDistributionVerdicts(t *testing.T) {
	implied := []float64{0.5, 0.5}
	bad := []float64{0.6, 0.4}
	rep, err := AnalyzeDistribution([]ServiceSample{
		{Service: "a", Endpoints: []string{"x", "y"}, Expected: []float64{1, 1}, Implied: implied, Counts: []int{500, 510}},
		{Service: "rules", Endpoints: []string{"x", "y"}, Expected: []float64{1, 1}, Implied: bad, Counts: []int{500, 510}},
		{Service: "one", Endpoints: []string{"x"}, Expected: []float64{1}, Counts: []int{100}},
		{Service: "zero-share hit", Endpoints: []string{"x", "y", "z"}, Expected: []float64{1, 1, 0}, Counts: []int{50, 50, 1}},
		{Service: "no replies", Endpoints: []string{"x", "y"}, Expected: []float64{1, 1}, Counts: []int{0, 0}},
	}, DistributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{VerdictOK, VerdictRules, VerdictUntested, VerdictSkewed, VerdictUntested}
	for i, sd := range rep.Services {
		if sd.Verdict != want[i] {
			t.Errorf("%s: verdict %s, want %s", sd.Service, sd.Verdict, want[i])
		}
	}
	if re := rep.Services[1].RuleError; re == nil || math.Abs(*re-0.2) > 1e-12 {
		t.Errorf("rule error %v, want 0.2", re)
	}
	if rep.Flagged != 2 || rep.Passed {
		t.Errorf("flagged %d passed %v, want 2 false", rep.Flagged, rep.Passed)
	}
	if rep.Services[3].Statistic != math.MaxFloat64 {
		t.Errorf("zero-share hit statistic %v", rep.Services[3].Statistic)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report does not encode: %v", err)
	}
	if _, err := AnalyzeDistribution([]ServiceSample{{Service: "bad", Endpoints: []string{"x"}, Expected: []float64{1, 1}, Counts: []int{1}}}, DistributionOptions{}); err == nil {
		t.Error("length mismatch accepted")
	}
}

// With identical services the pooled Wald statistic is Pearson's X² of
// the position totals.
func TestPooledEqualsPearsonForIdenticalServices(t *testing.T) {
	smp := newSampler(7)
	exp, truth := fleet(t, 5, 4, skews{})
	ss := smp.samples(1000, exp, truth)
	rep, err := AnalyzeDistribution(ss, DistributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tot := make([]int, 4)
	for _, s := range ss {
		for j, c := range s.Counts {
			tot[j] += c
		}
	}
	x2, df, p, _ := PearsonChiSquare(tot, uniform(4))
	near(t, "pooled statistic", rep.Pooled.Statistic, x2, 1e-9)
	near(t, "pooled p", rep.Pooled.PValue, p, 1e-12)
	if rep.Pooled.DF != df {
		t.Errorf("pooled df %d, want %d", rep.Pooled.DF, df)
	}
}
