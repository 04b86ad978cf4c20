package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// Lifecycle steps stop kube-proxy's process and start a new one in the
// same node, on the same API and dataplane (restart, migrate), change its
// rules behind its back (tamper, tamper.go) or run kube-proxy --cleanup
// (cleanup). Each keeps connections going through the dataplane (a
// watch) and ends with a reports.Lifecycle.

// afterTail is how long a watch goes on after kube-proxy recovered, so
// its chart shows the recovery.
const afterTail = time.Second

// downState is kube-proxy stopped by a restart step until a later step.
type downState struct {
	index   int // the restart step's
	until   string
	restart *scenarios.RestartStep
	lc      *reports.Lifecycle
	w       *watch
	// stopped and mutations: when it stopped, and n.mutations then.
	stopped   time.Time
	mutations int
}

// restart runs a restart step: it stops kube-proxy, then starts it again
// at once or, with until, after that step (resumeIfDue).
func (n *node) restart(ctx context.Context, i int, st scenarios.Step) error {
	r := st.Restart
	lc := &reports.Lifecycle{Step: st.Name, Action: st.Action(), Mode: modeText(*n.ms)}
	w := n.startWatch(ctx, i, r.Probes, "", "before")
	stop, err := n.stopKubeProxy(ctx, i, r.Graceful, r.During, r.Within, r.Timeout.Duration)
	lc.Stop = stop
	if err != nil {
		return n.endLifecycle(lc, w, err)
	}
	w.markAt("stop", stop.At)
	w.phaseAt("down", stop.At)
	d := &downState{index: i, until: r.Until, restart: r, lc: lc, w: w, stopped: stop.At, mutations: n.mutations}
	if r.Until != "" {
		n.down = d
		return nil
	}
	return n.resume(ctx, d)
}

// resumeIfDue starts kube-proxy again after the step a restart's until
// names.
func (n *node) resumeIfDue(ctx context.Context, step string) error {
	if d := n.down; d != nil && d.until == step {
		if err := n.resume(ctx, d); err != nil {
			return fmt.Errorf("restarting kube-proxy (%s): %w", d.lc.Step, err)
		}
	}
	return nil
}

// resume ends a restart's down time: kube-proxy starts again, with the
// mode it had.
func (n *node) resume(ctx context.Context, d *downState) error {
	n.down = nil
	if err := sleep(ctx, d.restart.Down.Duration); err != nil {
		return n.endLifecycle(d.lc, d.w, err)
	}
	err := n.startAgain(ctx, d.index, d.lc, d.w, d.stopped, d.mutations, d.restart.Timeout.Duration)
	return n.endLifecycle(d.lc, d.w, err)
}

// migrate stops kube-proxy and starts the new mode's, then names what the
// old mode left behind.
func (n *node) migrate(ctx context.Context, i int, st scenarios.Step) error {
	m := st.Migrate
	old := *n.ms
	next := n.s.ModeAt(*n.entry, i+1)
	lc := &reports.Lifecycle{Step: st.Name, Action: st.Action(), Mode: modeText(old), To: modeText(next)}
	w := n.startWatch(ctx, i, m.Probes, "", "before")
	stop, err := n.stopKubeProxy(ctx, i, *m.Graceful, "", nil, m.Timeout.Duration)
	lc.Stop = stop
	if err != nil {
		return n.endLifecycle(lc, w, err)
	}
	w.markAt("stop", stop.At)
	w.phaseAt("down", stop.At)
	n.ms = &next
	n.res.FinalMode, n.res.FinalBackend = next.Mode, next.Backend
	if err := n.startAgain(ctx, i+1, lc, w, stop.At, n.mutations, m.Timeout.Duration); err != nil {
		return n.endLifecycle(lc, w, err)
	}
	lc.Leftovers, lc.LeftoverCounts, err = n.leftovers(ctx, old, next)
	return n.endLifecycle(lc, w, err)
}

// cleanup stops kube-proxy (SIGTERM, as before running kube-proxy
// --cleanup on a node), runs kube-proxy --cleanup in a new kube-proxy
// process, and proves nothing of kube-proxy's is left: every count of its
// state is 0 and no connection to a ClusterIP is answered. The run's end
// state, which the oracle checks, is read before.
func (n *node) cleanup(ctx context.Context, i int, st scenarios.Step) error {
	c := st.Cleanup
	lc := &reports.Lifecycle{Step: st.Name, Action: st.Action(), Mode: modeText(*n.ms)}
	if err := n.finalState(ctx); err != nil {
		return n.endLifecycle(lc, nil, err)
	}
	w := n.startWatch(ctx, i, c.Probes, "", "before")
	stop, err := n.stopKubeProxy(ctx, i, true, "", nil, 0)
	lc.Stop = stop
	if err != nil {
		return n.endLifecycle(lc, w, err)
	}
	w.markAt("stop", stop.At)
	w.phaseAt("down", stop.At)
	k, err := startKubeProxyProcess(n.env, n.cluster.Clientset)
	if err != nil {
		return n.endLifecycle(lc, w, fmt.Errorf("starting kube-proxy --cleanup: %w", err))
	}
	w.mark("cleanup")
	var sc proxier.StartupCleanup
	err = k.call(ctx, "Cleanup", CleanupRequest{Backend: n.entry.Backend}, &sc)
	_, _ = k.halt(true)
	if err != nil {
		return n.endLifecycle(lc, w, fmt.Errorf("kube-proxy --cleanup: %w", err))
	}
	w.mark("cleaned")
	w.phase("cleaned")
	lc.Cleanup = leftoverCleanup(&sc)
	lc.Leftovers, lc.Remaining, err = n.kubeProxyState(ctx)
	if err == nil {
		// A second of connections to the cleaned node.
		err = sleep(ctx, time.Second)
	}
	return n.endLifecycle(lc, w, err)
}

