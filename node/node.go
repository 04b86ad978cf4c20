package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/remoteapi"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
	"github.com/kpsim/kpsim/toolexec"
)

func init() {
	netns.RegisterNodeMain(MainName, runModeNode)
}

// runModeNode runs inside the node process: the fake cluster, the fake
// pods, the upstream proxier and the scenario's steps. Whatever happens,
// it returns a ModeResult with what was measured.
func runModeNode(ctx context.Context, env *netns.NodeEnv) error {
	var in Input
	if err := env.Recv(&in); err != nil {
		return fmt.Errorf("reading node input: %w", err)
	}
	if err := CheckVersion("the node's input", in.Version); err != nil {
		return err
	}
	if in.Calibrate != "" {
		return env.SetResult(Result{Version: ProtocolVersion, Calibration: calibration(proxier.Calibrate(ctx, &toolexec.Exec{}, in.Calibrate))})
	}
	// The orchestrator validated the same bytes; loading them again here
	// keeps the node self-contained (and the VM runner will need it).
	s, err := scenarios.Load(in.ScenarioFile, in.ScenarioYAML)
	if err != nil {
		return err
	}
	entry, err := modeEntry(s, in.Mode)
	if err != nil {
		return err
	}
	res := &reports.ModeResult{Name: entry.Name, Mode: entry.Mode, Backend: entry.Backend}
	ms := *entry
	n := &node{env: env, s: s, entry: entry, ms: &ms, res: res, outDir: in.OutDir, probeTimeout: 2 * time.Second, tools: &toolexec.Exec{},
		scenarioFile: in.ScenarioFile, scenarioYAML: in.ScenarioYAML, eventLag: in.EventLag}
	if in.InVM {
		n.inVM = true
		// Under software emulation a loaded guest answered 0.3-0.8% of
		// connections after more than 2 s (2000x10, iptables).
		n.probeTimeout = 15 * time.Second
	}
	if n.outDir != "" {
		if err := os.MkdirAll(n.outDir, 0o755); err != nil {
			return err
		}
	}
	if len(in.OracleState) > 0 || in.Repeat {
		// A fresh proxier alone: the after-churn oracle, or one more first
		// sync (kpsim run --twin-repeats).
		var err error
		if in.Repeat {
			// Unit costs before it: the twin check pools them with its
			// other nodes' (reports.PoolCalibrations).
			res.Calibration = n.calibrate(ctx)
			err = n.runRepeat(ctx)
		} else {
			// The oracle builds the mode the run ended in.
			final := s.FinalMode(*entry)
			n.ms = &final
			err = n.runOracle(ctx, in.OracleState)
		}
		if err != nil {
			res.Error = err.Error()
		}
		var recs []kubeProxyRecord
		if n.proxier != nil {
			recs = append(recs, n.proxier.record())
		}
		n.res.Syncs = reportSyncs(recs)
		n.finishResources(recs)
		return env.SetResult(Result{Version: ProtocolVersion, Mode: res})
	}
	// Unit costs first, before the proxier adds load: they let a VM
	// mode's timings be scaled to a host estimate.
	res.Calibration = n.calibrate(ctx)
	runErr := n.run(ctx)
	if runErr != nil {
		res.Error = runErr.Error()
	}
	n.finish(ctx, runErr == nil)
	return env.SetResult(Result{Version: ProtocolVersion, Mode: res})
}

// calibrate measures the unit costs of the mode's programs here
// (proxier.Calibrate), with the mode's iptables backend (legacy for
// nftables mode).
func (n *node) calibrate(ctx context.Context) *reports.Calibration {
	backend := n.ms.Backend
	if backend == "" {
		backend = scenarios.BackendLegacy
	}
	return calibration(proxier.Calibrate(ctx, n.tools, backend))
}

