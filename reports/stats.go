package reports

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"gonum.org/v1/gonum/stat"
)

// Summary describes a sample of durations in seconds.
type Summary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// SummaryMethod says how Summarize computes its figures, for reports.
const SummaryMethod = "empirical quantiles (gonum stat.Quantile, Empirical: the smallest sample with at least the given share of samples at or below it)"

// Summarize computes the empirical quantiles of xs (not modified).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	q := func(p float64) float64 { return stat.Quantile(p, stat.Empirical, sorted, nil) }
	return Summary{
		Count: len(sorted),
		P50:   q(0.5),
		P90:   q(0.9),
		P99:   q(0.99),
		Max:   sorted[len(sorted)-1],
		Mean:  stat.Mean(sorted, nil),
	}
}

// SyncSeconds returns the durations of the mode's syncs; with full set,
// only full (true) or only partial (false) ones. Merged entries count
// once, with the merged duration divided evenly, since kube-proxy's
// histogram only gave their sum.
func (m *ModeResult) SyncSeconds(full *bool) []float64 {
	var xs []float64
	for _, s := range m.Syncs {
		if full != nil && s.Full != *full {
			continue
		}
		n := max(s.Merged, 1)
		for range n {
			xs = append(xs, s.Seconds/float64(n))
		}
	}
	return xs
}

// FirstSync returns the first sync, which is a full one, or nil.
func (m *ModeResult) FirstSync() *Sync {
	if len(m.Syncs) == 0 {
		return nil
	}
	return &m.Syncs[0]
}

// ColdFirstSync returns the first sync of the first kube-proxy process
// (Process 0), or nil: with lifecycle steps, later processes' first syncs
// are in Lifecycle.
func (m *ModeResult) ColdFirstSync() *Sync {
	for i := range m.Syncs {
		if m.Syncs[i].Process == 0 {
			return &m.Syncs[i]
		}
	}
	return nil
}

// probeCell is "ok/sent (stray)" over a mode's probes, or "-".
func probeCell(m *ModeResult) string {
	sent, ok, stray := 0, 0, 0
	for _, p := range m.Probes {
		sent += p.Sent
		ok += p.OK
		stray += p.Stray
	}
	if sent == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d (%d)", ok, sent, stray)
}

// countKeys is the sorted union of the keys of rule-count maps.
func countKeys(counts ...map[string]int) []string {
	keys := map[string]bool{}
	for _, c := range counts {
		for k := range c {
			keys[k] = true
		}
	}
	return slices.Sorted(maps.Keys(keys))
}
