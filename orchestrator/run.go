package orchestrator

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/node"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// Options are a run's choices beyond the scenario file (the CLI's flags).
type Options struct {
	// Modes picks mode entries by entry name (iptables-legacy) or mode
	// (iptables); empty: the scenario's.
	Modes []string
	// Backends runs every iptables entry with each of these backends.
	Backends []string
	// Out is the run directory (default results/<run-id>).
	Out string
	// Kernel is where nodes run: auto, host or vm.
	Kernel string
	// Stderr receives progress and notes.
	Stderr io.Writer
	// Variants replace the scenario's spec.variants, Repeat its
	// spec.repeat (0: the scenario's).
	Variants []scenarios.Variant
	Repeat   int
	// VMLane replaces the scenario's spec.vmLane ("" keeps it).
	VMLane string
	// TwinRepeats is how many more first syncs each entry of a twin pair
	// (the same mode and backend on the host and in a VM) times, each by a
	// fresh proxier in a node of its own: the native estimate's check then
	// compares medians, not single first syncs.
	TwinRepeats int
}

// maxTwinRepeats bounds --twin-repeats: each repeat in the emulated VM
// boots it again (about 30 s at 2000x10 here).
const maxTwinRepeats = 10

// run is one `kpsim run`: what it runs and where its files go.
type run struct {
	ctx    context.Context
	stderr io.Writer
	// main is the scenario as given; a sweep runs other points of it.
	main  point
	modes []scenarios.ModeSpec
	// placement says where each mode entry runs: "host" or "vm".
	placement map[string]string
	id        string
	// lanes: VM entries run in a lane beside the host entries' lane.
	lanes bool
	// variants are the binaries compared in this run, resolved; nil for
	// an ordinary run.
	variants []variant
	// twinRepeats: Options.TwinRepeats.
	twinRepeats int
}

// point is one scenario document a node runs and the directory its files
// go to: the run's own, or one size of a sweep.
type point struct {
	s    *scenarios.Scenario
	file string
	data []byte
	dir  string
	// binary is the kpsim binary its nodes run: a variant's, or "" for
	// this one.
	binary string
}

// Run loads and validates the scenario file, checks this machine can run
// each mode, snapshots the host, runs every mode in its own node (a
// process in new namespaces, or a VM) and writes result.json. It returns
// the result and the run directory whenever the run happened, with an
// *Error of Kind Missed when an expectation was missed, a mode failed or
// ctx ended first; before that, an *Error of Kind BadInput or Environment
// and nothing created.
func Run(ctx context.Context, file string, o Options) (*reports.Result, string, error) {
	if o.Kernel != scenarios.KernelHost && o.Kernel != scenarios.KernelVM && o.Kernel != scenarios.KernelAuto {
		return nil, "", badInput(fmt.Errorf("--kernel %q: want auto, host or vm", o.Kernel))
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", badInput(fmt.Errorf("reading scenario: %w", err))
	}
	s, err := LoadScenario(file, data)
	if err != nil {
		return nil, "", err
	}
	r := &run{ctx: ctx, stderr: o.Stderr, main: point{s: s, file: file, data: data}}
	if r.variants, err = resolveVariants(file, s, o); err != nil {
		return nil, "", err
	}
	if r.modes, err = selectModes(s, o); err != nil {
		return nil, "", err
	}
	host := proxier.ProbeHost()
	if r.placement, err = place(o.Stderr, s, r.modes, host, o.Kernel); err != nil {
		return nil, "", err
	}
	if r.lanes, err = wantLanes(s, o, r.placement, len(r.variants) > 0); err != nil {
		return nil, "", err
	}
	if err := checkLimits(file, s, r.modes, r.placement, r.lanes); err != nil {
		return nil, "", err
	}
	if r.twinRepeats = o.TwinRepeats; r.twinRepeats < 0 || r.twinRepeats > maxTwinRepeats {
		return nil, "", badInput(fmt.Errorf("--twin-repeats %d: want 0 to %d", o.TwinRepeats, maxTwinRepeats))
	}
	if r.twinRepeats > 0 && !slices.ContainsFunc(r.modes, r.hasTwin) {
		return nil, "", badInput(errors.New("--twin-repeats: the run has no twin pair (a host entry and a VM entry of the same mode and backend, as iptables-legacy and iptables-legacy-vm in scenarios/2000x10.yaml)"))
	}
	if r.twinRepeats > 0 && (len(s.Spec.Steps) == 0 || s.Spec.Steps[0].Sync == nil) {
		return nil, "", badInput(fmt.Errorf("--twin-repeats: %s's first step is not a sync, so its first sync does not meet the initial API state the repeats meet", file))
	}
	if !host.Root {
		return nil, "", environment(errors.New("kpsim run needs root to create network namespaces: run it with sudo"))
	}

	r.id = netns.NewRunID()
	dir := o.Out
	if dir == "" {
		dir = filepath.Join("results", r.id)
	}
	if r.main.dir, err = filepath.Abs(dir); err != nil {
		return nil, "", badInput(err)
	}
	if err := os.MkdirAll(r.main.dir, 0o755); err != nil {
		return nil, "", environment(fmt.Errorf("creating run directory: %w", err))
	}
	fmt.Fprintf(o.Stderr, "run %s: writing to %s\n", r.id, r.main.dir)
	res := r.execute(host)
	if err := res.WriteFile(filepath.Join(r.main.dir, "result.json")); err != nil {
		return res, r.main.dir, environment(err)
	}
	if ctx.Err() != nil {
		return res, r.main.dir, &Error{Missed, fmt.Errorf("interrupted: %w", ctx.Err())}
	}
	if !res.Passed {
		return res, r.main.dir, &Error{Missed, fmt.Errorf("expectations missed:\n%s", missedText(res))}
	}
	return res, r.main.dir, nil
}