type node struct {
	env *netns.NodeEnv
	s   *scenarios.Scenario
	// entry is the scenario's mode entry; ms is the mode kube-proxy runs
	// now (a migrate step changes it).
	entry  *scenarios.ModeSpec
	ms     *scenarios.ModeSpec
	res    *reports.ModeResult
	outDir string
	// timerOverhead is the nft timer's cost per run (proxier.TimerOverhead),
	// measured before kube-proxy started.
	timerOverhead time.Duration

	cluster *sim.Cluster
	// pods are the fake pods and the prober, in the node's dataplane
	// process: their CPU time and memory are not kube-proxy's.
	pods *netns.Dataplane
	// proxier is kube-proxy, in a process of its own (kubeproxy.go); nil
	// while a lifecycle step has it stopped. past holds what the stopped
	// ones measured, in order.
	proxier *kubeProxy
	past    []kubeProxyRecord
	// down is set while a restart keeps kube-proxy stopped.
	down *downState
	// ended: the run's end state was read and saved (before a cleanup).
	ended bool
	// mutations counts the API mutations made so far.
	mutations int
	// scenarioFile and scenarioYAML are handed to kube-proxy's process.
	scenarioFile string
	scenarioYAML []byte
	engine       *sim.Engine
	// lastWrite is when the last API write of a churn step returned, by
	// lastMutation.
	lastWrite    time.Time
	lastMutation sim.Mutation
	// eventLag is Input.EventLag.
	eventLag time.Duration
	// probeTimeout bounds one probe connection.
	probeTimeout time.Duration
	// inVM: the node runs in a VM, possibly under software emulation.
	inVM bool
	// latency measures the current churn step's sampled mutations.
	latency *latencyProbe
	ctx     context.Context
	synced  bool
	// faults are the armed faults, in the order of n.res.Faults.
	faults []armedFault
	// oracle: this node runs the oracle's fresh proxier, without faults.
	oracle bool
	// tools runs the programs the node itself runs (rule readers,
	// calibration) and counts their CPU time.
	tools *toolexec.Exec
	// stepMutations and stepSkipped count the current churn step's
	// mutations (onMutation).
	stepMutations, stepSkipped int
	// churnStep is the running churn step (for progress events), and
	// lastProgress when the last progress event went.
	churnStep    *scenarios.Step
	churnStart   time.Time
	lastProgress time.Time
}

func (n *node) run(ctx context.Context) error {
	var err error
	if n.cluster, err = sim.New(n.s); err != nil {
		return fmt.Errorf("building the fake cluster: %w", err)
	}
	// spec.faults meet the informers' first lists and the first syncs.
	for i, f := range n.s.Spec.Faults {
		if err := n.armFault(fmt.Sprintf("spec.faults[%d]", i), f, true); err != nil {
			return err
		}
	}
	if err := n.startPods(); err != nil {
		return err
	}
	programs := modePrograms(n.s, *n.entry)
	n.res.ToolVersions = toolVersions(ctx, n.tools, programs)
	// The nft timer's own cost, measured here before kube-proxy starts:
	// its program runs are the harness's, and no sync is running.
	if timer := execTimerPath(); timer != "" && slices.Contains(programs, "nft") {
		d, err := proxier.TimerOverhead(ctx, timer, "/run")
		if err != nil {
			klog.Background().Error(err, "Measuring the program timer's cost")
		}
		n.timerOverhead = d
	}
	if err := n.startProxier(ctx, n.cluster.Clientset); err != nil {
		return err
	}
	// No mutation log: the counts come through onMutation, and a soak's
	// 100,000 records would grow the node by tens of megabytes.
	if n.engine, err = n.cluster.NewEngine(sim.OnMutation(n.onMutation), sim.WithoutLog()); err != nil {
		return err
	}

	for i, st := range n.s.Spec.Steps {
		sr := reports.StepResult{Name: st.Name, Action: st.Action(), Start: time.Now()}
		_ = n.env.Emit(EventStep, StepEvent{Mode: n.ms.Name, Step: st.Name, Index: i, Of: len(n.s.Spec.Steps)})
		err := n.step(ctx, i, st, &sr)
		sr.End = time.Now()
		if err == nil {
			err = n.resumeIfDue(ctx, st.Name)
		}
		if err != nil {
			sr.Error = err.Error()
		}
		n.res.Steps = append(n.res.Steps, sr)
		if err != nil {
			return fmt.Errorf("step %s: %w", st.Name, err)
		}
	}
	return nil
}

