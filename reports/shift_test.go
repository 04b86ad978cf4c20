package reports

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestHodgesLehmann(t *testing.T) {
	// Differences y-x: 1,2,2,3,3,3,4,4,5; median 3.
	est, lo, hi := hodgesLehmann([]float64{1, 2, 3}, []float64{4, 5, 6}, 0.05)
	// m = n = 3: even U = 0 has probability 1/20 > 0.025, so no
	// difference may be cut: the interval is every difference.
	if est != 3 || lo != 1 || hi != 5 {
		t.Errorf("hodgesLehmann = %v [%v, %v], want 3 [1, 5]", est, lo, hi)
	}
}

// TestUCritical checks the exact critical values against the published
// two-sided 0.05 table of the Mann-Whitney U (reject when U <= value): the
// interval starts one above it.
func TestUCritical(t *testing.T) {
	for _, c := range []struct{ m, n, table int }{{5, 5, 2}, {8, 8, 13}, {10, 10, 23}, {20, 20, 127}, {6, 9, 10}} {
		if got := uCritical(c.m, c.n, 0.025); got != c.table+1 {
			t.Errorf("uCritical(%d, %d) = %d, want %d (table %d, plus one)", c.m, c.n, got, c.table+1, c.table)
		}
	}
	// The normal approximation beyond 50 a side continues the exact
	// values: at 50 both agree within one.
	exact := uCritical(50, 50, 0.025)
	fm := 50.0
	approx := int(math.Floor(fm*fm/2 - 1.959964*math.Sqrt(fm*fm*(2*fm+1)/12)))
	if d := exact - approx; d < -1 || d > 1 {
		t.Errorf("at 50 a side: exact %d, normal approximation %d", exact, approx)
	}
	if k := uCritical(60, 60, 0.025); k < exact || k > 60*60/2 {
		t.Errorf("uCritical(60, 60) = %d, want between %d and %d", k, exact, 60*60/2)
	}
}

func TestEstimateRatio(t *testing.T) {
	a := []float64{1.00, 1.10, 0.95, 1.05, 0.98, 1.02, 1.07, 0.93}
	b := make([]float64, len(a))
	for i, v := range a {
		b[i] = 2 * v
	}
	r, err := EstimateRatio(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Ratio-2) > 1e-9 || r.Low > 2 || r.High < 2 || r.Low < 1.5 || r.P > 0.001 {
		t.Errorf("B = 2A: %+v, want ratio 2 inside a tight interval, p < 0.001", r)
	}
	same, err := EstimateRatio(a, a)
	if err != nil {
		t.Fatal(err)
	}
	if same.Ratio != 1 || same.Low >= 1 || same.High <= 1 || same.P < 0.9 {
		t.Errorf("A against itself: %+v, want ratio 1 inside its interval, p near 1", same)
	}
	if _, err := EstimateRatio(a, []float64{0}); err == nil {
		t.Error("a zero value: want an error")
	}
}

// TestEstimateRatioCoverage: over many samples of B = 1.3 A (lognormal,
// 8 a side), the 95% interval holds 1.3 about 95% of the time (the exact
// U distribution makes it a little conservative).
func TestEstimateRatioCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const trials, n, ratio = 1000, 8, 1.3
	covered := 0
	for range trials {
		a, b := make([]float64, n), make([]float64, n)
		for i := range n {
			a[i] = math.Exp(0.3 * rng.NormFloat64())
			b[i] = ratio * math.Exp(0.3*rng.NormFloat64())
		}
		r, err := EstimateRatio(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if r.Low <= ratio && ratio <= r.High {
			covered++
		}
	}
	if share := float64(covered) / trials; share < 0.93 || share > 0.99 {
		t.Errorf("the 95%% interval held the true ratio in %.3f of %d trials", share, trials)
	}
}
