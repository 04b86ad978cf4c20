package reports

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

func near(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol || math.IsNaN(got) {
		t.Errorf("%s = %.12g, want %.12g (±%g)", name, got, want, tol)
	}
}

func TestChiSquareKnownValues(t *testing.T) {
	// Critical values as R prints them: qchisq(1 - alpha, df).
	for _, tc := range []struct {
		df          int
		alpha, want float64
	}{
		{1, 0.05, 3.841459}, // qchisq(0.95, 1)
		{1, 0.01, 6.634897}, // qchisq(0.99, 1)
		{9, 0.05, 16.91898}, // qchisq(0.95, 9)
		{9, 0.01, 21.66599}, // qchisq(0.99, 9)
		{10, 0.05, 18.30704},
	} {
		near(t, "ChiSquareCritical", ChiSquareCritical(tc.df, tc.alpha), tc.want, 5e-6)
		near(t, "ChiSquaredSurvival(critical)", ChiSquaredSurvival(tc.df, ChiSquareCritical(tc.df, tc.alpha)), tc.alpha, 1e-12)
	}
	// df = 2 is the exponential distribution: P(χ²_2 ≥ x) = e^{-x/2}.
	for _, x := range []float64{0.1, 1, 10, 60} {
		near(t, "survival df=2", ChiSquaredSurvival(2, x), math.Exp(-x/2), 1e-15)
	}
	// df = 5 in closed form: 2Q(√x) + 2φ(√x)(√x + x^{3/2}/3), Q the normal
	// upper tail; R: pchisq(10, 5, lower.tail = FALSE) = 0.07523525.
	std := distuv.UnitNormal
	r := math.Sqrt(10)
	near(t, "survival df=5 closed form", ChiSquaredSurvival(5, 10), 2*std.Survival(r)+2*std.Prob(r)*(r+r*r*r/3), 1e-14)
	near(t, "survival df=5 R", ChiSquaredSurvival(5, 10), 0.07523525, 1e-8)
}