// execute runs the modes between two snapshots of the host and judges the
// result.
func (r *run) execute(host *proxier.Host) *reports.Result {
	s := r.main.s
	sum := sha256.Sum256(r.main.data)
	res := &reports.Result{
		SchemaVersion: reports.SchemaVersion,
		RunID:         r.id,
		Scenario:      reports.ScenarioInfo{Name: s.Metadata.Name, File: r.main.file, Seed: s.Spec.Seed, SHA256: hex.EncodeToString(sum[:])},
		Environment: reports.Environment{
			KernelRelease:    host.KernelRelease,
			Kernel:           scenarios.KernelHost,
			CPUs:             runtime.NumCPU(),
			KubeProxyVersion: proxier.KubernetesVersion(),
			GoVersion:        runtime.Version(),
		},
		Started: time.Now(),
	}

	before, snapErr := netns.TakeHostSnapshot()
	switch {
	case s.Spec.Sweep != nil:
		res.Modes = r.sweep()
	case len(r.variants) > 0:
		res.Modes = r.variantRuns()
		res.Variants = r.variantInfo()
	default:
		res.Modes, res.Lanes = r.runEntries()
	}
	r.estimateVMTimings(res)
	measureLaneCost(res)
	res.Sweep = sweepSummary(s, r.modes, res)
	res.Host = hostCheck(before, snapErr)
	res.Finished = time.Now()
	res.Expectations = reports.CheckExpectations(s, res)
	res.Passed = reports.AllPassed(res.Expectations)
	for _, m := range res.Modes {
		if m.Error != "" {
			res.Passed = false
		}
	}
	return res
}