// startProxier starts kube-proxy, in its own process, on api.
func (n *node) startProxier(ctx context.Context, api remoteapi.Invoker) error {
	step := 0
	if n.oracle {
		step = len(n.s.Spec.Steps) // the mode the run ended in
	}
	return n.startProxierAt(ctx, api, step)
}

// startProxierAt starts kube-proxy with the mode the entry has at step
// index. spec.faults' command failures meet the first one only.
func (n *node) startProxierAt(_ context.Context, api remoteapi.Invoker, index int) error {
	armed := n.startFaults()
	if len(n.past) > 0 {
		armed = nil
	}
	k, err := startKubeProxy(n.env, api, KubeProxyStart{
		ScenarioFile:  n.scenarioFile,
		ScenarioYAML:  n.scenarioYAML,
		Mode:          n.entry.Name,
		Step:          index,
		FaultPrograms: n.faultPrograms(),
		FaultsArmed:   armed,
		EventLag:      n.eventLag,
	})
	if err != nil {
		return err
	}
	n.proxier = k
	if n.res.Binaries == nil {
		n.res.Binaries = map[string]string{}
	}
	tools := k.Tools()
	maps.Copy(n.res.Binaries, tools.Binaries)
	if n.s.ModeAt(*n.entry, index).Mode == scenarios.ModeNFTables {
		n.res.ProgramTimer = n.programTimer(n.res.ProgramTimer, tools)
	}
	return nil
}

// programTimer adds what one kube-proxy process's tools say about the
// program timer (nftables mode) to pt, with the timer's cost per run as
// the node measured it before kube-proxy started.
func (n *node) programTimer(pt *reports.ProgramTimer, tools proxier.Tools) *reports.ProgramTimer {
	if pt == nil {
		pt = &reports.ProgramTimer{}
	}
	if tools.TimerDir == "" {
		pt.Missing = "no " + proxier.ExecTimerName + " beside kpsim (make build builds it): nft runs were not timed"
		return pt
	}
	if !slices.Contains(pt.Programs, "nft") {
		pt.Programs = append(pt.Programs, "nft")
	}
	pt.OverheadSeconds = n.timerOverhead.Seconds()
	return pt
}

// modeEntry is the spec.modes entry named name.
func modeEntry(s *scenarios.Scenario, name string) (*scenarios.ModeSpec, error) {
	for i := range s.Spec.Modes {
		if s.Spec.Modes[i].Name == name {
			return &s.Spec.Modes[i], nil
		}
	}
	return nil, fmt.Errorf("scenario has no mode entry %q", name)
}