// endLifecycle stops the watch, records the step's measurements and
// passes err on.
func (n *node) endLifecycle(lc *reports.Lifecycle, w *watch, err error) error {
	if w != nil {
		lc.Watch = w.stop()
	}
	if err != nil {
		lc.Error = err.Error()
	}
	n.res.Lifecycle = append(n.res.Lifecycle, *lc)
	return err
}

// stopKubeProxy reads what the running kube-proxy measured and stops it.
// during "sync" first waits (up to timeout) until it runs a program that
// writes rules, then a random delay of up to within.
func (n *node) stopKubeProxy(ctx context.Context, index int, graceful bool, during string, within *scenarios.Duration, timeout time.Duration) (*reports.Stop, error) {
	if n.proxier == nil {
		return nil, errors.New("kube-proxy is not running")
	}
	rec := n.proxier.record()
	n.past = append(n.past, rec)
	stop := &reports.Stop{Signal: "SIGKILL", Graceful: graceful, SyncsBefore: len(rec.syncs)}
	if graceful {
		stop.Signal = "SIGTERM"
	}
	if during == scenarios.DuringSync {
		began := time.Now()
		if err := waitForWriter(ctx, n.proxier.Pid(), timeout); err != nil {
			n.past = n.past[:len(n.past)-1] // it runs on: finish reads it
			return stop, err
		}
		stop.WaitedSeconds = time.Since(began).Seconds()
		rng := rand.New(rand.NewPCG(uint64(n.s.Spec.Seed), uint64(index)))
		delay := time.Duration(rng.Int64N(int64(within.Duration) + 1))
		stop.DelaySeconds = delay.Seconds()
		time.Sleep(delay)
	}
	stop.At = time.Now()
	progs, err := n.proxier.halt(graceful)
	stop.Programs = progs
	n.proxier = nil
	if err != nil {
		return stop, fmt.Errorf("stopping kube-proxy: %w", err)
	}
	return stop, nil
}

// waitForWriter waits until process pid runs a program that writes rules.
func waitForWriter(ctx context.Context, pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		for _, p := range descendants(pid) {
			if isRuleWriter(p.comm) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy ran no program that writes rules within %s", timeout)
		}
		if err := syscall.Kill(pid, 0); err != nil {
			return fmt.Errorf("kube-proxy exited while kpsim waited for its sync: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// startAgain starts a new kube-proxy with the mode of step index and
// waits until it has programmed the API as it is.
func (n *node) startAgain(ctx context.Context, index int, lc *reports.Lifecycle, w *watch, stopped time.Time, mutationsAtStop int, timeout time.Duration) error {
	lc.Started = time.Now()
	lc.DownSeconds = lc.Started.Sub(stopped).Seconds()
	lc.MutationsWhileDown = n.mutations - mutationsAtStop
	w.markAt("start", lc.Started)
	w.phaseAt("starting", lc.Started)
	if err := n.startProxierAt(ctx, n.cluster.Clientset, index); err != nil {
		return err
	}
	lc.Startup = leftoverCleanup(n.proxier.Inputs().Cleanup)
	s, err := n.waitSynced(ctx, timeout)
	if err != nil {
		return err
	}
	if in := n.proxier.Inputs(); n.ms.Mode == scenarios.ModeNFTables && len(in.ServiceCIDRs) > 0 {
		lc.ServiceCIDRs, lc.ServiceCIDRsReceived = in.ServiceCIDRs, in.ServiceCIDRsAt
	}
	if syncs := n.proxier.Syncs(); len(syncs) > 0 {
		first := reportSync(syncs[0], len(n.past))
		lc.FirstSync = &first
		lc.FirstSyncEndSeconds = first.End.Sub(lc.Started).Seconds()
		w.markAt("first sync", first.End)
	}
	lc.ProgrammedSeconds = s.End.Sub(lc.Started).Seconds()
	lc.GapSeconds = s.End.Sub(stopped).Seconds()
	w.markAt("programmed", s.End)
	w.phaseAt("after", s.End)
	return sleep(ctx, afterTail)
}

// reportSync is a recorded sync of kube-proxy process number process.
func reportSync(s proxier.Sync, process int) reports.Sync {
	return reports.Sync{Start: s.Start, End: s.End, Seconds: s.Duration.Seconds(), Full: s.Full, Merged: s.Merged,
		Succeeded: s.Succeeded, Process: process}
}

func leftoverCleanup(c *proxier.StartupCleanup) *reports.LeftoverCleanup {
	if c == nil {
		return nil
	}
	return &reports.LeftoverCleanup{Modes: c.Modes, Programs: c.Programs, Skipped: c.Skipped, Seconds: c.Duration.Seconds(), Failed: c.Failed}
}

func modeText(m scenarios.ModeSpec) string {
	if m.Backend != "" && m.Mode != scenarios.ModeNFTables {
		return m.Mode + " (" + m.Backend + ")"
	}
	return m.Mode
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
