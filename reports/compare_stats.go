package reports

import (
	"errors"
	"math"
	"sort"
)

// MannWhitney is the outcome of a two-sided Mann-Whitney U test.
type MannWhitney struct {
	// U is the statistic of the first sample: the number of pairs (x, y)
	// with x > y, ties counting one half.
	U float64
	// P is the two-sided p-value: how likely a difference at least this
	// large is when both samples come from one distribution.
	P float64
	// Exact is true when P comes from the exact distribution of U (small
	// samples without ties) rather than the normal approximation.
	Exact  bool
	N1, N2 int
}

// exactLimit is the largest sample size for which the exact distribution
// is computed; beyond it the normal approximation is as good.
const exactLimit = 50

// MannWhitneyU tests whether x and y come from the same distribution
// against the alternative that one tends to give larger values, without
// assuming a shape (sync times are skewed and heavy-tailed, so a t-test
// would be misled). It is exact for samples of up to 50 without ties, and
// otherwise uses the normal approximation with tie correction and
// continuity correction, as benchstat and SciPy do.
func MannWhitneyU(x, y []float64) (MannWhitney, error) {
	return mannWhitneyU(x, y, true)
}

func mannWhitneyU(x, y []float64, allowExact bool) (MannWhitney, error) {
	n1, n2 := len(x), len(y)
	if n1 == 0 || n2 == 0 {
		return MannWhitney{}, errors.New("mann-whitney u: both samples need at least one value")
	}
	type obs struct {
		v     float64
		first bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range x {
		all = append(all, obs{v, true})
	}
	for _, v := range y {
		all = append(all, obs{v, false})
	}
	for _, o := range all {
		if math.IsNaN(o.v) {
			return MannWhitney{}, errors.New("mann-whitney u: a sample holds NaN")
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	// Midranks; ties adds t^3-t for every run of t equal values.
	var r1, ties float64
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // ranks i+1..j, averaged
		for k := i; k < j; k++ {
			if all[k].first {
				r1 += rank
			}
		}
		if t := float64(j - i); t > 1 {
			ties += t*t*t - t
		}
		i = j
	}
	fn1, fn2 := float64(n1), float64(n2)
	u := r1 - fn1*(fn1+1)/2
	res := MannWhitney{U: u, N1: n1, N2: n2}
	if allowExact && ties == 0 && n1 <= exactLimit && n2 <= exactLimit {
		res.P, res.Exact = exactMannWhitneyP(n1, n2, u), true
		return res, nil
	}
	n := fn1 + fn2
	mu := fn1 * fn2 / 2
	sigma := math.Sqrt(fn1 * fn2 / 12 * ((n + 1) - ties/(n*(n-1))))
	if sigma == 0 {
		// Every value is equal: no evidence of any difference.
		res.P = 1
		return res, nil
	}
	z := math.Max(0, math.Abs(u-mu)-0.5) / sigma
	res.P = math.Min(1, math.Erfc(z/math.Sqrt2))
	return res, nil
}

// exactMannWhitneyP is the two-sided p-value of U = u for samples of m
// and n without ties: twice the smaller tail of U's distribution. The
// number of orderings with U = k is the coefficient of q^k in the
// Gaussian binomial coefficient [m+n choose m]_q, the product over
// i = 1..m of (1 - q^(n+i)) / (1 - q^i).
func exactMannWhitneyP(m, n int, u float64) float64 {
	var total, lower, upper float64
	for k, v := range uCounts(m, n) {
		total += v
		if float64(k) <= u {
			lower += v
		}
		if float64(k) >= u {
			upper += v
		}
	}
	return math.Min(1, 2*math.Min(lower, upper)/total)
}
