package reports

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMannWhitneyKnownValues(t *testing.T) {
	for _, tc := range []struct {
		name      string
		x, y      []float64
		exact     bool
		wantU     float64
		wantP     float64
		wantExact bool
	}{
		// SciPy's documentation (scipy.stats.mannwhitneyu): U1 = 17,
		// p = 0.1111 exact, 0.11134688653314041 asymptotic.
		{"scipy exact", []float64{19, 22, 16, 29, 24}, []float64{20, 11, 17, 12}, true, 17, 0.1111111111111111, true},
		{"scipy asymptotic", []float64{19, 22, 16, 29, 24}, []float64{20, 11, 17, 12}, false, 17, 0.11134688653314041, false},
		// R's ?wilcox.test: W = 35, one-sided exact p = 0.1272, so the
		// two-sided p is 0.2544.
		{"R exact", []float64{0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46}, []float64{1.15, 0.88, 0.90, 0.74, 1.21}, true, 35, 0.2544, true},
		// Ties force the approximation. Midranks of x = {1,2,2,3} in
		// {1,2,2,2,3,3,4,5}: 1, 3, 3, 5.5, so R1 = 12.5 and U = 2.5; ties
		// 2^3-2 + 3^3-3 = 30; sigma^2 = 16/12 * (9 - 30/56) = 11.2857;
		// z = (8-2.5-0.5)/3.3594 = 1.48835, p = erfc(z/sqrt 2) = 0.13666.
		{"ties", []float64{1, 2, 2, 3}, []float64{2, 3, 4, 5}, true, 2.5, 0.13666, false},
		{"all equal", []float64{1, 1, 1}, []float64{1, 1}, true, 3, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mannWhitneyU(tc.x, tc.y, tc.exact)
			if err != nil {
				t.Fatal(err)
			}
			if got.U != tc.wantU || math.Abs(got.P-tc.wantP) > 1e-4 || got.Exact != tc.wantExact {
				t.Errorf("got U=%v p=%v exact=%v, want U=%v p=%v exact=%v", got.U, got.P, got.Exact, tc.wantU, tc.wantP, tc.wantExact)
			}
		})
	}
}

// TestMannWhitneyExactMatchesEnumeration checks the generating function
// against counting every split of ranks 1..m+n.
func TestMannWhitneyExactMatchesEnumeration(t *testing.T) {
	for _, size := range [][2]int{{1, 1}, {2, 3}, {4, 4}, {3, 7}, {6, 5}} {
		m, n := size[0], size[1]
		counts := make([]float64, m*n+1)
		var total float64
		for mask := 0; mask < 1<<(m+n); mask++ {
			if popcount(mask) != m {
				continue
			}
			// U of the first sample: pairs where its member ranks above.
			u, below := 0, 0
			for r := 0; r < m+n; r++ {
				if mask&(1<<r) != 0 {
					u += below
				} else {
					below++
				}
			}
			counts[u]++
			total++
		}
		for u := 0; u <= m*n; u++ {
			var lo, hi float64
			for k, c := range counts {
				if k <= u {
					lo += c
				}
				if k >= u {
					hi += c
				}
			}
			want := math.Min(1, 2*math.Min(lo, hi)/total)
			if got := exactMannWhitneyP(m, n, float64(u)); math.Abs(got-want) > 1e-12 {
				t.Errorf("m=%d n=%d U=%d: p=%v, enumeration gives %v", m, n, u, got, want)
			}
		}
	}
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// lognormal draws n sync-like durations: median med seconds, heavy right
// tail.
func lognormal(rng *rand.Rand, n int, med float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = med * math.Exp(0.6*rng.NormFloat64())
	}
	return xs
}

// TestMannWhitneyFalsePositiveRate draws both samples from one
// distribution, for many seeds, with and without ties: about 5% of the
// tests may call the difference significant, no more.
func TestMannWhitneyFalsePositiveRate(t *testing.T) {
	const trials = 2000
	for _, tc := range []struct {
		name   string
		n1, n2 int
		round  float64 // rounding creates ties (0: none)
	}{
		{"exact n=10+12", 10, 12, 0},
		{"normal n=60+80", 60, 80, 0},
		{"ties n=25+30", 25, 30, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			significant := 0
			for range trials {
				a, b := lognormal(rng, tc.n1, 0.3), lognormal(rng, tc.n2, 0.3)
				if tc.round > 0 {
					for i := range a {
						a[i] = math.Round(a[i]/tc.round) * tc.round
					}
					for i := range b {
						b[i] = math.Round(b[i]/tc.round) * tc.round
					}
				}
				mw, err := MannWhitneyU(a, b)
				if err != nil {
					t.Fatal(err)
				}
				if mw.P < 0.05 {
					significant++
				}
			}
			// Binomial(2000, 0.05) has sd 0.0049; the test may be a little
			// conservative (discreteness, continuity correction).
			rate := float64(significant) / trials
			t.Logf("%d of %d tests significant at 0.05 (%.3f)", significant, trials, rate)
			if rate < 0.03 || rate > 0.065 {
				t.Errorf("false-positive rate %.3f, want near 0.05", rate)
			}
		})
	}
}

func TestMannWhitneyDetectsShift(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a, b := lognormal(rng, 24, 0.3), lognormal(rng, 24, 0.6)
	mw, err := MannWhitneyU(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if mw.P >= 0.01 {
		t.Errorf("a twice slower median gives p=%v, want < 0.01", mw.P)
	}
}
