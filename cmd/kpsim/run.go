package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

type runOptions struct {
	modes    []string
	backends []string
	out      string
	kernel   string
}

func newRunCommand() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run SCENARIO",
		Short: "Run a scenario against the production proxiers",
		Long: `run loads and validates SCENARIO, checks this machine can run each mode,
snapshots the host namespace, then runs every mode in its own node process (a
new network and mount namespace) with the fake cluster, fake pods and the
upstream proxier, and writes result.json, the dataplane dumps and each node's
log to the run directory. It prints a summary table and exits 1 when an
expectation of the scenario was missed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr())
			defer stop()
			return runScenario(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], o)
		},
	}
	cmd.Flags().StringSliceVar(&o.modes, "modes", nil, "mode entries to run, by entry name (iptables-legacy) or mode (iptables: every iptables entry, or with --kernel host|vm the entries the scenario places there, if any); default: the scenario's")
	cmd.Flags().StringSliceVar(&o.backends, "iptables-backend", nil, "run every iptables mode entry with each of these backends (legacy, nft) instead of the scenario's")
	cmd.Flags().StringVar(&o.out, "out", "", "run directory (default results/<run-id>)")
	cmd.Flags().StringVar(&o.kernel, "kernel", "auto", "where nodes run: auto (each mode entry's kernel field: by default the host, or a VM for a mode the host kernel lacks), host, or vm (every mode in a VM, so the modes share one kernel)")
	return cmd
}

func runScenario(ctx context.Context, stdout, stderr io.Writer, file string, o runOptions) error {
	if o.kernel != "host" && o.kernel != "vm" && o.kernel != "auto" {
		return badInput(fmt.Errorf("--kernel %q: want auto, host or vm", o.kernel))
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return badInput(fmt.Errorf("reading scenario: %w", err))
	}
	s, err := loadScenario(file, data)
	if err != nil {
		return err
	}
	modes, err := selectModes(s, o)
	if err != nil {
		return err
	}

	// Every mode must be runnable, here or in a VM, before anything is
	// created. A mode the host kernel lacks goes to a VM; --kernel vm
	// sends every mode there, so modes compared run on one kernel.
	host := proxier.ProbeHost()
	placement := map[string]string{}
	for _, m := range modes {
		a := host.Check(m.Mode, m.Backend)
		want := m.Kernel
		if o.kernel != scenarios.KernelAuto {
			want = o.kernel
		}
		switch {
		case want == scenarios.KernelVM:
			placement[m.Name] = "vm"
		case a.OK:
			placement[m.Name] = "host"
		case want == scenarios.KernelAuto && strings.Contains(a.Reason, "kernel"):
			placement[m.Name] = "vm"
			fmt.Fprintf(stderr, "%s: %s: running it in a VM\n", m.Name, a.Reason)
		default:
			return environment(fmt.Errorf("mode %s cannot run here: %s (fix: %s)", m.Name, a.Reason, a.Fix))
		}
	}
	for name, where := range placement {
		if where != "vm" {
			continue
		}
		for _, tool := range []string{"qemu-system-x86_64", "busybox"} {
			if _, err := exec.LookPath(tool); err != nil {
				return environment(fmt.Errorf("mode %s needs a VM, and %s is missing (fix: sudo make deps, or apt-get install -y --no-install-recommends qemu-system-x86 busybox-static)", name, tool))
			}
		}
	}
	if err := checkLimits(stderr, file, s, modes, placement); err != nil {
		return err
	}
	if !host.Root {
		return environment(errors.New("kpsim run needs root to create network namespaces: run it with sudo"))
	}

	runID := netns.NewRunID()
	dir := o.out
	if dir == "" {
		dir = filepath.Join("results", runID)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return badInput(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return environment(fmt.Errorf("creating run directory: %w", err))
	}
	fmt.Fprintf(stderr, "run %s: writing to %s\n", runID, dir)
	sum := sha256.Sum256(data)
	res := &reports.Result{
		SchemaVersion: reports.SchemaVersion,
		RunID:         runID,
		Scenario:      reports.ScenarioInfo{Name: s.Metadata.Name, File: file, Seed: s.Spec.Seed, SHA256: hex.EncodeToString(sum[:])},
		Environment: reports.Environment{
			KernelRelease:    host.KernelRelease,
			Kernel:           "host",
			CPUs:             runtime.NumCPU(),
			KubeProxyVersion: proxier.KubernetesVersion(),
			GoVersion:        runtime.Version(),
		},
		Started: time.Now(),
	}

	before, snapErr := netns.TakeHostSnapshot()
	for _, m := range modes {
		if s.Spec.Sweep != nil {
			res.Modes = runSweep(ctx, stderr, s, file, data, modes, runID, dir, placement)
			break
		}
		res.Modes = append(res.Modes, runMode(ctx, stderr, s, file, data, m, runID, dir, placement[m.Name] == "vm"))
		if ctx.Err() != nil {
			break
		}
	}
	// VM timings get a native estimate from unit costs measured in the
	// VM's node and in a node on the host, in this run.
	calBackend := ""
	for _, m := range modes {
		if placement[m.Name] == "vm" && ctx.Err() == nil {
			if calBackend = m.Backend; calBackend == "" {
				calBackend = scenarios.BackendLegacy
			}
			break
		}
	}
	if calBackend != "" {
		var cal reports.Calibration
		cfg := netns.NodeConfig{RunID: runID}
		if err := netns.RunNode(ctx, netns.NodeOptions{Name: nodeMainName, Config: cfg, Stdout: io.Discard, Stderr: io.Discard}, nodeInput{Calibrate: calBackend}, &cal); err != nil {
			fmt.Fprintf(stderr, "host calibration failed, no native estimates: %v\n", err)
		} else {
			res.HostCalibration = &cal
			for i := range res.Modes {
				if pl := res.Modes[i].Placement; pl != nil && pl.Kernel == "vm" {
					res.Modes[i].NativeEstimate = reports.EstimateNative(&res.Modes[i], res.HostCalibration, res.Modes[i].Calibration)
				}
			}
		}
	}
	res.Sweep = sweepSummary(s, modes, res)
	res.Host = hostCheck(before, snapErr)
	res.Finished = time.Now()
	res.Expectations = reports.CheckExpectations(s, res)
	res.Passed = reports.AllPassed(res.Expectations)
	for _, m := range res.Modes {
		if m.Error != "" {
			res.Passed = false
		}
	}

	if err := res.WriteFile(filepath.Join(dir, "result.json")); err != nil {
		return environment(err)
	}
	// The summary on stdout, report.md and report.html beside the result
	// (kpsim report renders them again from result.json).
	if err := reportOne(stdout, dir, map[string]bool{"summary": true, "markdown": true, "html": true}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "result: %s\n", filepath.Join(dir, "result.json"))
	if ctx.Err() != nil {
		return &exitError{exitExpectation, fmt.Errorf("interrupted: %w", ctx.Err())}
	}
	if !res.Passed {
		var missed []string
		for _, e := range res.Expectations {
			if !e.Passed {
				missed = append(missed, strings.TrimSpace(e.Name+" "+e.Mode))
			}
		}
		for _, m := range res.Modes {
			if m.Error != "" {
				missed = append(missed, m.Name+" failed")
			}
		}
		return &exitError{exitExpectation, fmt.Errorf("expectations missed: %s", strings.Join(missed, ", "))}
	}
	return nil
}

// selectModes applies --modes and --iptables-backend to the scenario's
// mode entries.
func selectModes(s *scenarios.Scenario, o runOptions) ([]scenarios.ModeSpec, error) {
	modes := s.Spec.Modes
	if len(o.backends) > 0 {
		var out []scenarios.ModeSpec
		seen := map[string]bool{}
		for _, m := range modes {
			if m.Mode != scenarios.ModeIPTables {
				out = append(out, m)
				continue
			}
			for _, b := range o.backends {
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
	if len(o.modes) == 0 {
		return modes, nil
	}
	var out []scenarios.ModeSpec
	for _, want := range o.modes {
		matches := modeMatches(modes, want, o.kernel)
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

// runMode runs one mode entry in its own node process, then, when the
// scenario churns or asks for it, the after-churn oracle.
func runMode(ctx context.Context, stderr io.Writer, s *scenarios.Scenario, file string, data []byte, m scenarios.ModeSpec, runID, dir string, vm bool) reports.ModeResult {
	in := nodeInput{ScenarioFile: file, ScenarioYAML: data, Mode: m.Name, OutDir: dir, InVM: vm}
	if vm {
		in.OutDir = netns.GuestFilesDir
	}
	mr := startNode(ctx, stderr, s, in, m, runID, dir, m.Name+".node.log", vm)
	if mr.Error == "" && wantsOracle(s) && ctx.Err() == nil {
		o := runOracleMode(ctx, stderr, s, file, data, m, runID, dir, vm)
		mr.Oracle = &o
	}
	return mr
}

// wantsOracle: the oracle runs when the scenario churns (the case it
// exists for) or expects it.
func wantsOracle(s *scenarios.Scenario) bool {
	if s.Spec.Expectations.Oracle != "" {
		return true
	}
	for _, st := range s.Spec.Steps {
		if st.Churn != nil {
			return true
		}
	}
	return false
}

// nodeHandle is what the orchestrator needs of a node, on the host
// (netns.NodeProcess) or in a VM (netns.VMNode).
type nodeHandle interface {
	Send(v any) error
	CloseInput() error
	Events() <-chan netns.Event
	Kill() error
}

// startNode runs one node process with input in and returns its result.
func startNode(ctx context.Context, stderr io.Writer, s *scenarios.Scenario, in nodeInput, m scenarios.ModeSpec, runID, dir, logName string, vm bool) reports.ModeResult {
	fail := func(err error) reports.ModeResult {
		return reports.ModeResult{Name: m.Name, Mode: m.Mode, Backend: m.Backend, Error: err.Error()}
	}
	logPath := filepath.Join(dir, logName)
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(fmt.Errorf("creating node log: %w", err))
	}
	defer logFile.Close()

	nodeIP := netip.MustParseAddr(s.Spec.Cluster.Node.IP)
	lb, _ := netip.ParsePrefix(s.Spec.Cluster.LoadBalancerCIDR)
	started := time.Now()
	cfg := netns.NodeConfig{
		RunID:          runID,
		NodeIP:         netip.PrefixFrom(nodeIP, 24),
		ExternalRoutes: []netip.Prefix{lb},
	}
	var (
		p         nodeHandle
		wait      func() (*netns.NodeResult, error)
		placement = &reports.Placement{Kernel: "host"}
	)
	if vm {
		fmt.Fprintf(stderr, "%s: booting a VM (the first boot builds the initramfs)\n", m.Name)
		vn, err := netns.StartVMNode(ctx, netns.VMOptions{Name: nodeMainName, Config: cfg, Stdout: logFile, Stderr: logFile, OutputDir: dir})
		if err != nil {
			return fail(err)
		}
		p = vn
		wait = func() (*netns.NodeResult, error) {
			vr, err := vn.Wait()
			if vr == nil {
				return nil, err
			}
			info := vr.VM
			placement = &reports.Placement{Kernel: "vm", KernelRelease: info.KernelVersion, KernelPackage: info.KernelPackage,
				Accel: info.Accel, AccelNote: info.AccelNote, BootSeconds: info.BootSeconds, TotalSeconds: info.TotalSeconds}
			return &vr.NodeResult, err
		}
	} else {
		np, err := netns.StartNode(ctx, netns.NodeOptions{Name: nodeMainName, Config: cfg, Stdout: logFile, Stderr: logFile})
		if err != nil {
			return fail(err)
		}
		p, wait = np, np.Wait
	}
	if err := p.Send(in); err != nil {
		_ = p.Kill()
		return fail(err)
	}
	if vm {
		if err := p.CloseInput(); err != nil {
			_ = p.Kill()
			return fail(err)
		}
	}
	view := newProgressView(stderr, m.Name, started)
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		for ev := range p.Events() {
			switch ev.Kind {
			case eventStep:
				var st struct {
					Step      string `json:"step"`
					Index, Of int
				}
				if ev.Decode(&st) == nil {
					view.setStep(fmt.Sprintf("step %d/%d %s", st.Index+1, st.Of, st.Step))
					view.line("%s: %s: step %d/%d %s", m.Name, time.Since(started).Round(time.Millisecond), st.Index+1, st.Of, st.Step)
				}
			case eventProgress:
				var pd progressData
				if ev.Decode(&pd) == nil {
					view.setProgress(pd)
				}
			}
		}
	}()
	nr, waitErr := wait()
	<-eventsDone
	view.close()
	var mr reports.ModeResult
	if nr != nil && len(nr.Data) > 0 {
		if err := nr.Decode(&mr); err != nil {
			return fail(fmt.Errorf("decoding the node's result: %w", err))
		}
	} else {
		mr = fail(fmt.Errorf("%w (node log: %s)", waitErr, logPath))
	}
	if mr.Error == "" && waitErr != nil {
		mr.Error = waitErr.Error()
	}
	mr.Placement = placement
	fmt.Fprintf(stderr, "%s: node done in %s (log: %s)\n", m.Name, time.Since(started).Round(time.Millisecond), logPath)
	return mr
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
