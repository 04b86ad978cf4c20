package reports

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"

	"gonum.org/v1/gonum/stat"
)

// SweepFitMethod says how SweepFit exponents are obtained.
const SweepFitMethod = "ordinary least squares of ln(metric) on ln(services) over a mode's points " +
	"(gonum stat.LinearRegression), exponent = slope: 1 is linear growth, 2 quadratic, 0 constant; " +
	"R² of that line in log space. Points with a zero or missing value, and failed runs, are left out; " +
	"with 2 points the line is exact and R² says nothing."

// Sweep metrics other than rule counts.
const (
	SweepFirstSync = "firstSync"
	SweepPeakRSS   = "peakRSS"
	// The listing replay (ListReplay): netlink chains and sets, and nft
	// list table.
	SweepListNetlink = "listReplay/netlink"
	SweepListNFT     = "listReplay/nftListTable"
	// The data path's kernel CPU per connection, the dataplane's own
	// (DataPathFigures' ServiceOwnKernelMicros, DirectOwnKernelMicros).
	SweepDataPathServiceKernel = "dataPath/kernelPerConnection/service"
	SweepDataPathDirectKernel  = "dataPath/kernelPerConnection/direct"
	// SweepRulesPrefix prefixes a rule count kind: rules/iptables/nat.
	SweepRulesPrefix = "rules/"
)

// NewSweepResult builds a sweep's cost-versus-size view from its runs:
// the ModeResults with Sweep set, grouped by mode entry in the order they
// first appear. A run with Skipped set is a size the entry did not run.
// maxCount gives each entry's cap (0 or absent: none).
func NewSweepResult(group string, counts []int, modes []ModeResult, maxCount map[string]int) *SweepResult {
	sr := &SweepResult{Group: group, Counts: counts, FitMethod: SweepFitMethod}
	index := map[string]int{}
	for i := range modes {
		m := &modes[i]
		if m.Sweep == nil {
			continue
		}
		j, ok := index[m.Sweep.Entry]
		if !ok {
			j = len(sr.Modes)
			index[m.Sweep.Entry] = j
			sr.Modes = append(sr.Modes, SweepMode{Name: m.Sweep.Entry, Mode: m.Mode, Backend: m.Backend, MaxCount: maxCount[m.Sweep.Entry]})
		}
		sm := &sr.Modes[j]
		if m.Skipped != "" {
			sm.Skipped = append(sm.Skipped, SweepSkip{Count: m.Sweep.Count, Reason: m.Skipped})
			continue
		}
		p := SweepPoint{Count: m.Sweep.Count, Services: m.Sweep.Services, Endpoints: m.Sweep.Endpoints, Run: m.Name,
			Placement: "host", Rules: m.RulesAfterFirstSync, PeakRSSBytes: m.Resources.MaxRSSBytes, Error: m.Error}
		if m.Placement != nil && m.Placement.Kernel != "" {
			p.Placement = m.Placement.Kernel
		}
		if f := m.FirstSync(); f != nil {
			p.FirstSyncSeconds = f.Seconds
			p.FirstSyncParts = syncParts(*f)
		}
		p.ListReplay = m.ListReplay
		if dp := m.LastDataPath(); dp != nil {
			f := dp.Figures
			p.DataPath = &f
		}
		if e := m.NativeEstimate; e != nil {
			fs := e.FirstSync
			p.FirstSyncHostEstimate = &fs
		}
		sm.Points = append(sm.Points, p)
	}
	for i := range sr.Modes {
		sm := &sr.Modes[i]
		sort.Slice(sm.Points, func(a, b int) bool { return sm.Points[a].Count < sm.Points[b].Count })
		sort.Slice(sm.Skipped, func(a, b int) bool { return sm.Skipped[a].Count < sm.Skipped[b].Count })
		sm.Kernel = "host"
		for _, p := range sm.Points {
			if p.Placement == "vm" {
				sm.Kernel = "vm"
			}
		}
		sm.Fits = fitSweep(sm.Points)
	}
	return sr
}

// syncParts is s split by part with the rest, or nil when nothing in it
// was timed.
func syncParts(s Sync) map[string]float64 {
	if len(s.Kernel) == 0 {
		return nil
	}
	parts := maps.Clone(s.Kernel)
	rest := s.Seconds
	for _, secs := range s.Kernel {
		rest -= secs
	}
	parts[PartRest] = max(rest, 0)
	return parts
}

