package reports

import (
	"math"
	"testing"
)

// The self-check: seeded synthetic multinomial trials (pure math, no
// network) measure the false-alarm rate and the power of the whole
// analysis at the designed probe counts, and compare the power with the
// noncentral chi-square design. With a fixed seed the result is
// deterministic; the margins are three binomial standard errors
// sqrt(π(1-π)/T) so the assertions hold for any reasonable seed too.

const trials = 5000

// margin is three binomial standard errors of a rate pi over trials.
func margin(pi float64) float64 { return 3 * math.Sqrt(pi*(1-pi)/trials) }

// selfCheckFleet is 10 services of 10 equal shares.
const selfCheckServices, selfCheckEndpoints = 10, 10

func selfCheckPlan(t *testing.T) ProbePlan {
	t.Helper()
	base, _ := fleet(t, selfCheckServices, selfCheckEndpoints, skews{})
	plan, err := PlanProbes(DefaultProbeDesign(), base)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// runTrials returns the share of trials in which flagged(report) holds.
func runTrials(t *testing.T, seed uint64, n int, sk skews, flagged func(*DistributionReport) bool) float64 {
	t.Helper()
	smp := newSampler(seed)
	exp, truth := fleet(t, selfCheckServices, selfCheckEndpoints, sk)
	hits := 0
	for range trials {
		rep, err := AnalyzeDistribution(smp.samples(n, exp, truth), DistributionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if flagged(rep) {
			hits++
		}
	}
	return float64(hits) / trials
}

func TestSelfCheckFalseAlarmRate(t *testing.T) {
	plan := selfCheckPlan(t)
	alpha := plan.Design.Alpha
	// Under the null, at the probe count the plan asks for and at a small
	// one (where the chi-square approximation is weakest).
	for _, n := range []int{plan.ProbesPerService, 200} {
		rate := runTrials(t, 1, n, skews{}, func(r *DistributionReport) bool { return !r.Passed })
		t.Logf("false alarms, %d services x %d probes: %.4f in %d trials (alpha %v)", selfCheckServices, n, rate, trials, alpha)
		if rate > alpha+margin(alpha) {
			t.Errorf("n=%d: family-wise false-alarm rate %.4f above alpha %v + %.4f", n, rate, alpha, margin(alpha))
		}
	}
}

func TestSelfCheckServicePower(t *testing.T) {
	plan := selfCheckPlan(t)
	// Skew (a) alone, at the probes it alone needs: one endpoint of one
	// service at +20%.
	n := plan.ServiceProbes
	rate := runTrials(t, 2, n, skews{skewSvc: 4, skewPos: 7, serviceExcess: plan.Design.ServiceExcess}, func(r *DistributionReport) bool {
		return r.Services[4].Verdict == VerdictSkewed
	})
	q, _ := SkewedShares(uniform(selfCheckEndpoints), 7, plan.Design.ServiceExcess)
	pc, err := ServicePowerCurve(uniform(selfCheckEndpoints), q, plan.ServiceAlpha)
	if err != nil {
		t.Fatal(err)
	}
	designed := pc.Power(float64(n))
	t.Logf("skew (a): %d probes per service: measured power %.4f, designed %.4f", n, rate, designed)
	checkPower(t, rate, designed, plan.Design.Power)
}

func TestSelfCheckPooledPower(t *testing.T) {
	plan := selfCheckPlan(t)
	// Skew (b) alone, at the probes it alone needs: position 2 at +2% in
	// every service.
	n := plan.PooledProbes / selfCheckServices
	rate := runTrials(t, 3, n, skews{pooledPos: 2, pooledExcess: plan.Design.PooledExcess}, func(r *DistributionReport) bool {
		return r.Pooled != nil && r.Pooled.Verdict == VerdictSkewed
	})
	q, _ := SkewedShares(uniform(selfCheckEndpoints), 2, plan.Design.PooledExcess)
	// Identical services: the pooled test is one service's test with all
	// the probes.
	pc, err := ServicePowerCurve(uniform(selfCheckEndpoints), q, plan.PooledAlpha)
	if err != nil {
		t.Fatal(err)
	}
	designed := pc.Power(float64(n * selfCheckServices))
	t.Logf("skew (b): %d probes in all: measured power %.4f, designed %.4f", n*selfCheckServices, rate, designed)
	checkPower(t, rate, designed, plan.Design.Power)
}

// checkPower asserts that the measured power meets the design (within the
// sampling margin) and agrees with the noncentral chi-square formula.
func checkPower(t *testing.T, measured, designed, target float64) {
	t.Helper()
	if measured < target-margin(target) {
		t.Errorf("measured power %.4f below %v - %.4f", measured, target, margin(target))
	}
	if math.Abs(measured-designed) > margin(designed)+0.01 {
		t.Errorf("measured power %.4f disagrees with the designed %.4f (margin %.4f + 0.01 for the approximation)", measured, designed, margin(designed))
	}
}

// The pooled Wald test stays calibrated when services differ in endpoint
// count and shares (where Pearson's X² of the raw position totals would
// not be χ²): its false-alarm rate is at most its half of alpha.
func TestSelfCheckPooledNullMixedServices(t *testing.T) {
	shares := [][]float64{uniform(2), uniform(3), uniform(10), {0.5, 0.25, 0.125, 0.125}, {0.7, 0.2, 0.1}, uniform(5)}
	smp := newSampler(4)
	const n = 2000
	hits := 0
	for range trials {
		rep, err := AnalyzeDistribution(smp.samples(n, shares, shares), DistributionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Pooled.DF != 9 {
			t.Fatalf("pooled df %d, want 9 (10 positions)", rep.Pooled.DF)
		}
		if rep.Pooled.Verdict == VerdictSkewed {
			hits++
		}
	}
	rate := float64(hits) / trials
	half := DefaultProbeDesign().Alpha / 2
	t.Logf("pooled false alarms, mixed services: %.4f in %d trials (level %v)", rate, trials, half)
	if rate > half+margin(half) {
		t.Errorf("pooled false-alarm rate %.4f above %v + %.4f", rate, half, margin(half))
	}
}
