package orchestrator

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/node"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/vm"
)

// nodeHandle is what the orchestrator needs of a node, on the host
// (netns.NodeProcess) or in a VM (vm.Node).
type nodeHandle interface {
	Send(v any) error
	CloseInput() error
	Events() <-chan netns.Event
	Kill() error
}

// startNode runs one node with input in, for mode entry m of point p,
// logging to logName in p's directory, and returns its result.
func (r *run) startNode(p point, in node.Input, m scenarios.ModeSpec, logName string) reports.ModeResult {
	fail := func(err error) reports.ModeResult {
		return reports.ModeResult{Name: m.Name, Mode: m.Mode, Backend: m.Backend, Error: err.Error()}
	}
	inVM := r.placement[m.Name] == scenarios.KernelVM
	if inVM {
		in.OutDir = vm.GuestFilesDir
	}
	logPath := filepath.Join(p.dir, logName)
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(fmt.Errorf("creating node log: %w", err))
	}
	defer logFile.Close()

	nodeIP := netip.MustParseAddr(p.s.Spec.Cluster.Node.IP)
	lb, _ := netip.ParsePrefix(p.s.Spec.Cluster.LoadBalancerCIDR)
	started := time.Now()
	cfg := netns.NodeConfig{
		RunID:          r.id,
		NodeIP:         netip.PrefixFrom(nodeIP, 24),
		ExternalRoutes: []netip.Prefix{lb},
	}
	var (
		h         nodeHandle
		wait      func() (*netns.NodeResult, error)
		placement = &reports.Placement{Kernel: scenarios.KernelHost}
	)
	if inVM {
		fmt.Fprintf(r.stderr, "%s: booting a VM (the first boot builds the initramfs)\n", m.Name)
		vn, err := vm.Start(r.ctx, vm.Options{Name: node.MainName, Config: cfg, Stdout: logFile, Stderr: logFile, OutputDir: p.dir, Kpsim: p.binary})
		if err != nil {
			return fail(err)
		}
		h = vn
		wait = func() (*netns.NodeResult, error) {
			vr, err := vn.Wait()
			if vr == nil {
				return nil, err
			}
			info := vr.VM
			placement = &reports.Placement{Kernel: scenarios.KernelVM, KernelRelease: info.KernelVersion, KernelPackage: info.KernelPackage,
				Accel: info.Accel, AccelNote: info.AccelNote, BootSeconds: info.BootSeconds, TotalSeconds: info.TotalSeconds,
				QEMUAccel: info.QEMUAccel, QEMUCPU: info.QEMUCPU, KernelArgs: info.KernelArgs}
			if c := info.Clock; c != nil {
				placement.GuestClock = &reports.GuestClock{GuestSeconds: c.GuestSeconds, HostSeconds: c.HostSeconds}
			}
			return &vr.NodeResult, err
		}
	} else {
		np, err := netns.StartNode(r.ctx, netns.NodeOptions{Name: node.MainName, Config: cfg, Stdout: logFile, Stderr: logFile, Binary: p.binary})
		if err != nil {
			return fail(err)
		}
		h, wait = np, np.Wait
	}
	if err := h.Send(in); err != nil {
		_ = h.Kill()
		return fail(err)
	}
	if inVM {
		if err := h.CloseInput(); err != nil {
			_ = h.Kill()
			return fail(err)
		}
	}
	view := newProgressView(r.stderr, m.Name, started, r.lanes)
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		for ev := range h.Events() {
			switch ev.Kind {
			case node.EventStep:
				var st node.StepEvent
				if ev.Decode(&st) == nil {
					view.setStep(fmt.Sprintf("step %d/%d %s", st.Index+1, st.Of, st.Step))
					view.line("%s: %s: step %d/%d %s", m.Name, time.Since(started).Round(time.Millisecond), st.Index+1, st.Of, st.Step)
				}
			case node.EventProgress:
				var pe node.ProgressEvent
				if ev.Decode(&pe) == nil {
					view.setProgress(pe)
				}
			}
		}
	}()
	nr, waitErr := wait()
	<-eventsDone
	view.close()
	var mr reports.ModeResult
	if nr != nil && len(nr.Data) > 0 {
		var out node.Result
		err := nr.Decode(&out)
		if err == nil {
			err = node.CheckVersion("the node's result", out.Version)
		}
		if err == nil && out.Mode == nil {
			err = fmt.Errorf("the node's result holds no mode result")
		}
		if err != nil {
			return fail(fmt.Errorf("decoding the node's result: %w (node log: %s)", err, logPath))
		}
		mr = *out.Mode
	} else {
		mr = fail(fmt.Errorf("%w (node log: %s)", waitErr, logPath))
	}
	if mr.Error == "" && waitErr != nil {
		mr.Error = waitErr.Error()
	}
	mr.Placement = placement
	fmt.Fprintf(r.stderr, "%s: node done in %s (log: %s)\n", m.Name, time.Since(started).Round(time.Millisecond), logPath)
	return mr
}
