package reports

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/mathext"
	"gonum.org/v1/gonum/stat/distuv"
)

// This file holds the mathematics of the distribution check: Pearson's
// chi-square goodness-of-fit test, the noncentral chi-square distribution
// (gonum's distuv has none), power and probe-count design, and the Holm
// correction. distribution.go applies them to probe counts.

// PearsonChiSquare tests counts against expected shares (which need not sum
// exactly to 1; they are normalized). With N = Σ counts and E_i = N p_i,
//
//	X² = Σ_i (O_i - E_i)² / E_i,   df = (number of categories with p_i > 0) - 1,
//	p-value = P(χ²_df ≥ X²) = Q(df/2, X²/2)   (regularized upper incomplete gamma).
//
// A category with p_i = 0 that received a count makes X² = +Inf and the
// p-value 0: the kernel sent traffic where the rules promise none. df is 0
// (p-value 1) when fewer than two categories can receive traffic.
func PearsonChiSquare(counts []int, shares []float64) (stat float64, df int, pValue float64, err error) {
	p, err := normalize(shares)
	if err != nil {
		return 0, 0, 0, err
	}
	if len(counts) != len(p) {
		return 0, 0, 0, fmt.Errorf("%d counts for %d shares", len(counts), len(p))
	}
	n := 0
	for i, c := range counts {
		if c < 0 {
			return 0, 0, 0, fmt.Errorf("count %d is negative", i)
		}
		n += c
	}
	cats := 0
	for i, pi := range p {
		if pi == 0 {
			if counts[i] > 0 {
				stat = math.Inf(1)
			}
			continue
		}
		cats++
		if n == 0 {
			continue
		}
		e := float64(n) * pi
		d := float64(counts[i]) - e
		stat += d * d / e
	}
	df = max(cats-1, 0)
	switch {
	case math.IsInf(stat, 1):
		return stat, df, 0, nil
	case df == 0 || n == 0:
		return stat, df, 1, nil
	}
	return stat, df, distuv.ChiSquared{K: float64(df)}.Survival(stat), nil
}

// normalize returns shares scaled to sum to 1; it refuses negative, NaN
// or all-zero shares.
func normalize(shares []float64) ([]float64, error) {
	sum := 0.0
	for i, s := range shares {
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("share %d is %v", i, s)
		}
		sum += s
	}
	if sum == 0 {
		return nil, errors.New("shares sum to 0")
	}
	p := make([]float64, len(shares))
	for i, s := range shares {
		p[i] = s / sum
	}
	return p, nil
}

// NoncentralChiSquareCDF returns P(X ≤ x) for X ~ χ'²(k, λ), the noncentral
// chi-square distribution with k degrees of freedom and noncentrality λ,
// written as a Poisson mixture of central chi-square distributions:
//
//	P(X ≤ x) = Σ_{j≥0} e^{-λ/2} (λ/2)^j / j! · P(k/2 + j, x/2)
//
// where P(a, y) is the regularized lower incomplete gamma function
// (mathext.GammaIncReg). The sum starts at the Poisson mode ⌊λ/2⌋ and
// walks both ways until the weights are negligible, so large λ neither
// underflows e^{-λ/2} nor needs thousands of terms from j = 0.
func NoncentralChiSquareCDF(x, k, lambda float64) float64 {
	return noncentralChiSquare(x, k, lambda, false)
}

// NoncentralChiSquareSurvival returns P(X > x) for X ~ χ'²(k, λ): the same
// mixture with the upper incomplete gamma Q(k/2 + j, x/2), computed directly
// so that small tails (power close to 1, or p-values) keep their precision.
func NoncentralChiSquareSurvival(x, k, lambda float64) float64 {
	return noncentralChiSquare(x, k, lambda, true)
}

func noncentralChiSquare(x, k, lambda float64, upper bool) float64 {
	if math.IsNaN(x) || math.IsNaN(k) || math.IsNaN(lambda) || k <= 0 || lambda < 0 {
		return math.NaN()
	}
	if x <= 0 {
		if upper {
			return 1
		}
		return 0
	}
	if math.IsInf(x, 1) {
		if upper {
			return 0
		}
		return 1
	}
	term := func(j float64) (w, t float64) {
		lg, _ := math.Lgamma(j + 1)
		h := lambda / 2
		if h == 0 {
			if j == 0 {
				w = 1
			}
		} else {
			w = math.Exp(-h + j*math.Log(h) - lg)
		}
		if upper {
			return w, w * mathext.GammaIncRegComp(k/2+j, x/2)
		}
		return w, w * mathext.GammaIncReg(k/2+j, x/2)
	}
	const eps = 1e-17
	mode := math.Floor(lambda / 2)
	sum := 0.0
	for j := mode; ; j++ {
		w, t := term(j)
		sum += t
		// Past the mode the weights fall at least geometrically, with
		// ratio (λ/2)/(j+1) < 1, so the tail left is below w/(1-ratio).
		if ratio := lambda / 2 / (j + 1); w < eps && ratio < 0.5 || j > mode+1e6 {
			break
		}
	}
	for j := mode - 1; j >= 0; j-- {
		w, t := term(j)
		sum += t
		if w < eps {
			break
		}
	}
	return math.Min(math.Max(sum, 0), 1)
}

