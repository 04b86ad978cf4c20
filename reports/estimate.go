package reports

import (
	"fmt"
	"sort"
	"strings"
)

// Calibration mirrors proxier.Calibration in the result schema: unit
// costs by kind (iptables, ipset, ipvs, cpu), seconds per operation.
type Calibration struct {
	Kinds map[string]CalibrationKind `json:"kinds"`
}

// CalibrationKind is one measured unit cost.
type CalibrationKind struct {
	Op     string  `json:"op"`
	Runs   int     `json:"runs"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// NativeEstimate is what a VM mode's syncs would take on the host,
// estimated kind by kind: each sync's time in timed calls of a kind is
// divided by that kind's slowdown (VM median / host median of the same
// operation, both measured in this run), the rest by the CPU slowdown.
// Low and High use the calibrations' extremes (VM min / host max, VM max
// / host min). It is an estimate, labelled as one; it is never compared
// with host timings as if measured.
type NativeEstimate struct {
	Method string `json:"method"`
	// Factors are the slowdowns by kind: median, low, high.
	Factors map[string][3]float64 `json:"factors"`
	// FirstSync and SyncP50 in seconds: estimate, low, high.
	FirstSync [3]float64 `json:"firstSync"`
	SyncP50   [3]float64 `json:"syncP50"`
	SyncP99   [3]float64 `json:"syncP99"`
}

const estimateMethod = "per sync: time in timed calls of each kind (iptables program runs, ipset program runs, IPVS netlink) divided by that kind's VM/host slowdown, the rest by the CPU slowdown; slowdowns from the same operations timed in the VM's node and in a node on the host in this run (Calibration); low/high from the calibrations' min and max"

// PartKind is the kind of a Sync.Kernel part: "iptables" for
// "iptables-restore", "nft" for "nft-list".
func PartKind(part string) string {
	kind, _, _ := strings.Cut(part, "-")
	return kind
}

// EstimateNative scales a VM mode's syncs to the host with two
// calibrations taken in the same run; nil when a needed kind is missing.
func EstimateNative(m *ModeResult, host, vm *Calibration) *NativeEstimate {
	if host == nil || vm == nil || len(m.Syncs) == 0 {
		return nil
	}
	e := &NativeEstimate{Method: estimateMethod, Factors: map[string][3]float64{}}
	for kind, v := range vm.Kinds {
		h, ok := host.Kinds[kind]
		if !ok || h.Median <= 0 || h.Min <= 0 || h.Max <= 0 {
			continue
		}
		e.Factors[kind] = [3]float64{v.Median / h.Median, v.Min / h.Max, v.Max / h.Min}
	}
	cpu, ok := e.Factors["cpu"]
	if !ok {
		return nil
	}
	estimate := func(s Sync) ([3]float64, bool) {
		var out [3]float64
		rest := s.Seconds
		for part, secs := range s.Kernel {
			f, ok := e.Factors[PartKind(part)]
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

// String is one line for the summary.
func (e *NativeEstimate) String() string {
	kinds := make([]string, 0, len(e.Factors))
	for k := range e.Factors {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var fs []string
	for _, k := range kinds {
		fs = append(fs, fmt.Sprintf("%s %.1fx", k, e.Factors[k][0]))
	}
	return fmt.Sprintf("estimated on the host: first sync %s (%s-%s), sync p50 %s (%s-%s); VM slowdowns %s",
		seconds(e.FirstSync[0]), seconds(e.FirstSync[1]), seconds(e.FirstSync[2]),
		seconds(e.SyncP50[0]), seconds(e.SyncP50[1]), seconds(e.SyncP50[2]), strings.Join(fs, ", "))
}