// fitSweep fits every metric the points carry: first sync, each part of
// it (SweepFirstSync + "/" + part), peak RSS and each rule count kind, in
// that order (parts in display order, kinds sorted).
func fitSweep(points []SweepPoint) []SweepFit {
	var ok []SweepPoint
	var rules []map[string]int
	parts := map[string]float64{}
	for _, p := range points {
		if p.Error == "" {
			ok = append(ok, p)
			rules = append(rules, p.Rules)
			maps.Copy(parts, p.FirstSyncParts)
		}
	}
	type metric struct {
		name string
		get  func(SweepPoint) float64
	}
	metrics := []metric{{SweepFirstSync, func(p SweepPoint) float64 { return p.FirstSyncSeconds }}}
	for _, part := range SortedParts(parts) {
		metrics = append(metrics, metric{SweepFirstSync + "/" + part, func(p SweepPoint) float64 { return p.FirstSyncParts[part] }})
	}
	replay := func(f func(*ListReplay) float64) func(SweepPoint) float64 {
		return func(p SweepPoint) float64 {
			if p.ListReplay == nil || p.ListReplay.Error != "" {
				return 0
			}
			return f(p.ListReplay)
		}
	}
	metrics = append(metrics,
		metric{SweepListNetlink, replay(func(l *ListReplay) float64 { return l.NetlinkChainsSeconds + l.NetlinkSetsSeconds })},
		metric{SweepListNFT, replay(func(l *ListReplay) float64 { return l.NFTListTableSeconds })},
		metric{SweepPeakRSS, func(p SweepPoint) float64 { return float64(p.PeakRSSBytes) }})
	dataPath := func(f func(*DataPathFigures) float64) func(SweepPoint) float64 {
		return func(p SweepPoint) float64 {
			if p.DataPath == nil {
				return 0
			}
			return f(p.DataPath)
		}
	}
	metrics = append(metrics,
		metric{SweepDataPathServiceKernel, dataPath(func(f *DataPathFigures) float64 { return f.ServiceOwnKernelMicros })},
		metric{SweepDataPathDirectKernel, dataPath(func(f *DataPathFigures) float64 { return f.DirectOwnKernelMicros })})
	for _, k := range countKeys(rules...) {
		metrics = append(metrics, metric{SweepRulesPrefix + k, func(p SweepPoint) float64 { return float64(p.Rules[k]) }})
	}
	var fits []SweepFit
	for _, m := range metrics {
		var xs, ys []float64
		for _, p := range ok {
			if v := m.get(p); v > 0 && p.Services > 0 {
				xs = append(xs, float64(p.Services))
				ys = append(ys, v)
			}
		}
		if f, err := FitPowerLaw(xs, ys); err == nil {
			f.Metric = m.name
			fits = append(fits, f)
		}
	}
	return fits
}

// FitPowerLaw fits y = e^a x^b by least squares on ln y = a + b ln x and
// returns b as the exponent, a as the intercept and the R² of the line in
// log space. It needs at least two points with distinct positive x and
// positive y.
func FitPowerLaw(xs, ys []float64) (SweepFit, error) {
	if len(xs) != len(ys) {
		return SweepFit{}, fmt.Errorf("fit: %d x values, %d y values", len(xs), len(ys))
	}
	lx, ly := make([]float64, len(xs)), make([]float64, len(ys))
	distinct := map[float64]bool{}
	for i := range xs {
		if !(xs[i] > 0) || !(ys[i] > 0) || math.IsInf(xs[i], 0) || math.IsInf(ys[i], 0) {
			return SweepFit{}, fmt.Errorf("fit: point %d (%g, %g) is not positive and finite", i, xs[i], ys[i])
		}
		lx[i], ly[i] = math.Log(xs[i]), math.Log(ys[i])
		distinct[xs[i]] = true
	}
	if len(distinct) < 2 {
		return SweepFit{}, fmt.Errorf("fit: needs two distinct sizes, have %d", len(distinct))
	}
	if slices.Min(ys) == slices.Max(ys) {
		// A constant: the horizontal line fits exactly (RSquared would
		// divide zero by zero).
		return SweepFit{Exponent: 0, Intercept: ly[0], RSquared: 1, Points: len(xs)}, nil
	}
	a, b := stat.LinearRegression(lx, ly, nil, false)
	return SweepFit{Exponent: b, Intercept: a, RSquared: stat.RSquared(lx, ly, nil, a, b), Points: len(xs)}, nil
}

// Fit returns the fit of metric, or nil.
func (sm *SweepMode) Fit(metric string) *SweepFit {
	for i := range sm.Fits {
		if sm.Fits[i].Metric == metric {
			return &sm.Fits[i]
		}
	}
	return nil
}

// HeadlineRuleKind is the rule count kind that says most about the mode:
// real servers for IPVS, nat rules for iptables, rules for nftables.
func (sm *SweepMode) HeadlineRuleKind() string {
	for _, k := range []string{"ipvs/realServers", "iptables/nat", "nftables/rules"} {
		for _, p := range sm.Points {
			if _, ok := p.Rules[k]; ok {
				return k
			}
		}
	}
	for _, p := range sm.Points {
		if keys := countKeys(p.Rules); len(keys) > 0 {
			return keys[0]
		}
	}
	return ""
}