// estimateVMTimings gives VM modes' timings a native estimate from unit
// costs measured in the VM's node and in a node on the host, in this run.
func (r *run) estimateVMTimings(res *reports.Result) {
	calBackend := ""
	for _, m := range r.modes {
		if r.placement[m.Name] == scenarios.KernelVM && r.ctx.Err() == nil {
			if calBackend = m.Backend; calBackend == "" {
				calBackend = scenarios.BackendLegacy
			}
			break
		}
	}
	if calBackend == "" {
		return
	}
	var out node.Result
	cfg := netns.NodeConfig{RunID: r.id}
	in := node.Input{Version: node.ProtocolVersion, Calibrate: calBackend}
	err := netns.RunNode(r.ctx, netns.NodeOptions{Name: node.MainName, Config: cfg, Stdout: io.Discard, Stderr: io.Discard}, in, &out)
	if err == nil {
		err = node.CheckVersion("the calibration node's result", out.Version)
	}
	if err == nil && out.Calibration == nil {
		err = errors.New("the calibration node returned no calibration")
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "host calibration failed, no native estimates: %v\n", err)
		return
	}
	res.HostCalibration = out.Calibration
	inVM := func(m *reports.ModeResult) bool {
		return m.Placement != nil && m.Placement.Kernel == scenarios.KernelVM
	}
	// First the entries with a twin on the host: estimated from the
	// calibrations alone and checked against what the twin measured, with
	// the twins' own nodes' calibrations, taken under the conditions of
	// their syncs (beside the other lane, with lanes).
	for i := range res.Modes {
		m := &res.Modes[i]
		if !inVM(m) {
			continue
		}
		twin := hostTwin(res.Modes, m)
		if twin == nil {
			continue
		}
		// With --twin-repeats, every calibration of the twins' nodes,
		// pooled: the machine's speed drifts within a run, and the check
		// says how far (NodeSpeeds).
		hostCals := append([]*reports.Calibration{twin.Calibration}, twin.FirstSyncRepeatCalibrations...)
		vmCals := append([]*reports.Calibration{m.Calibration}, m.FirstSyncRepeatCalibrations...)
		hostCal := reports.PoolCalibrations(append([]*reports.Calibration{cmp.Or(twin.Calibration, res.HostCalibration)}, hostCals[1:]...)...)
		vmCal := reports.PoolCalibrations(vmCals...)
		if m.NativeEstimate = reports.EstimateNative(m, reports.MeasureSlowdowns(nil, nil, hostCal, vmCal)); m.NativeEstimate != nil {
			m.NativeEstimate.CheckAgainst(twin)
			if c := m.NativeEstimate.Check; c != nil {
				c.NodeSpeeds(hostCals, vmCals)
			}
		}
	}
	// Then the others: the CPU and iptables slowdowns from the first
	// twins' first syncs (the same workload on both kernels), the rest
	// from the calibrations (the host's from the calibration node, which
	// runs alone after every entry), the ranges widened by the
	// calibration's miss on the twin. With lanes the twins ran beside the
	// other lane and these entries after it, alone (measured: the VM
	// twin's unit costs 10-75% higher than alone, the host's 2-44%), so
	// neither the twins' ratio nor their miss would hold: the
	// calibrations, both taken alone, give every slowdown.
	var h, v *reports.ModeResult
	if res.Lanes == nil {
		h, v = twinPair(res.Modes)
	}
	for i := range res.Modes {
		m := &res.Modes[i]
		if !inVM(m) || hostTwin(res.Modes, m) != nil {
			continue
		}
		m.NativeEstimate = reports.EstimateNative(m, reports.MeasureSlowdowns(h, v, res.HostCalibration, m.Calibration))
		if m.NativeEstimate != nil && v != nil && v.NativeEstimate != nil {
			m.NativeEstimate.Widen(v.NativeEstimate, v.Name)
		}
	}
}

// hostTwin is the host entry that ran the same workload as the VM entry
// vm: the same mode and backend, at the same sweep size and variant.
func hostTwin(modes []reports.ModeResult, vm *reports.ModeResult) *reports.ModeResult {
	for i := range modes {
		h := &modes[i]
		if h.Placement == nil || h.Placement.Kernel != scenarios.KernelHost || h.Error != "" || h.Skipped != "" ||
			workload(h.Mode, h.Backend) != workload(vm.Mode, vm.Backend) {
			continue
		}
		if (h.Sweep == nil) != (vm.Sweep == nil) || h.Sweep != nil && h.Sweep.Count != vm.Sweep.Count {
			continue
		}
		if (h.Variant == nil) != (vm.Variant == nil) || h.Variant != nil && (h.Variant.Variant != vm.Variant.Variant || h.Variant.Run != vm.Variant.Run) {
			continue
		}
		return h
	}
	return nil
}

// twinPair is the first VM entry with a host twin whose first syncs give
// a CPU slowdown, and that twin; nils when there is none.
func twinPair(modes []reports.ModeResult) (host, vm *reports.ModeResult) {
	for i := range modes {
		v := &modes[i]
		if v.Placement == nil || v.Placement.Kernel != scenarios.KernelVM || v.Error != "" {
			continue
		}
		if h := hostTwin(modes, v); h != nil && reports.MeasureSlowdowns(h, v, nil, nil).Twin[0] != "" {
			return h, v
		}
	}
	return nil, nil
}