func TestPearsonChiSquare(t *testing.T) {
	// R: chisq.test(c(10, 20, 30)): X-squared = 10, df = 2, p = exp(-5).
	stat, df, p, err := PearsonChiSquare([]int{10, 20, 30}, []float64{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "X²", stat, 10, 1e-12)
	near(t, "p", p, math.Exp(-5), 1e-15)
	if df != 2 {
		t.Errorf("df = %d, want 2", df)
	}
	// Unequal shares: counts (30, 30, 40) against (0.2, 0.3, 0.5), N = 100:
	// X² = 100/20 + 0 + 100/50 = 7, p = e^{-3.5}.
	stat, _, p, _ = PearsonChiSquare([]int{30, 30, 40}, []float64{0.2, 0.3, 0.5})
	near(t, "X² unequal", stat, 7, 1e-12)
	near(t, "p unequal", p, math.Exp(-3.5), 1e-15)
	// A zero share that got traffic.
	stat, df, p, _ = PearsonChiSquare([]int{5, 5, 1}, []float64{0.5, 0.5, 0})
	if !math.IsInf(stat, 1) || p != 0 || df != 1 {
		t.Errorf("zero share hit: X² %v df %d p %v, want +Inf 1 0", stat, df, p)
	}
	// A zero share without traffic is not a category.
	_, df, _, _ = PearsonChiSquare([]int{5, 5, 0}, []float64{0.5, 0.5, 0})
	if df != 1 {
		t.Errorf("df = %d, want 1", df)
	}
	if _, _, _, err := PearsonChiSquare([]int{1, 2}, []float64{1}); err == nil {
		t.Error("length mismatch accepted")
	}
	if _, _, _, err := PearsonChiSquare([]int{1, 2}, []float64{1, -1}); err == nil {
		t.Error("negative share accepted")
	}
}

// ncx2Odd is the closed form of the noncentral chi-square CDF for df 1
// and 3, with μ = √λ and t = √x (X = ‖Z + μe₁‖², Z standard normal):
//
//	df 1: Φ(t-μ) - Φ(-t-μ)
//	df 3: Φ(t-μ) - Φ(-t-μ) - [φ(t-μ) - φ(t+μ)]/μ
func ncx2Odd(df int, x, lambda float64) float64 {
	std := distuv.UnitNormal
	t, mu := math.Sqrt(x), math.Sqrt(lambda)
	f := std.CDF(t-mu) - std.CDF(-t-mu)
	if df == 3 {
		f -= (std.Prob(t-mu) - std.Prob(t+mu)) / mu
	}
	return f
}

func TestNoncentralChiSquare(t *testing.T) {
	for _, df := range []int{1, 3} {
		for _, lambda := range []float64{0.5, 2, 10, 24.5, 100} {
			for _, x := range []float64{0.2, 1, 5, 20, 50, 150} {
				got := NoncentralChiSquareCDF(x, float64(df), lambda)
				near(t, "CDF", got, ncx2Odd(df, x, lambda), 1e-12)
				near(t, "CDF + survival", got+NoncentralChiSquareSurvival(x, float64(df), lambda), 1, 1e-12)
			}
		}
	}
	// λ = 0 is the central distribution.
	for _, x := range []float64{0.5, 9, 30} {
		near(t, "λ=0", NoncentralChiSquareSurvival(x, 9, 0), distuv.ChiSquared{K: 9}.Survival(x), 1e-15)
	}
	// Large λ: the Poisson mode far from 0 (e^{-λ/2} underflows); the
	// distribution is near normal with mean k+λ and variance 2(k+2λ).
	k, lambda := 9.0, 5000.0
	sd := math.Sqrt(2 * (k + 2*lambda))
	near(t, "large λ", NoncentralChiSquareCDF(k+lambda+sd, k, lambda), 0.8413, 0.01)
	// The mean is k + λ: a Monte Carlo check of a whole distribution.
	rng := rand.New(rand.NewPCG(1, 2))
	const draws = 200000
	x := 30.0
	below := 0
	for range draws {
		z := rng.NormFloat64() + math.Sqrt(24.5)
		v := z * z
		for range 8 {
			z := rng.NormFloat64()
			v += z * z
		}
		if v <= x {
			below++
		}
	}
	got := NoncentralChiSquareCDF(x, 9, 24.5)
	se := math.Sqrt(got * (1 - got) / draws)
	near(t, "CDF vs Monte Carlo", float64(below)/draws, got, 4*se)
}

func TestHolm(t *testing.T) {
	// R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02.
	got := Holm([]float64{0.01, 0.04, 0.03, 0.005})
	for i, want := range []float64{0.03, 0.06, 0.06, 0.02} {
		near(t, "holm", got[i], want, 1e-15)
	}
	if got := Holm([]float64{0.5, 0.9}); got[0] != 1 || got[1] != 1 {
		t.Errorf("capped at 1: %v", got)
	}
}

func TestProbesForPower(t *testing.T) {
	p := uniform(10)
	q, err := SkewedShares(p, 3, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	// λ/N = r²/(k-1) for k equal shares.
	w2 := Noncentrality(p, q)
	near(t, "w²", w2, 0.04/9, 1e-15)
	local := func(n float64) float64 { return ChiSquarePower(9, n*w2, 0.005) }
	n, err := ProbesForPower(local, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	if local(float64(n)) < 0.9 || local(float64(n-1)) >= 0.9 {
		t.Errorf("n = %d is not the smallest with power 0.9", n)
	}
	if _, err := ProbesForPower(func(float64) float64 { return 0.1 }, 0.9); err == nil {
		t.Error("an undetectable skew got a probe count")
	}
}

func TestPowerCurve(t *testing.T) {
	p := uniform(10)
	// No skew: the curve is the test's size at any n.
	pc, err := ServicePowerCurve(p, p, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "size", pc.Power(5000), 0.01, 1e-10)
	// A tiny skew: the local approximation is then accurate.
	q, _ := SkewedShares(p, 0, 0.002)
	pc, _ = ServicePowerCurve(p, q, 0.01)
	n := 5e6
	near(t, "small skew vs local", pc.Power(n), ChiSquarePower(9, n*Noncentrality(p, q), 0.01), 0.003)
	// A 20% skew: the curve's power is below the local shortcut's, as the
	// simulation in distribution_trials_test.go measures.
	q, _ = SkewedShares(p, 0, 0.2)
	pc, _ = ServicePowerCurve(p, q, 0.005)
	local := ChiSquarePower(9, 6439*Noncentrality(p, q), 0.005)
	if got := pc.Power(6439); got >= local || got < local-0.03 {
		t.Errorf("power at 6439 probes: curve %v, local %v: want slightly below", got, local)
	}
}

func TestPlanProbesDefaults(t *testing.T) {
	for _, tc := range []struct {
		services          int
		serviceN, perServ int
	}{
		// With one service both skews are tested on the same counts.
		{services: 1, serviceN: 6717, perServ: 646688},
		{services: 100, serviceN: 10124, perServ: 10124},
		{services: 2000, serviceN: 12131, perServ: 12131},
	} {
		shares := make([][]float64, tc.services)
		for i := range shares {
			shares[i] = uniform(10)
		}
		plan, err := PlanProbes(DefaultProbeDesign(), shares)
		if err != nil {
			t.Fatal(err)
		}
		// (b) needs 646,688 probes in all, rounded up to a multiple of m.
		if plan.ServiceProbes != tc.serviceN || plan.ProbesPerService != tc.perServ ||
			plan.PooledProbes < 646688 || plan.PooledProbes >= 646688+tc.services {
			t.Errorf("m=%d: plan %+v, want service %d, per service %d, pooled 646688 rounded up", tc.services, plan, tc.serviceN, tc.perServ)
		}
		if plan.ServicePower < 0.9 || plan.PooledPower < 0.9 {
			t.Errorf("m=%d: designed powers %v %v below 0.9", tc.services, plan.ServicePower, plan.PooledPower)
		}
	}
	// Unequal services: services of 2 and 10 endpoints; (b)'s pooled
	// noncentrality comes from the Wald form, and is positive.
	plan, err := PlanProbes(DefaultProbeDesign(), [][]float64{uniform(2), uniform(10), {0.5, 0.25, 0.25}})
	if err != nil {
		t.Fatal(err)
	}
	if plan.ServiceProbes <= 0 || plan.PooledProbes <= 0 {
		t.Errorf("unequal services: %+v", plan)
	}
}

func uniform(k int) []float64 {
	p := make([]float64, k)
	for i := range p {
		p[i] = 1 / float64(k)
	}
	return p
}
