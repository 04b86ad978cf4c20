package orchestrator

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// Two lanes: with spec.vmLane "beside", the entries placed in a VM run one
// after another in a lane of their own, while the host's entries run one
// after another in theirs. Under software emulation the VM's entries take
// minutes each; beside the host's they no longer add to them. A VM entry
// with a twin on the host (the same mode and backend) runs beside the host
// lane; the others wait for it to end and run alone. The lanes
// share the machine's CPUs, so the result says which entries overlapped
// for how long, and what it cost: the host's unit costs measured in nodes
// that calibrated beside the VM lane against the same measured alone
// after both lanes (measureLaneCost).

// wantLanes decides whether this run has two lanes: the scenario's
// spec.vmLane or --vm-lane says beside, and entries run both on the host
// and in a VM.
func wantLanes(s *scenarios.Scenario, o Options, placement map[string]string, variants bool) (bool, error) {
	lane := cmp.Or(o.VMLane, s.Spec.VMLane, scenarios.VMLaneAfter)
	if errs := scenarios.CheckVMLane(field.NewPath("--vm-lane"), o.VMLane); len(errs) > 0 {
		return false, badInput(errs.ToAggregate())
	}
	if lane != scenarios.VMLaneBeside {
		return false, nil
	}
	if variants || s.Spec.Sweep != nil {
		return false, badInput(fmt.Errorf("--vm-lane beside: %s", scenarios.VMLaneBesideForbidden))
	}
	var host, vm bool
	for _, k := range placement {
		host = host || k == scenarios.KernelHost
		vm = vm || k == scenarios.KernelVM
	}
	return host && vm, nil
}

// runEntries runs the scenario's mode entries: one at a time in scenario
// order, or in two lanes at once. Results keep scenario order; entries
// that did not start (the run was interrupted) are left out.
func (r *run) runEntries() ([]reports.ModeResult, *reports.Lanes) {
	results := make([]*reports.ModeResult, len(r.modes))
	windows := make([][2]time.Time, len(r.modes))
	runLane := func(idx []int) {
		for _, i := range idx {
			if r.ctx.Err() != nil {
				return
			}
			start := time.Now()
			mr := r.runMode(r.main, r.modes[i])
			windows[i] = [2]time.Time{start, time.Now()}
			results[i] = &mr
		}
	}
	var hostIdx, vmIdx []int
	for i, m := range r.modes {
		if r.placement[m.Name] == scenarios.KernelVM {
			vmIdx = append(vmIdx, i)
		} else {
			hostIdx = append(hostIdx, i)
		}
	}
	var lanes *reports.Lanes
	if r.lanes {
		// A VM entry with a twin on the host runs beside the host lane:
		// both twins are measured while the lanes share the machine, so
		// they compare like with like. The others run after the host
		// lane, alone: their figures are the ones the VM exists for.
		var beside, after []int
		for _, i := range vmIdx {
			if hasHostTwin(r.modes, r.placement, r.modes[i]) {
				beside = append(beside, i)
			} else {
				after = append(after, i)
			}
		}
		fmt.Fprintf(r.stderr, "two lanes (spec.vmLane: beside): host %v; VM %v beside it (they share the machine's CPUs), then %v alone\n",
			names(r.modes, hostIdx), names(r.modes, beside), names(r.modes, after))
		hostDone := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			runLane(beside)
			<-hostDone
			runLane(after)
		})
		runLane(hostIdx)
		close(hostDone)
		wg.Wait()
		lanes = &reports.Lanes{Host: laneEntries(r.modes, hostIdx, vmIdx, windows), VM: laneEntries(r.modes, vmIdx, hostIdx, windows)}
	} else {
		all := make([]int, len(r.modes))
		for i := range all {
			all[i] = i
		}
		runLane(all)
	}
	var out []reports.ModeResult
	for _, mr := range results {
		if mr != nil {
			out = append(out, *mr)
		}
	}
	return out, lanes
}

// hasHostTwin: an entry on the host runs the same workload as m.
func hasHostTwin(modes []scenarios.ModeSpec, placement map[string]string, m scenarios.ModeSpec) bool {
	for _, h := range modes {
		if placement[h.Name] != scenarios.KernelVM && workload(h.Mode, h.Backend) == workload(m.Mode, m.Backend) {
			return true
		}
	}
	return false
}