// place decides where each mode entry runs, before anything is created:
// a mode the host kernel lacks goes to a VM (an entry's every mode counts:
// the one it migrates to as well), and kernel "vm" sends every mode
// there, so modes compared run on one kernel.
func place(stderr io.Writer, s *scenarios.Scenario, modes []scenarios.ModeSpec, host *proxier.Host, kernel string) (map[string]string, error) {
	placement := map[string]string{}
	for _, m := range modes {
		a := host.Check(m.Mode, m.Backend)
		for i := range s.Spec.Steps {
			if at := s.ModeAt(m, i+1); a.OK {
				a = host.Check(at.Mode, at.Backend)
			}
		}
		want := m.Kernel
		if kernel != scenarios.KernelAuto {
			want = kernel
		}
		switch {
		case want == scenarios.KernelVM:
			placement[m.Name] = scenarios.KernelVM
		case a.OK:
			placement[m.Name] = scenarios.KernelHost
		case want == scenarios.KernelAuto && strings.Contains(a.Reason, "kernel"):
			placement[m.Name] = scenarios.KernelVM
			fmt.Fprintf(stderr, "%s: %s: running it in a VM\n", m.Name, a.Reason)
		default:
			return nil, environment(fmt.Errorf("mode %s cannot run here: %s (fix: %s)", m.Name, a.Reason, a.Fix))
		}
	}
	for _, m := range modes {
		if placement[m.Name] != scenarios.KernelVM {
			continue
		}
		for _, tool := range []string{"qemu-system-x86_64", "busybox"} {
			if _, err := exec.LookPath(tool); err != nil {
				return nil, environment(fmt.Errorf("mode %s needs a VM, and %s is missing (fix: sudo make deps, or apt-get install -y --no-install-recommends qemu-system-x86 busybox-static)", m.Name, tool))
			}
		}
	}
	return placement, nil
}

// selectModes applies --modes and --iptables-backend to the scenario's
// mode entries.
func selectModes(s *scenarios.Scenario, o Options) ([]scenarios.ModeSpec, error) {
	modes := s.Spec.Modes
	if len(o.Backends) > 0 {
		var out []scenarios.ModeSpec
		seen := map[string]bool{}
		for _, m := range modes {
			if m.Mode != scenarios.ModeIPTables {
				out = append(out, m)
				continue
			}
			for _, b := range o.Backends {
				if b != scenarios.BackendLegacy && b != scenarios.BackendNFT {
					return nil, badInput(fmt.Errorf("--iptables-backend %q: want legacy or nft", b))
				}
				if seen[b] {
					continue
				}
				seen[b] = true
				m2 := m
				m2.Backend = b
				m2.Name = scenarios.ModeIPTables + "-" + b
				out = append(out, m2)
			}
		}
		modes = out
	}
	if len(o.Modes) == 0 {
		return modes, nil
	}
	var out []scenarios.ModeSpec
	for _, want := range o.Modes {
		matches := modeMatches(modes, want, o.Kernel)
		for _, m := range matches {
			if !slices.ContainsFunc(out, func(x scenarios.ModeSpec) bool { return x.Name == m.Name }) {
				out = append(out, m)
			}
		}
		if len(matches) == 0 {
			names := make([]string, len(modes))
			for i, m := range modes {
				names[i] = m.Name
			}
			return nil, badInput(fmt.Errorf("--modes %s: the scenario has no such mode entry (it has %s)", want, strings.Join(names, ", ")))
		}
	}
	return out, nil
}

// modeMatches returns the entries --modes want names: the entry of that
// name, or the entries of that mode. When --kernel forces a placement and
// the scenario has entries of the mode meant for that kernel (kernel: vm
// for a VM, any other for the host), only those match: on 2000x10.yaml,
// `--modes iptables,ipvs --kernel vm` runs the scenario's VM iptables
// entry beside IPVS, not every iptables entry in the VM again.
func modeMatches(modes []scenarios.ModeSpec, want, kernel string) []scenarios.ModeSpec {
	var byMode, placed []scenarios.ModeSpec
	for _, m := range modes {
		if m.Name == want {
			return []scenarios.ModeSpec{m}
		}
		if m.Mode != want {
			continue
		}
		byMode = append(byMode, m)
		if (kernel == scenarios.KernelVM && m.Kernel == scenarios.KernelVM) || (kernel == scenarios.KernelHost && m.Kernel != scenarios.KernelVM) {
			placed = append(placed, m)
		}
	}
	if len(placed) > 0 {
		return placed
	}
	return byMode
}

// runMode runs one mode entry of p in its own node, then, when the
// scenario churns or asks for it, the after-churn oracle.
func (r *run) runMode(p point, m scenarios.ModeSpec) reports.ModeResult {
	vm := r.placement[m.Name] == scenarios.KernelVM
	in := node.Input{Version: node.ProtocolVersion, ScenarioFile: p.file, ScenarioYAML: p.data, Mode: m.Name, OutDir: p.dir, InVM: vm}
	mr := r.startNode(p, in, m, m.Name+".node.log")
	if mr.Error == "" && wantsOracle(p.s) && vm && p.s.Spec.Expectations.Oracle == scenarios.OracleHost {
		mr.Oracle = &reports.Oracle{Skipped: "the scenario runs the oracle on host entries only (expectations.oracle: host): in the VM it costs a second first sync"}
	} else if mr.Error == "" && wantsOracle(p.s) && r.ctx.Err() == nil {
		o := r.runOracle(p, m)
		mr.Oracle = &o
		if o.Checked {
			nameSharedLeftovers(p.dir, p.s.FinalMode(m), &mr)
		}
	}
	r.repeatFirstSync(p, m, &mr)
	return mr
}