func (n *node) step(ctx context.Context, i int, st scenarios.Step, sr *reports.StepResult) error {
	switch {
	case st.Sync != nil:
		start := time.Now()
		if _, err := n.waitSynced(ctx, st.Sync.Timeout.Duration); err != nil {
			return err
		}
		sr.SyncSeconds = time.Since(start).Seconds()
		if !n.synced {
			n.synced = true
			counts, err := n.readDataplane(ctx, "first-sync")
			if err != nil {
				return err
			}
			n.res.RulesAfterFirstSync = counts
		}
	case st.Churn != nil:
		n.ctx = ctx
		if n.proxier != nil {
			// While kube-proxy is down there is no programming to time.
			n.latency = &latencyProbe{every: sampleEvery(st.Churn)}
		}
		n.stepMutations, n.stepSkipped = 0, 0
		n.churnStep, n.churnStart = &st, time.Now()
		_, err := n.engine.Run(ctx, *st.Churn)
		n.churnStep = nil
		// The measurements end once the proxier caught up (or time out).
		if n.latency != nil {
			n.res.EndToEnd = append(n.res.EndToEnd, n.latency.wait()...)
			n.latency = nil
		}
		sr.Mutations, sr.Skipped = n.stepMutations, n.stepSkipped
		return err
	case st.Probe != nil:
		return n.probe(ctx, i, st)
	case st.DataPath != nil:
		return n.dataPath(ctx, st)
	case st.Fault != nil:
		return n.armFault(st.Name, *st.Fault, false)
	case st.Restart != nil:
		return n.restart(ctx, i, st)
	case st.Migrate != nil:
		if !st.Migrate.AppliesTo(*n.ms) {
			return nil
		}
		return n.migrate(ctx, i, st)
	case st.Cleanup != nil:
		return n.cleanup(ctx, i, st)
	case st.Tamper != nil:
		if !st.Tamper.AppliesTo(*n.ms) {
			return nil
		}
		return n.tamper(ctx, i, st)
	case st.Wait != nil:
		t := time.NewTimer(st.Wait.Duration.Duration)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// waitSynced waits until the proxier has programmed the API state as of
// the last write: its process has been handed every watch event of the
// writes (remoteapi), its Service and EndpointSlice handlers have handled
// each of them (remoteapi.Deliveries: its change trackers have counted
// them), it has the Node's topology labels and the ServiceCIDRs, and a
// successful sync began after all of these (proxier.WaitForAPI).
//
// Handed is not handled: kube-proxy's informers queue an event and hand
// it to its handlers on goroutines of their own, and a sync that began in
// between leaves the change to the next one. kube-proxy's last-queued
// timestamp does not tell them apart: an earlier event's handler may
// queue a sync after the last event was handed. (Nor is the sync waited
// for one that began after kube-proxy queued it: Sync.Start is early by up
// to the end of a sync, and a sync the runner starts at once would not
// count; WaitForAPI has ways to accept that one.)
func (n *node) waitSynced(ctx context.Context, timeout time.Duration) (proxier.Sync, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	after := n.lastWrite
	if !n.lastWrite.IsZero() {
		handed, err := n.handedAll(ctx)
		if err != nil {
			return proxier.Sync{}, err
		}
		if handed.At.After(after) {
			after = handed.At
		}
		// Bounded: an event an informer never hands on would hold every
		// later wait. The sync wait below still holds then, as it did
		// before handling was followed.
		hctx, hcancel := context.WithTimeout(ctx, handledWait)
		done, err := n.proxier.WaitHandled(hctx, handed.Events)
		hcancel()
		switch {
		case ctx.Err() != nil:
			return proxier.Sync{}, fmt.Errorf("waiting for kube-proxy to handle the last change: %w", ctx.Err())
		case err != nil:
			m := n.lastMutation
			klog.Background().Error(err, "kube-proxy did not handle every event it was handed", "wait", handledWait,
				"mutation", m.Seq, "action", m.Action, "group", m.Group, "writes", m.Writes)
		case done.After(after):
			after = done
		}
	}
	s, err := n.proxier.WaitForAPI(ctx, after)
	if err != nil {
		return s, fmt.Errorf("waiting for the proxier to sync (timeout %s): %w", timeout, err)
	}
	return s, nil
}

// handledWait bounds how long waitSynced waits for kube-proxy's handlers
// to handle the events handed to it. They normally take milliseconds.
const handledWait = 30 * time.Second

// handedAll waits until kube-proxy's process has been handed every watch
// event of the writes made so far, and returns what it was handed. It
// gives up after 5 s (events that kept coming would hold it; a sync step
// writes nothing) and returns the last complete answer, which the
// caller's sync wait still bounds.
func (n *node) handedAll(ctx context.Context) (remoteapi.Handover, error) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Second)
	// Handed twice over with nothing between: no event is between the
	// watch's channel and its queue either.
	var prev remoteapi.Handover
	for seen := 0; time.Now().Before(deadline); {
		h, ok := n.proxier.api.Handed()
		switch {
		case !ok:
			seen = 0
		case seen > 0 && h.At.Equal(prev.At) && maps.Equal(h.Events, prev.Events):
			seen++
		default:
			prev, seen = h, 1
		}
		if seen == 2 {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return remoteapi.Handover{}, fmt.Errorf("waiting for kube-proxy to see the last change: %w", ctx.Err())
		case <-tick.C:
		}
	}
	return prev, nil
}