// ChiSquareCritical returns the critical value c with P(χ²_df > c) = alpha:
// c = 2 Q⁻¹(df/2, alpha), inverting the upper incomplete gamma directly so
// that small alphas (Bonferroni/Holm levels) stay accurate.
func ChiSquareCritical(df int, alpha float64) float64 {
	return 2 * mathext.GammaIncRegCompInv(float64(df)/2, alpha)
}

// ChiSquarePower is the power of a level-alpha chi-square test with df
// degrees of freedom when the statistic follows χ'²(df, λ):
//
//	power = P(χ'²(df, λ) > c),  c = ChiSquareCritical(df, alpha).
//
// For Pearson's test of N probes drawn from shares q against expected
// shares p, λ = N · Σ (q_i - p_i)² / p_i (Noncentrality): the textbook
// local-alternative approximation. It is optimistic for large skews, so
// the probe plan uses PowerCurve instead; this stays as the reference.
func ChiSquarePower(df int, lambda, alpha float64) float64 {
	return NoncentralChiSquareSurvival(ChiSquareCritical(df, alpha), float64(df), lambda)
}

// Noncentrality returns the per-probe noncentrality Σ_i (q_i - p_i)² / p_i
// of true shares q against expected shares p (Cohen's w²). Categories
// with p_i = 0 are skipped.
func Noncentrality(p, q []float64) float64 {
	s := 0.0
	for i := range p {
		if p[i] > 0 {
			d := q[i] - p[i]
			s += d * d / p[i]
		}
	}
	return s
}

// SkewedShares returns the shares q that an endpoint at position pos would
// have if it received relExcess more than its share p_pos, the others
// giving that excess up in proportion to their shares:
//
//	q_pos = p_pos (1 + r),   q_i = p_i (1 - r p_pos / (1 - p_pos))  for i ≠ pos.
//
// With k equal shares this gives λ/N = r² / (k - 1).
func SkewedShares(p []float64, pos int, relExcess float64) ([]float64, error) {
	if pos < 0 || pos >= len(p) {
		return nil, fmt.Errorf("position %d out of range for %d shares", pos, len(p))
	}
	if p[pos] <= 0 || p[pos] >= 1 {
		return nil, fmt.Errorf("position %d has share %v: a skew needs 0 < share < 1", pos, p[pos])
	}
	q := make([]float64, len(p))
	others := 1 - relExcess*p[pos]/(1-p[pos])
	if others < 0 || relExcess*p[pos] > 1-p[pos] {
		return nil, fmt.Errorf("excess %v of share %v leaves other endpoints a negative share", relExcess, p[pos])
	}
	for i := range p {
		q[i] = p[i] * others
	}
	q[pos] = p[pos] * (1 + relExcess)
	return q, nil
}

// Holm returns Holm's step-down adjusted p-values (same order as ps): with
// p_(1) ≤ … ≤ p_(m) sorted,
//
//	p̃_(i) = max_{j ≤ i} min(1, (m - j + 1) p_(j)),
//
// and hypothesis i is rejected at family-wise level alpha iff p̃_i ≤ alpha.
func Holm(ps []float64) []float64 {
	m := len(ps)
	idx := make([]int, m)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return ps[idx[a]] < ps[idx[b]] })
	adj := make([]float64, m)
	running := 0.0
	for rank, i := range idx {
		v := math.Min(1, float64(m-rank)*ps[i])
		running = math.Max(running, v)
		adj[i] = running
	}
	return adj
}

// waldStatistic returns W = dᵀ V⁺ d and the rank of V, for a deviation
// vector d and a symmetric positive semi-definite covariance V, with V⁺
// the Moore-Penrose pseudo-inverse (eigenvalues below a relative
// tolerance count as 0). For one multinomial, d = O - Np and
// V = N(diag p - ppᵀ), W equals Pearson's X² and the rank is k - 1; for a
// sum of independent multinomials with different shares (pooled chain
// positions) it is the exact generalization, asymptotically χ²_rank.
func waldStatistic(d []float64, v *mat.SymDense) (float64, int, error) {
	var eig mat.EigenSym
	if !eig.Factorize(v, true) {
		return 0, 0, errors.New("eigen decomposition of the pooled covariance failed")
	}
	vals := eig.Values(nil)
	var vecs mat.Dense
	eig.VectorsTo(&vecs)
	top := 0.0
	for _, e := range vals {
		top = math.Max(top, math.Abs(e))
	}
	tol := top * 1e-10 * float64(len(vals))
	w, rank := 0.0, 0
	for i, e := range vals {
		if e <= tol {
			continue
		}
		rank++
		proj := 0.0
		for j := range d {
			proj += vecs.At(j, i) * d[j]
		}
		w += proj * proj / e
	}
	return w, rank, nil
}

// pooledCovariance returns Σ_s n_s (diag p_s - p_s p_sᵀ) over positions
// 0..k-1, shares[s] padded with zeros: the covariance of position totals
// of independent multinomials.
func pooledCovariance(shares [][]float64, n []float64, k int) *mat.SymDense {
	v := mat.NewSymDense(k, nil)
	for s, p := range shares {
		for i := range p {
			for j := i; j < len(p); j++ {
				c := -p[i] * p[j]
				if i == j {
					c += p[i]
				}
				v.SetSym(i, j, v.At(i, j)+n[s]*c)
			}
		}
	}
	return v
}