// workload names what an entry programs: its mode, and the iptables
// backend (legacy when unset) of the modes that run iptables.
func workload(mode, backend string) string {
	if mode == scenarios.ModeNFTables {
		return mode
	}
	return mode + "/" + cmp.Or(backend, scenarios.BackendLegacy)
}

func names(modes []scenarios.ModeSpec, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = modes[i].Name
	}
	return out
}

// laneEntries are the lane's entries that ran, each with the time the
// other lane was running beside it.
func laneEntries(modes []scenarios.ModeSpec, lane, other []int, windows [][2]time.Time) []reports.LaneEntry {
	var out []reports.LaneEntry
	for _, i := range lane {
		w := windows[i]
		if w[0].IsZero() {
			continue
		}
		e := reports.LaneEntry{Name: modes[i].Name, Started: w[0], Finished: w[1]}
		for _, j := range other {
			if o := windows[j]; !o[0].IsZero() {
				e.Beside += overlap(w, o).Seconds()
			}
		}
		out = append(out, e)
	}
	return out
}

func overlap(a, b [2]time.Time) time.Duration {
	start, end := a[0], a[1]
	if b[0].After(start) {
		start = b[0]
	}
	if b[1].Before(end) {
		end = b[1]
	}
	return max(end.Sub(start), 0)
}

// measureLaneCost compares unit costs measured beside the other lane
// with the same measured alone. Every node calibrates before its proxier
// starts. Host: the host entries' nodes that calibrated while the VM lane
// ran, against the host calibration node, which runs after both lanes.
// VM: the VM entries' nodes that calibrated while the host lane ran,
// against those that calibrated after it. A kind is compared only between
// calibrations of the same operation (iptables-nft's restores are not
// iptables-legacy's).
func measureLaneCost(res *reports.Result) {
	l := res.Lanes
	if l == nil {
		return
	}
	calibrations := func(lane []reports.LaneEntry, other []reports.LaneEntry) (beside, alone []*reports.ModeResult) {
		for _, e := range lane {
			for i := range res.Modes {
				m := &res.Modes[i]
				if m.Name != e.Name || m.Calibration == nil || m.Calibration.Taken.IsZero() {
					continue
				}
				if busyAt(other, m.Calibration.Taken) {
					beside = append(beside, m)
				} else {
					alone = append(alone, m)
				}
			}
		}
		return beside, alone
	}
	hostBeside, _ := calibrations(l.Host, l.VM)
	if res.HostCalibration != nil && len(hostBeside) > 0 {
		l.HostCost = laneCost([]*reports.Calibration{res.HostCalibration}, cals(hostBeside))
		l.HostCostEntries = entryNames(hostBeside)
	}
	vmBeside, vmAlone := calibrations(l.VM, l.Host)
	if len(vmBeside) > 0 && len(vmAlone) > 0 {
		l.VMCost = laneCost(cals(vmAlone), cals(vmBeside))
		l.VMCostEntries = [2][]string{entryNames(vmBeside), entryNames(vmAlone)}
	}
}

func cals(ms []*reports.ModeResult) []*reports.Calibration {
	out := make([]*reports.Calibration, len(ms))
	for i, m := range ms {
		out[i] = m.Calibration
	}
	return out
}

func entryNames(ms []*reports.ModeResult) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// laneCost is, per kind, the ratio of the beside samples to the alone
// ones, pooled over calibrations of the same operation as the first alone
// calibration's.
func laneCost(alone, beside []*reports.Calibration) map[string]reports.RatioShift {
	out := map[string]reports.RatioShift{}
	for kind, ref := range alone[0].Kinds {
		var a, b []float64
		for _, c := range alone {
			if k, ok := c.Kinds[kind]; ok && k.Op == ref.Op {
				a = append(a, k.Samples...)
			}
		}
		for _, c := range beside {
			if k, ok := c.Kinds[kind]; ok && k.Op == ref.Op {
				b = append(b, k.Samples...)
			}
		}
		if rs, err := reports.EstimateRatio(a, b); err == nil {
			out[kind] = rs
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// busyAt: an entry of the lane was running at t.
func busyAt(lane []reports.LaneEntry, t time.Time) bool {
	for _, e := range lane {
		if !t.Before(e.Started) && t.Before(e.Finished) {
			return true
		}
	}
	return false
}