// longSyncTimeout bounds the syncs kpsim waits for outside a sync step (the
// final catch-up, the oracle's full sync): the scenario's longest sync step
// timeout, at least 10 minutes. A scenario that allows its first sync 30
// minutes (IPVS under emulation) allows the oracle's as long.
func (n *node) longSyncTimeout() time.Duration {
	d := 10 * time.Minute
	for _, st := range n.s.Spec.Steps {
		if st.Sync != nil && st.Sync.Timeout.Duration > d {
			d = st.Sync.Timeout.Duration
		}
	}
	return d
}

// onMutation keeps the fake pods in step with the API: a new pod address
// answers, a removed one stops.
//
// A removed endpoint's address stays: its pod keeps answering, as a
// terminating pod does, so traffic a lagging proxier still sends there is
// seen (as stray replies) instead of lost.
func (n *node) onMutation(m sim.Mutation) {
	if m.Skipped != "" {
		n.stepSkipped++
	} else {
		n.stepMutations++
		n.mutations++
	}
	for _, w := range m.Writes {
		n.res.WriteRetries += w.Retries
	}
	if st := n.churnStep; st != nil {
		p := ProgressEvent{Step: st.Name, Unit: "mutations", Done: n.stepMutations + n.stepSkipped, Of: st.Churn.Count}
		if d := st.Churn.Duration; d != nil {
			p.Seconds, p.OfSeconds = time.Since(n.churnStart).Seconds(), d.Duration.Seconds()
		}
		n.emitProgress(p, false)
	}
	if len(m.Writes) > 0 {
		// A skipped mutation wrote nothing (its End is zero): the last
		// write stays the one before it.
		n.lastWrite, n.lastMutation = m.End, m
	}
	if len(m.Added) > 0 {
		if err := n.pods.AddEndpoints(m.Added); err != nil {
			klog.Background().Error(err, "adding endpoint addresses")
		}
	}
	n.considerLatency(n.ctx, m)
}

// startPods creates the fake pods: every endpoint address of the model,
// answering on every target port.
func (n *node) startPods() error {
	model := n.cluster.Snapshot()
	type pk struct {
		port  int32
		proto corev1.Protocol
	}
	ports := map[pk]bool{}
	var addrs []netip.Addr
	for _, svc := range model.Services {
		for _, p := range svc.Ports {
			ports[pk{p.TargetPort, p.Protocol}] = true
		}
		for _, ep := range svc.Endpoints() {
			addrs = append(addrs, ep.IP)
		}
	}
	for _, sl := range model.LiteralSlices {
		for _, p := range sl.Ports {
			if p.Port != nil {
				proto := corev1.ProtocolTCP
				if p.Protocol != nil {
					proto = *p.Protocol
				}
				ports[pk{*p.Port, proto}] = true
			}
		}
		for _, ep := range sl.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					addrs = append(addrs, ip)
				}
			}
		}
	}
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs = slices.Compact(addrs)
	var np []netns.Port
	for p := range ports {
		np = append(np, netns.Port{Port: uint16(p.port), Protocol: protocol(p.proto)})
	}
	sort.Slice(np, func(i, j int) bool {
		return np[i].Port < np[j].Port || (np[i].Port == np[j].Port && np[i].Protocol < np[j].Protocol)
	})
	per := n.s.Spec.Dataplane.AddressesPerNamespace
	if per == 0 {
		per = 1
		if len(addrs) > 256 {
			per = 64
		}
	}
	var err error
	n.pods, err = n.env.StartDataplane(netns.PodNetworkConfig{
		Ports:                 np,
		AddressesPerNamespace: per,
		ClientPodIP:           model.PodCIDR.Addr().Next(),
		PodCIDR:               model.PodCIDR,
	})
	if err != nil {
		return fmt.Errorf("creating fake pods: %w", err)
	}
	if err := n.pods.AddEndpoints(addrs); err != nil {
		return fmt.Errorf("adding %d endpoint addresses: %w", len(addrs), err)
	}
	return nil
}