// hasTwin says whether mode entry m has a twin in this run: an entry of
// the same mode and backend placed on the other kernel.
func (r *run) hasTwin(m scenarios.ModeSpec) bool {
	for _, o := range r.modes {
		if o.Name != m.Name && workload(o.Mode, o.Backend) == workload(m.Mode, m.Backend) &&
			(r.placement[o.Name] == scenarios.KernelVM) != (r.placement[m.Name] == scenarios.KernelVM) {
			return true
		}
	}
	return false
}

// repeatFirstSync times --twin-repeats more first syncs of a twin's
// entry, each in a node of its own, into mr.FirstSyncRepeats.
func (r *run) repeatFirstSync(p point, m scenarios.ModeSpec, mr *reports.ModeResult) {
	if r.twinRepeats == 0 || mr.Error != "" || !r.hasTwin(m) {
		return
	}
	vm := r.placement[m.Name] == scenarios.KernelVM
	for i := range r.twinRepeats {
		if r.ctx.Err() != nil {
			return
		}
		fmt.Fprintf(r.stderr, "%s: first sync %d of %d more (--twin-repeats): a fresh proxier at the initial API state\n", m.Name, i+1, r.twinRepeats)
		in := node.Input{Version: node.ProtocolVersion, ScenarioFile: p.file, ScenarioYAML: p.data, Mode: m.Name, OutDir: p.dir, InVM: vm, Repeat: true}
		rep := r.startNode(p, in, m, fmt.Sprintf("%s.repeat-%d.node.log", m.Name, i+1))
		if rep.Error != "" || len(rep.Syncs) == 0 {
			fmt.Fprintf(r.stderr, "%s: repeated first sync %d failed: %s\n", m.Name, i+1, cmp.Or(rep.Error, "no sync"))
			continue
		}
		mr.FirstSyncRepeats = append(mr.FirstSyncRepeats, rep.Syncs[0])
		mr.FirstSyncRepeatCalibrations = append(mr.FirstSyncRepeatCalibrations, rep.Calibration)
	}
}

// wantsOracle: the oracle runs when the scenario churns (the case it
// exists for), migrates or expects it.
func wantsOracle(s *scenarios.Scenario) bool {
	switch s.Spec.Expectations.Oracle {
	case scenarios.OracleSkip:
		return false
	case scenarios.OracleEqual, scenarios.OracleHost:
		return true
	}
	for _, st := range s.Spec.Steps {
		if st.Churn != nil || st.Migrate != nil {
			return true
		}
	}
	return false
}

func hostCheck(before *netns.HostSnapshot, snapErr error) reports.HostCheck {
	if snapErr != nil {
		return reports.HostCheck{Error: "snapshot before the run: " + snapErr.Error()}
	}
	after, err := netns.TakeHostSnapshot()
	if err != nil {
		return reports.HostCheck{Error: "snapshot after the run: " + err.Error()}
	}
	diff := netns.Diff(before, after)
	return reports.HostCheck{Checked: true, Unchanged: diff == "", Diff: diff}
}

// missedText lists, a line each, the expectations res missed and the
// mode entries that failed, with what was measured and why, so that the
// last lines of a run's output (all a CI log may keep) say what went
// wrong. A long reason is cut; result.json has it whole.
func missedText(res *reports.Result) string {
	const most = 400
	cut := func(s string) string {
		s = strings.Join(strings.Fields(s), " ")
		if len(s) > most {
			s = s[:most] + " ... (result.json has the rest)"
		}
		return s
	}
	var b strings.Builder
	for _, e := range res.Expectations {
		if e.Passed {
			continue
		}
		fmt.Fprintf(&b, "  %s: want %s, got %s", strings.TrimSpace(e.Name+" "+e.Mode), e.Want, e.Got)
		if e.Detail != "" {
			fmt.Fprintf(&b, ": %s", cut(e.Detail))
		}
		b.WriteByte('\n')
	}
	for _, m := range res.Modes {
		if m.Error != "" {
			fmt.Fprintf(&b, "  %s failed: %s\n", m.Name, cut(m.Error))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
