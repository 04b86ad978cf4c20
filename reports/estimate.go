package reports

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Calibration mirrors proxier.Calibration in the result schema: unit
// costs by kind (iptables, ipset, ipvs, cpu), seconds per operation.
type Calibration struct {
	Kinds map[string]CalibrationKind `json:"kinds"`
	// Taken is when the calibration began (zero in results from before
	// it was kept).
	Taken time.Time `json:"taken,omitzero"`
}

// CalibrationKind is one measured unit cost.
type CalibrationKind struct {
	Op     string  `json:"op"`
	Runs   int     `json:"runs"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Samples are the runs' seconds per operation (results written
	// before they were kept have none).
	Samples []float64 `json:"samples,omitempty"`
}

// NativeEstimate is what a VM mode's syncs would take on the host,
// estimated kind by kind: each sync's time in timed calls of a kind is
// divided by that kind's slowdown, the rest of it (the proxier's own work)
// by the CPU slowdown. It is an estimate, labelled as one; it is never
// compared with host timings as if measured.
type NativeEstimate struct {
	Method string `json:"method"`
	// Factors are the slowdowns (VM/host) by kind: estimate, low, high.
	Factors map[string][3]float64 `json:"factors"`
	// FactorSources say what each slowdown was measured on.
	FactorSources map[string]string `json:"factorSources,omitempty"`
	// FirstSync and SyncP50 in seconds: estimate, low, high.
	FirstSync [3]float64 `json:"firstSync"`
	SyncP50   [3]float64 `json:"syncP50"`
	SyncP99   [3]float64 `json:"syncP99"`
	// FirstSyncDraws is how many first syncs FirstSync rests on: with
	// repeats (ModeResult.FirstSyncRepeats) its estimate is their
	// estimates' median, and its range runs from the lowest low to the
	// highest high. 0 or 1: the run's first sync alone.
	FirstSyncDraws int `json:"firstSyncDraws,omitempty"`
	// Check is the estimate's test against a measurement: set on the VM
	// entry that runs the same workload as a host entry.
	Check *EstimateCheck `json:"check,omitempty"`
	// Widened is set when the ranges were widened by the calibration's
	// miss on a twin (Widen).
	Widened *Widening `json:"widened,omitempty"`
}

// Widening records how an estimate's ranges were widened: by Miss, the
// twin's host-measured first sync over its calibration-only estimate.
type Widening struct {
	Twin string  `json:"twin"`
	Miss float64 `json:"miss"`
}

// EstimateCheck compares the estimated first sync of a VM entry with the
// first sync its twin measured on the host in the same run. That estimate
// uses the calibrations alone, so the check is out of sample: it tests the
// unit costs the other VM entries' estimates rest on.
type EstimateCheck struct {
	HostEntry string `json:"hostEntry"`
	// HostFirstSync is the twin's first sync; with repeats, the median of
	// HostFirstSyncs, every first sync it measured.
	HostFirstSync  float64   `json:"hostFirstSync"`
	HostFirstSyncs []float64 `json:"hostFirstSyncs,omitempty"`
	Covered        bool      `json:"covered"`
	// HostRestores and VMRestores are the table restore's calibration
	// (its median, seconds) in each of the twins' nodes, the run's and
	// each repeat's, in the order they ran (NodeSpeeds): how far the
	// machine's speed moved while the first syncs were drawn, which the
	// estimate's range does not hold. Set with repeats.
	HostRestores []float64 `json:"hostRestores,omitempty"`
	VMRestores   []float64 `json:"vmRestores,omitempty"`
}

// restoreKind is the calibration kind NodeSpeeds follows: the restore of
// a table shaped like kube-proxy's, the largest part of an iptables first
// sync (proxier.CalibrationTableRestore).
const restoreKind = "iptables-restore"

// NodeSpeeds records the table restore's calibration in each node of the
// twins, host and VM (nil ones skipped), when either side has more than
// one: with --twin-repeats, the check then says how steady the machine
// was. Measured here: within one run of 7 nodes a side, the host's moved
// from 31.5 to 47.8 ms.
func (c *EstimateCheck) NodeSpeeds(host, vm []*Calibration) {
	medians := func(cals []*Calibration) []float64 {
		var out []float64
		for _, cal := range cals {
			if cal == nil {
				continue
			}
			if k, ok := cal.Kinds[restoreKind]; ok && k.Median > 0 {
				out = append(out, k.Median)
			}
		}
		return out
	}
	h, v := medians(host), medians(vm)
	if len(h) > 1 || len(v) > 1 {
		c.HostRestores, c.VMRestores = h, v
	}
}

// Slowdowns are the VM/host factors by kind of sync time measured in one
// run, each with its 95% interval, and what each was measured on.
type Slowdowns struct {
	Factors map[string][3]float64
	Sources map[string]string
	// Twin names the host and VM entries whose first syncs gave the CPU
	// and iptables slowdowns; empty when the calibration gave them.
	Twin [2]string
}

// PoolCalibrations is one calibration of every run of cals, kind by kind
// (nil ones are skipped): the samples of every node, their median, and
// the extremes. The twin check pools its nodes' calibrations, taken at
// the start of the run's node and of each repeat's, so its unit costs
// hold the machine's speed over the run, not at one moment. nil when
// there is nothing to pool.
func PoolCalibrations(cals ...*Calibration) *Calibration {
	var out *Calibration
	for _, c := range cals {
		if c == nil {
			continue
		}
		if out == nil {
			out = &Calibration{Kinds: map[string]CalibrationKind{}, Taken: c.Taken}
		}
		for kind, k := range c.Kinds {
			p, ok := out.Kinds[kind]
			if !ok {
				p = CalibrationKind{Op: k.Op, Min: k.Min, Max: k.Max}
			}
			p.Runs += k.Runs
			p.Min, p.Max = min(p.Min, k.Min), max(p.Max, k.Max)
			p.Samples = append(p.Samples, k.Samples...)
			p.Median = k.Median
			if len(p.Samples) > 0 {
				p.Median = median(p.Samples)
			}
			out.Kinds[kind] = p
		}
	}
	return out
}

const estimateMethod = "per sync: time in timed calls of each kind (iptables program runs, ipset program runs, IPVS netlink) divided by that kind's VM/host slowdown, the rest (kube-proxy's own work) by the CPU slowdown. " +
	"Slowdowns of the timed calls come from the same operations timed in the VM's node and in a node on the host in this run (Calibration: 5-200 runs each), each a Hodges-Lehmann ratio with its 95% interval; iptables-restore runs scale by the restore of a table shaped like kube-proxy's (thousands of rules), the other iptables runs by a 50-rule chain's. " +
	"The CPU and iptables slowdowns come from the same workload on both kernels when the scenario has one and the entries ran one at a time: the first sync of a mode entry on the host and of its twin in the VM, outside their timed calls and in their iptables runs (one sync each, or with --twin-repeats the medians of each side's first syncs: a point value); else from the calibration. " +
	"Low/high take every slowdown at its interval's end; they cover the calibrations' uncertainty, not the VM run's own noise. " +
	"With repeated first syncs (kpsim run --twin-repeats: fresh proxiers at the initial API state), the first sync's estimate is the median of their estimates and its range runs from the lowest low to the highest high, so it holds the VM's spread between first syncs too; the twin's check then compares it with the median of the host twin's first syncs. " +
	"Each repeat's nodes calibrate before its first sync, on both kernels, and the twin's check pools every calibration of its nodes (the run's and each repeat's), so its unit costs hold the machine's speed over the run rather than at its start. " +
	"The twin's own estimate uses the calibration alone and is checked against what the host measured; when it misses, the ranges of the estimates that rest on that twin widen by the miss."

// PartKind is the kind of a Sync.Kernel part: "iptables" for
// "iptables-restore", "nft" for "nft-list".
func PartKind(part string) string {
	kind, _, _ := strings.Cut(part, "-")
	return kind
}

// ownWork is the seconds of a sync outside its timed calls.
func ownWork(s Sync) float64 {
	v := s.Seconds
	for _, secs := range s.Kernel {
		v -= secs
	}
	return v
}

// MeasureSlowdowns takes each kind's slowdown from the calibrations'
// samples (results from before samples were kept: their medians, with
// the extremes for the interval), and the CPU and iptables slowdowns from
// the twins' first syncs when host and vm (entries of one mode and
// backend, one on each kernel) are given and both have one; a twin's
// iptables slowdown then scales every iptables part, the table restore's
// calibration included. Measured here (2000x10, one idle run): a 50-rule
// restore 13.8x slower in the VM, iptables-legacy's first-sync restores
// 11.1x. kube-proxy's own work in the first sync slowed down 11.5-15.4x
// in seven idle runs where the CPU calibration (upstream's proxier) at 400
// Services x 4 endpoints gave 12.1-18.3x, and 10.2-10.6x in three where
// it ran at 2000 x 10 and gave 9.9-12.1x.
func MeasureSlowdowns(host, vm *ModeResult, hostCal, vmCal *Calibration) Slowdowns {
	sl := Slowdowns{Factors: map[string][3]float64{}, Sources: map[string]string{}}
	if hostCal != nil && vmCal != nil {
		for kind, v := range vmCal.Kinds {
			h, ok := hostCal.Kinds[kind]
			if !ok || h.Median <= 0 || h.Min <= 0 || h.Max <= 0 {
				continue
			}
			if r, err := EstimateRatio(h.Samples, v.Samples); err == nil && len(h.Samples) >= 5 && len(v.Samples) >= 5 {
				sl.Factors[kind] = [3]float64{r.Ratio, r.Low, r.High}
				sl.Sources[kind] = fmt.Sprintf("%s (%d runs on the host, %d in the VM)", v.Op, len(h.Samples), len(v.Samples))
				continue
			}
			sl.Factors[kind] = [3]float64{v.Median / h.Median, v.Min / h.Max, v.Max / h.Min}
			sl.Sources[kind] = fmt.Sprintf("%s (medians; range from the extremes)", v.Op)
		}
	}
	if host == nil || vm == nil {
		return sl
	}
	hd, vd := firstSyncs(host), firstSyncs(vm)
	if len(hd) == 0 || len(vd) == 0 {
		return sl
	}
	// With repeats, each side's median over its first syncs.
	part := func(draws []Sync, f func(Sync) float64) float64 {
		xs := make([]float64, len(draws))
		for i, s := range draws {
			xs[i] = f(s)
		}
		return median(xs)
	}
	iptablesSeconds := func(s Sync) float64 { return kindSeconds(s, "iptables") }
	for _, kind := range []string{"cpu", "iptables"} {
		what, h, v := "kube-proxy's own work (outside timed calls)", part(hd, ownWork), part(vd, ownWork)
		if kind == "iptables" {
			what, h, v = "iptables program runs", part(hd, iptablesSeconds), part(vd, iptablesSeconds)
		}
		if h <= 0 || v <= 0 {
			continue
		}
		if kind == "iptables" {
			for k := range sl.Factors {
				if k != kind && PartKind(k) == kind {
					delete(sl.Factors, k)
					delete(sl.Sources, k)
				}
			}
		}
		sl.Factors[kind] = [3]float64{v / h, v / h, v / h}
		sl.Sources[kind] = fmt.Sprintf("%s in the first sync, the same workload: %s on the host %s, %s in the VM %s",
			what, host.Name, seconds(h), vm.Name, seconds(v))
		if len(hd) > 1 || len(vd) > 1 {
			sl.Sources[kind] += fmt.Sprintf(" (medians of %d and %d first syncs)", len(hd), len(vd))
		}
		sl.Twin = [2]string{host.Name, vm.Name}
	}
	return sl
}

// kindSeconds is the seconds of a sync in timed calls of kind.
func kindSeconds(s Sync, kind string) float64 {
	v := 0.0
	for part, secs := range s.Kernel {
		if PartKind(part) == kind {
			v += secs
		}
	}
	return v
}

// EstimateNative scales a VM mode's syncs to the host with slowdowns
// measured in the same run; nil when a needed kind is missing.
func EstimateNative(m *ModeResult, sl Slowdowns) *NativeEstimate {
	if len(m.Syncs) == 0 {
		return nil
	}
	cpu, ok := sl.Factors["cpu"]
	if !ok {
		return nil
	}
	e := &NativeEstimate{Method: estimateMethod, Factors: map[string][3]float64{}, FactorSources: map[string]string{}}
	for k, f := range sl.Factors {
		e.Factors[k] = f
		e.FactorSources[k] = sl.Sources[k]
	}
	estimate := func(s Sync) ([3]float64, bool) {
		var out [3]float64
		rest := s.Seconds
		for part, secs := range s.Kernel {
			f, ok := e.Factors[part]
			if !ok {
				f, ok = e.Factors[PartKind(part)]
			}
			if !ok {
				return out, false
			}
			rest -= secs
			for i := range out {
				out[i] += secs / f[i]
			}
		}
		rest = max(rest, 0)
		for i := range out {
			out[i] += rest / cpu[i]
		}
		// Low uses the smallest slowdown, so it is the largest estimate.
		out[1], out[2] = out[2], out[1]
		return out, true
	}
	first, ok := estimate(m.Syncs[0])
	if !ok {
		return nil
	}
	e.FirstSync = first
	if draws := firstSyncs(m); len(draws) > 1 {
		// draws[0] is m.Syncs[0], estimated above.
		centres := []float64{first[0]}
		for _, s := range draws[1:] {
			v, ok := estimate(s)
			if !ok {
				return nil
			}
			centres = append(centres, v[0])
			e.FirstSync[1] = min(e.FirstSync[1], v[1])
			e.FirstSync[2] = max(e.FirstSync[2], v[2])
		}
		e.FirstSync[0] = median(centres)
		e.FirstSyncDraws = len(draws)
	}
	var ests [][3]float64
	for _, s := range m.Syncs {
		if v, ok := estimate(s); ok {
			ests = append(ests, v)
		}
	}
	for i := range 3 {
		xs := make([]float64, len(ests))
		for j, v := range ests {
			xs[j] = v[i]
		}
		sort.Float64s(xs)
		sum := Summarize(xs)
		e.SyncP50[i], e.SyncP99[i] = sum.P50, sum.P99
	}
	return e
}

// CheckAgainst records whether the first sync's range covers what twin
// measured on the host.
func (e *NativeEstimate) CheckAgainst(twin *ModeResult) {
	draws := firstSyncs(twin)
	if len(draws) == 0 {
		return
	}
	c := &EstimateCheck{HostEntry: twin.Name, HostFirstSync: draws[0].Seconds}
	if len(draws) > 1 {
		for _, s := range draws {
			c.HostFirstSyncs = append(c.HostFirstSyncs, s.Seconds)
		}
		c.HostFirstSync = median(c.HostFirstSyncs)
	}
	c.Covered = e.FirstSync[1] <= c.HostFirstSync && c.HostFirstSync <= e.FirstSync[2]
	e.Check = c
}

// firstSyncs is m's first sync and its repeats (FirstSyncRepeats) that
// succeeded; empty when the run's own first sync failed.
func firstSyncs(m *ModeResult) []Sync {
	if len(m.Syncs) == 0 || !m.Syncs[0].Succeeded {
		return nil
	}
	out := []Sync{m.Syncs[0]}
	for _, s := range m.FirstSyncRepeats {
		if s.Succeeded {
			out = append(out, s)
		}
	}
	return out
}

// median of xs (not empty), the mean of the middle two for an even
// count (Summarize's P50 takes the lower one: with two draws, the smaller
// draw); xs is left as it was.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Widen stretches the ranges by the calibration's miss on twin (its
// Check): the unit costs' own error, which their sampling intervals do not
// hold. A miss of +13% (the host measured 13% more than the calibration
// said) raises every high end by 13%; a miss the twin's range covered
// changes nothing.
func (e *NativeEstimate) Widen(twin *NativeEstimate, name string) {
	c := twin.Check
	if c == nil || c.Covered || twin.FirstSync[0] <= 0 {
		return
	}
	miss := c.HostFirstSync / twin.FirstSync[0]
	for _, v := range []*[3]float64{&e.FirstSync, &e.SyncP50, &e.SyncP99} {
		v[1] *= min(miss, 1)
		v[2] *= max(miss, 1)
	}
	e.Widened = &Widening{Twin: name, Miss: miss}
}

// Spread is the range's larger distance from the estimate, as a fraction
// of it.
func Spread(v [3]float64) float64 {
	if v[0] <= 0 {
		return 0
	}
	return max(v[0]-v[1], v[2]-v[0]) / v[0]
}

// String is one line for the summary.
func (e *NativeEstimate) String() string {
	kinds := make([]string, 0, len(e.Factors))
	for k := range e.Factors {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var fs []string
	for _, k := range kinds {
		f := e.Factors[k]
		fs = append(fs, fmt.Sprintf("%s %.1fx [%.1f-%.1f]", k, f[0], f[1], f[2]))
	}
	draws := ""
	if e.FirstSyncDraws > 1 {
		draws = fmt.Sprintf(", over %d first syncs", e.FirstSyncDraws)
	}
	out := fmt.Sprintf("estimated on the host: first sync %s (%s-%s, ±%.0f%%%s), sync p50 %s (%s-%s); VM slowdowns %s",
		seconds(e.FirstSync[0]), seconds(e.FirstSync[1]), seconds(e.FirstSync[2]), 100*Spread(e.FirstSync), draws,
		seconds(e.SyncP50[0]), seconds(e.SyncP50[1]), seconds(e.SyncP50[2]), strings.Join(fs, ", "))
	if w := e.Widened; w != nil {
		out += fmt.Sprintf("; ranges widened by the calibration's miss on %s (%+.0f%%)", w.Twin, 100*(w.Miss-1))
	}
	if c := e.Check; c != nil {
		verdict := "covers it"
		if !c.Covered {
			verdict = "does NOT cover it"
		}
		measured := seconds(c.HostFirstSync)
		if n := len(c.HostFirstSyncs); n > 1 {
			measured = fmt.Sprintf("%s (the median of %d first syncs, %s-%s)", measured, n, seconds(slices.Min(c.HostFirstSyncs)), seconds(slices.Max(c.HostFirstSyncs)))
		}
		out += fmt.Sprintf("; %s measured %s on the host: the range %s", c.HostEntry, measured, verdict)
		if speeds := nodeSpeeds(c); speeds != "" {
			out += "; " + speeds
		}
	}
	return out
}

// nodeSpeeds is the check's table-restore calibrations node by node, one
// phrase; empty without them.
func nodeSpeeds(c *EstimateCheck) string {
	var sides []string
	for _, side := range []struct {
		name string
		xs   []float64
	}{{"host", c.HostRestores}, {"VM", c.VMRestores}} {
		if len(side.xs) < 2 {
			continue // one node: nothing moved that it can show
		}
		lo, hi := slices.Min(side.xs), slices.Max(side.xs)
		sides = append(sides, fmt.Sprintf("%s %s-%s (%d nodes, %+.0f%%)", side.name, seconds(lo), seconds(hi), len(side.xs), 100*(hi/lo-1)))
	}
	if len(sides) == 0 {
		return ""
	}
	return "the table restore's calibration from node to node: " + strings.Join(sides, ", ")
}