func (n *node) target(svc sim.Service, port sim.Port, kind string) (netip.AddrPort, bool) {
	switch kind {
	case scenarios.TargetNodePort:
		if port.NodePort == 0 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(n.env.NodeIP, uint16(port.NodePort)), true
	case scenarios.TargetLoadBalancer:
		if !svc.LoadBalancerIP.IsValid() {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(svc.LoadBalancerIP, uint16(port.Port)), true
	}
	return netip.AddrPortFrom(svc.ClusterIP, uint16(port.Port)), true
}

// finish records what every kube-proxy process measured, the final
// dataplane and the node's resource use, whatever state the run ended in.
// After a clean run it first lets the proxier catch up with the last
// change and saves the final API state for the oracle (unless a cleanup
// step did so before it ran).
func (n *node) finish(ctx context.Context, clean bool) {
	if clean && n.synced && !n.ended && n.proxier != nil {
		if err := n.finalState(ctx); err != nil && n.res.Error == "" {
			n.res.Error = err.Error()
		}
	}
	if n.down != nil {
		// A failed run may end with kube-proxy stopped by a restart.
		_ = n.endLifecycle(n.down.lc, n.down.w, errors.New("the run ended while kube-proxy was down"))
		n.down = nil
	}
	recs := slices.Clone(n.past)
	if n.proxier != nil {
		recs = append(recs, n.proxier.record())
	}
	n.finishFaults(recs)
	n.res.Syncs = reportSyncs(recs)
	for _, rec := range recs {
		for _, c := range rec.calls {
			if n.res.KernelCalls == nil {
				n.res.KernelCalls = map[string]reports.CallStats{}
			}
			cs := n.res.KernelCalls[c.Method]
			cs.Count++
			cs.Seconds += c.Duration.Seconds()
			cs.Bytes += c.Bytes
			if c.Err != "" {
				cs.Errors++
			}
			n.res.KernelCalls[c.Method] = cs
		}
		t := rec.totals
		kt := &n.res.KubeProxyTotals
		kt.SyncCount += t.SyncCount
		kt.SyncSeconds += t.SyncSeconds
		kt.FullCount += t.FullCount
		kt.FullSeconds += t.FullSeconds
		kt.PartialCount += t.PartialCount
		kt.PartialSeconds += t.PartialSeconds
		kt.RestoreFailures += t.RestoreFailures
		kt.PartialRestoreFailures += t.PartialRestoreFailures
		kt.NFTablesSyncFailures += t.NFTablesSyncFailures
		kt.NFTablesCleanupFailures += t.NFTablesCleanFailures
		n.res.NetworkProgramming.Count += t.ProgrammingCount
		n.res.NetworkProgramming.SumSeconds += t.ProgrammingSeconds
		// A kube-proxy that died (a panic, a kill) fails the mode: the
		// calls above could not reach it.
		if rec.err != nil && n.res.Error == "" {
			n.res.Error = "kube-proxy: " + rec.err.Error()
		}
	}
	if np := &n.res.NetworkProgramming; np.Count > 0 {
		np.MeanSeconds = np.SumSeconds / float64(np.Count)
	}
	// The first process's startup: what kube-proxy was handed before its
	// first sync (a restart's is in its Lifecycle entry).
	if len(recs) > 0 {
		if in := recs[0].inputs; !in.TopologyAt.IsZero() || !in.ServiceCIDRsAt.IsZero() || len(in.NotHanded) > 0 || in.NodeEventsHeld > 0 || in.Cleanup != nil {
			n.res.Startup = &reports.Startup{TopologyLabels: in.TopologyLabels, TopologyReceived: in.TopologyAt,
				ServiceCIDRs: in.ServiceCIDRs, ServiceCIDRsReceived: in.ServiceCIDRsAt, TopologyNotHanded: in.NotHanded,
				NodeEventsHeld: in.NodeEventsHeld, Cleanup: leftoverCleanup(in.Cleanup)}
		}
	}
	if n.synced && n.res.Rules == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		counts, err := n.readDataplane(ctx, "end")
		cancel()
		if err != nil && n.res.Error == "" {
			n.res.Error = err.Error()
		}
		n.res.Rules = counts
	}
	n.finishResources(recs)
}

