package reports

import (
	"errors"
	"math"
	"slices"
)

// ShiftMethod says how a RatioShift is obtained.
const ShiftMethod = "ratio B/A of a metric: exp of the Hodges-Lehmann estimate of the shift between log(B) and " +
	"log(A) (the median of all pairwise differences), with its 95% confidence interval from the distribution " +
	"of the Mann-Whitney U statistic (exact without ties for up to 50 values a side, else the normal " +
	"approximation), and the two-sided Mann-Whitney p-value. Distribution-free: sync times are skewed."

// RatioShift is how much larger B's values are than A's, as a ratio.
type RatioShift struct {
	// Ratio is the estimate of B/A; Low and High bound its 95% confidence
	// interval.
	Ratio, Low, High float64
	// P is the Mann-Whitney U test's two-sided p-value.
	P      float64
	N1, N2 int
}

// EstimateRatio compares two samples of positive values (A's and B's).
func EstimateRatio(a, b []float64) (RatioShift, error) {
	if len(a) == 0 || len(b) == 0 {
		return RatioShift{}, errors.New("ratio: both samples need at least one value")
	}
	la, lb := make([]float64, len(a)), make([]float64, len(b))
	for i, v := range a {
		if !(v > 0) || math.IsInf(v, 0) {
			return RatioShift{}, errors.New("ratio: values must be positive and finite")
		}
		la[i] = math.Log(v)
	}
	for i, v := range b {
		if !(v > 0) || math.IsInf(v, 0) {
			return RatioShift{}, errors.New("ratio: values must be positive and finite")
		}
		lb[i] = math.Log(v)
	}
	mw, err := MannWhitneyU(lb, la)
	if err != nil {
		return RatioShift{}, err
	}
	est, lo, hi := hodgesLehmann(la, lb, 0.05)
	return RatioShift{Ratio: math.Exp(est), Low: math.Exp(lo), High: math.Exp(hi), P: mw.P, N1: len(a), N2: len(b)}, nil
}

// hodgesLehmann returns the median of the differences y_j - x_i and the
// bounds of its 1-alpha confidence interval: the k-th smallest and k-th
// largest difference, k the largest count with P(U < k) <= alpha/2 under
// the null hypothesis (k at least 1: with very small samples the interval
// is then every difference, and it says so by its width).
func hodgesLehmann(x, y []float64, alpha float64) (est, lo, hi float64) {
	d := make([]float64, 0, len(x)*len(y))
	for _, xi := range x {
		for _, yj := range y {
			d = append(d, yj-xi)
		}
	}
	slices.Sort(d)
	n := len(d)
	if n%2 == 1 {
		est = d[n/2]
	} else {
		est = (d[n/2-1] + d[n/2]) / 2
	}
	k := max(uCritical(len(x), len(y), alpha/2), 1)
	return est, d[k-1], d[n-k]
}

// uCritical is the largest k with P(U <= k-1) <= tail for samples of m and
// n under the null hypothesis: exact (no ties assumed) for up to 50 a
// side, else the normal approximation.
func uCritical(m, n int, tail float64) int {
	if m <= exactLimit && n <= exactLimit {
		c := uCounts(m, n)
		var total float64
		for _, v := range c {
			total += v
		}
		cum, k := 0.0, 0
		for u, v := range c {
			cum += v
			if cum/total > tail {
				break
			}
			k = u + 1 // P(U <= u) <= tail, so k-1 = u qualifies
		}
		return k
	}
	fm, fn := float64(m), float64(n)
	z := -math.Sqrt2 * math.Erfcinv(2*tail) // the tail's lower quantile, negative
	k := fm*fn/2 + z*math.Sqrt(fm*fn*(fm+fn+1)/12)
	return max(int(math.Floor(k)), 0)
}

// uCounts are the numbers of orderings of m and n values without ties
// giving U = 0..mn: the coefficients of the Gaussian binomial coefficient
// [m+n choose m]_q, the product over i = 1..m of (1 - q^(n+i)) / (1 - q^i).
func uCounts(m, n int) []float64 {
	top := m * n
	c := make([]float64, top+1)
	c[0] = 1
	for i := 1; i <= m; i++ {
		// Multiply by 1 - q^(n+i), highest power first so every term
		// reads the old coefficient.
		for k := top; k >= n+i; k-- {
			c[k] -= c[k-n-i]
		}
		// Divide by 1 - q^i: a running sum with stride i.
		for k := i; k <= top; k++ {
			c[k] += c[k-i]
		}
	}
	return c
}