// finalState waits for kube-proxy to program the last change, saves the
// API state for the oracle and reads the end dataplane: the state
// kube-proxy's run is judged by.
func (n *node) finalState(ctx context.Context) error {
	n.ended = true
	if _, err := n.waitSynced(ctx, n.longSyncTimeout()); err != nil {
		return fmt.Errorf("final sync: %w", err)
	}
	if n.outDir != "" {
		if err := saveAPIState(ctx, n.cluster.Clientset, FinalStatePath(n.outDir, n.entry.Name)); err != nil {
			return fmt.Errorf("saving the final API state: %w", err)
		}
	}
	counts, err := n.readDataplane(ctx, "end")
	n.res.Rules = counts
	if err != nil {
		return err
	}
	if n.s.FinalMode(*n.entry).Mode == scenarios.ModeNFTables {
		// A measurement beside the run, not of kube-proxy: when it
		// fails, the report says why and the run goes on.
		n.res.ListReplay = replayListing(ctx, n.tools)
	}
	return nil
}

func calibration(c proxier.Calibration) *reports.Calibration {
	out := &reports.Calibration{Kinds: map[string]reports.CalibrationKind{}, Taken: c.Taken}
	for k, v := range c.Kinds {
		out.Kinds[k] = reports.CalibrationKind{Op: v.Op, Runs: v.Runs, Median: v.Median, Min: v.Min, Max: v.Max, Samples: v.Samples}
	}
	return out
}

// finishResources records kube-proxy's CPU time and memory (its process's,
// read inside it) and the harness's: the node process (fake API server,
// churn, steps, the programs it ran to read rules) and the dataplane
// process (fake pods, prober).
func (n *node) finishResources(recs []kubeProxyRecord) {
	r := &n.res.Resources
	for i, rec := range recs {
		u := rec.usage
		if rec.usageErr != nil {
			klog.ErrorS(rec.usageErr, "Reading kube-proxy's resource use", "process", i)
			continue
		}
		// Every kube-proxy process's time; the largest resident set.
		r.CPUSeconds += u.CPUSeconds
		r.ChildCPUSeconds += u.ChildCPUSeconds
		r.MaxRSSBytes = max(r.MaxRSSBytes, u.MaxRSSBytes)
		if i == 0 {
			r.StartRSSBytes = u.StartRSSBytes
		}
		r.Memory = append(r.Memory, u.Memory...)
		r.MemorySampleSeconds = memoryEvery.Seconds()
	}
	h := &reports.HarnessResources{}
	var self syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil {
		h.NodeCPUSeconds = tv(self.Utime) + tv(self.Stime)
		h.NodeMaxRSSBytes = self.Maxrss * 1024 // kilobytes on Linux
	}
	runs, cpu := n.tools.Usage()
	h.Programs, h.ProgramCPUSeconds = runs, cpu.Seconds()
	if n.pods != nil {
		if u, err := n.pods.Usage(); err == nil {
			h.DataplaneCPUSeconds, h.DataplaneMaxRSSBytes = u.CPUSeconds, u.MaxRSSBytes
		} else {
			klog.ErrorS(err, "Reading the dataplane process's resource use")
		}
	}
	r.Harness = h
}

// reportSyncs is every sync of the kube-proxy processes recs, in order,
// each with its time in timed calls by part.
func reportSyncs(recs []kubeProxyRecord) []reports.Sync {
	var out []reports.Sync
	for process, rec := range recs {
		for _, s := range rec.syncs {
			rs := reportSync(s, process)
			for part, sum := range proxier.SumKernelParts(rec.calls, s.Start, s.End) {
				if rs.Kernel == nil {
					rs.Kernel = map[string]float64{}
				}
				rs.Kernel[part] = sum.Duration.Seconds()
			}
			out = append(out, rs)
		}
	}
	return out
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
