package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/remoteapi"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"golang.org/x/sys/unix"
)

// kube-proxy runs in a process of its own in the node's namespaces, as it
// does on a real node: the upstream proxier, its informers, its API client
// and kpsim's sync recorder, nothing else. Its CPU time and memory are
// then kube-proxy's alone, and it can be stopped and started again while
// the fake pods and the prober (the dataplane process) go on. The API it
// watches is the node's fake clientset, served to it over remoteapi, so
// churn and API faults stay in the node process.
//
// Connections between the node and kube-proxy's process: 0 carries the
// node's calls (KubeProxy.*), 1 kube-proxy's API calls (API.*).
const kubeProxyChild = "kube-proxy"

func init() { netns.RegisterChildMain(kubeProxyChild, runKubeProxy) }

// KubeProxyStart is what kube-proxy's process is started with. It loads
// the scenario itself and builds the proxier's options as the node would.
type KubeProxyStart struct {
	ScenarioFile string
	ScenarioYAML []byte
	Mode         string // the spec.modes entry's name
	// Step is the index of the step it starts at: the mode is the entry's
	// as migrate steps before it changed it (Scenario.ModeAt).
	Step          int
	FaultPrograms []string
	FaultsArmed   map[string]int
	// EventLag is Input.EventLag.
	EventLag time.Duration
}

// CleanupRequest asks kube-proxy's process to run kube-proxy --cleanup.
type CleanupRequest struct {
	// Backend is the iptables backend the node's "iptables" runs.
	Backend string
}

// KubeProxyUsage is kube-proxy's process's getrusage(2) and memory
// samples, read inside it.
type KubeProxyUsage struct {
	CPUSeconds      float64 // RUSAGE_SELF, user+system
	ChildCPUSeconds float64 // RUSAGE_CHILDREN: the programs it ran
	MaxRSSBytes     int64
	// StartRSSBytes is the resident set before the proxier started: the
	// binary's own (Go runtime, package initialisation), part of the peak.
	StartRSSBytes int64
	Memory        []reports.MemorySample
}

// WaitRequest asks KubeProxy.WaitForAPI for a sync after After, giving up
// at Deadline.
type WaitRequest struct {
	After, Deadline time.Time
}

// HandledRequest asks KubeProxy.WaitHandled for kube-proxy's handlers to
// have handled the watch events handed (remoteapi.Handover.Events),
// giving up at Deadline.
type HandledRequest struct {
	Events   map[int64]int64
	Deadline time.Time
}

// ArmRequest arms command faults.
type ArmRequest struct {
	Name     string
	Failures int
}

// kubeProxy is the node's handle on kube-proxy's process. Its methods are
// proxier.Proxier's, called across the process boundary; a failed call
// returns the zero value and is kept in Err.
type kubeProxy struct {
	child *netns.Child
	calls *rpc.Client
	tools proxier.Tools
	// api serves the node's API to it: Handed says what it has had.
	api *remoteapi.Service

	mu  sync.Mutex
	err error
}

// startKubeProxy starts kube-proxy's process on api and waits until the
// proxier has started (proxier.Start returned).
func startKubeProxy(env *netns.NodeEnv, api remoteapi.Invoker, start KubeProxyStart) (*kubeProxy, error) {
	k, err := startKubeProxyProcess(env, api)
	if err != nil {
		return nil, err
	}
	if err := k.call(context.Background(), "Start", start, &k.tools); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

// startKubeProxyProcess starts kube-proxy's process, serving it api, and
// starts nothing in it.
func startKubeProxyProcess(env *netns.NodeEnv, api remoteapi.Invoker) (*kubeProxy, error) {
	child, err := env.StartChild(kubeProxyChild, netns.ChildOptions{Conns: 2})
	if err != nil {
		return nil, err
	}
	srv := rpc.NewServer()
	svc := remoteapi.NewService(api)
	if err := srv.RegisterName(remoteapi.ServiceName, svc); err != nil {
		child.Close()
		return nil, err
	}
	go func() {
		srv.ServeConn(child.Conn(1))
		// kube-proxy's process is gone: so are its watches.
		svc.StopAll()
	}()
	return &kubeProxy{child: child, calls: rpc.NewClient(child.Conn(0)), api: svc}, nil
}

func (k *kubeProxy) call(ctx context.Context, method string, args, reply any) error {
	return k.child.Call(ctx, k.calls, "KubeProxy."+method, args, reply)
}

// get is call for the accessors: errors are kept, not returned.
func (k *kubeProxy) get(method string, reply any) {
	if err := k.call(context.Background(), method, struct{}{}, reply); err != nil {
		k.mu.Lock()
		if k.err == nil {
			k.err = fmt.Errorf("%s: %w", method, err)
		}
		k.mu.Unlock()
	}
}

// Err is the first failed accessor call.
func (k *kubeProxy) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *kubeProxy) Pid() int             { return k.child.Pid() }
func (k *kubeProxy) Tools() proxier.Tools { return k.tools }

func (k *kubeProxy) Syncs() (s []proxier.Sync) { k.get("Syncs", &s); return s }

func (k *kubeProxy) Totals() (t proxier.Totals) { k.get("Totals", &t); return t }

func (k *kubeProxy) Inputs() (in proxier.Inputs) { k.get("Inputs", &in); return in }

func (k *kubeProxy) KernelCalls() (c []proxier.KernelCall) { k.get("KernelCalls", &c); return c }

func (k *kubeProxy) CommandFaults() (c map[string]proxier.CommandFaultCount) {
	k.get("CommandFaults", &c)
	return c
}

func (k *kubeProxy) ArmCommandFault(name string, failures int) error {
	return k.call(context.Background(), "ArmCommandFault", ArmRequest{Name: name, Failures: failures}, &struct{}{})
}

// deadlineOf is ctx's deadline, sent along with a wait so that kube-proxy's
// process gives up when the node does; a day when ctx has none.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(24 * time.Hour)
}

// WaitForAPI is proxier.WaitForAPI, bounded by ctx's deadline.
func (k *kubeProxy) WaitForAPI(ctx context.Context, after time.Time) (proxier.Sync, error) {
	var s proxier.Sync
	err := k.call(ctx, "WaitForAPI", WaitRequest{After: after, Deadline: deadlineOf(ctx)}, &s)
	return s, err
}

// WaitHandled waits until kube-proxy's Service and EndpointSlice handlers
// have handled the watch events handed, and returns when the last of them
// returned (remoteapi.Deliveries.WaitDone).
func (k *kubeProxy) WaitHandled(ctx context.Context, handed map[int64]int64) (time.Time, error) {
	var at time.Time
	err := k.call(ctx, "WaitHandled", HandledRequest{Events: handed, Deadline: deadlineOf(ctx)}, &at)
	return at, err
}

// Usage is the process's resource use so far.
func (k *kubeProxy) Usage() (KubeProxyUsage, error) {
	var u KubeProxyUsage
	err := k.call(context.Background(), "Usage", struct{}{}, &u)
	return u, err
}

// stop ends kube-proxy's process as a node's shutdown ends kube-proxy:
// SIGTERM (it has no handler for it, and dies), then waits. Its rules
// stay in the kernel, as on a real node.
func (k *kubeProxy) stop() error {
	_ = k.child.Signal(syscall.SIGTERM)
	k.calls.Close()
	err := k.child.Close()
	var exit interface{ ExitCode() int }
	if errors.As(err, &exit) && exit.ExitCode() == -1 {
		return nil // killed by the signal, as meant
	}
	return err
}

// runKubeProxy is kube-proxy's process: it serves the node's calls until
// the node closes the connection or stops it.
func runKubeProxy(ctx context.Context, env *netns.NodeEnv, conns []io.ReadWriteCloser) error {
	api := rpc.NewClient(conns[1])
	defer api.Close()
	s := &KubeProxyService{ctx: ctx, env: env, api: api, startRSS: rssBytes(), memory: startMemorySampler(ctx)}
	srv := rpc.NewServer()
	if err := srv.RegisterName("KubeProxy", s); err != nil {
		return err
	}
	srv.ServeConn(conns[0])
	return nil
}

// KubeProxyService is kube-proxy's process's side of the calls. It is
// exported for net/rpc only.
type KubeProxyService struct {
	ctx      context.Context
	env      *netns.NodeEnv
	api      *rpc.Client
	memory   *memorySampler
	startRSS int64

	mu sync.Mutex
	p  *proxier.Proxier
	// handled follows the Service and EndpointSlice watch events from the
	// informers to kube-proxy's handlers.
	handled *remoteapi.Deliveries
}

func (s *KubeProxyService) proxier() (*proxier.Proxier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil, errors.New("kube-proxy has not started")
	}
	return s.p, nil
}

// Start starts the proxier, wired as cmd/kube-proxy wires it, on the
// node's API.
func (s *KubeProxyService) Start(req KubeProxyStart, tools *proxier.Tools) error {
	sc, err := scenarios.Load(req.ScenarioFile, req.ScenarioYAML)
	if err != nil {
		return err
	}
	entry, err := modeEntry(sc, req.Mode)
	if err != nil {
		return err
	}
	at := sc.ModeAt(*entry, req.Step)
	ms := &at
	cfg, err := proxyConfig(sc.Spec.Proxy, ms.Proxy)
	if err != nil {
		return err
	}
	backend := ms.Backend
	if ms.Mode == scenarios.ModeNFTables {
		backend = ""
	}
	if ms.Mode == scenarios.ModeIPVS {
		cfg.IPVS.Scheduler = ms.Scheduler
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return errors.New("kube-proxy started twice in one process")
	}
	s.handled = remoteapi.NewDeliveries("services", "endpointslices")
	s.handled.Lag = req.EventLag
	p, err := proxier.Start(s.ctx, proxier.Options{
		Mode:          ms.Mode,
		Backend:       backend,
		ToolsDir:      "/run", // private to the node: gone with it
		Config:        cfg,
		Client:        remoteapi.NewClientset(s.api, s.handled),
		EventHandled:  s.handled.Done,
		NodeName:      sc.Spec.Cluster.Node.Name,
		NodeIP:        net.IP(s.env.NodeIP.AsSlice()),
		ClusterCIDR:   sc.Spec.Cluster.PodCIDR,
		FaultPrograms: req.FaultPrograms,
		FaultsArmed:   req.FaultsArmed,
		// The node's iptables is the backend its first mode wrote with.
		NodeBackend: entry.Backend,
		ExecTimer:   execTimerPath(),
	})
	if err != nil {
		return fmt.Errorf("starting the %s proxier: %w", ms.Mode, err)
	}
	s.p = p
	*tools = p.Tools()
	return nil
}

// execTimerPath is kpsim-exectimer beside the running binary, where make
// build puts it, or "" when there is none (a binary built by hand, a test
// binary, a VM's initramfs): nft runs are then not timed.
func execTimerPath() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	path := filepath.Join(filepath.Dir(exe), proxier.ExecTimerName)
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// Cleanup runs kube-proxy --cleanup in this process, which runs no
// proxier.
func (s *KubeProxyService) Cleanup(req CleanupRequest, r *proxier.StartupCleanup) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return errors.New("kube-proxy --cleanup runs in a process of its own, not beside a proxier")
	}
	c, err := proxier.CleanupAndExit(s.ctx, req.Backend, "/run")
	*r = c
	return err
}

func (s *KubeProxyService) Syncs(_ struct{}, r *[]proxier.Sync) error {
	p, err := s.proxier()
	if err == nil {
		*r = p.Syncs()
	}
	return err
}

func (s *KubeProxyService) Totals(_ struct{}, r *proxier.Totals) error {
	p, err := s.proxier()
	if err == nil {
		*r = p.Totals()
	}
	return err
}

func (s *KubeProxyService) Inputs(_ struct{}, r *proxier.Inputs) error {
	p, err := s.proxier()
	if err == nil {
		*r = p.Inputs()
	}
	return err
}

func (s *KubeProxyService) KernelCalls(_ struct{}, r *[]proxier.KernelCall) error {
	p, err := s.proxier()
	if err == nil {
		*r = p.KernelCalls()
	}
	return err
}

func (s *KubeProxyService) CommandFaults(_ struct{}, r *map[string]proxier.CommandFaultCount) error {
	p, err := s.proxier()
	if err == nil {
		*r = p.CommandFaults()
	}
	return err
}

func (s *KubeProxyService) ArmCommandFault(req ArmRequest, _ *struct{}) error {
	p, err := s.proxier()
	if err != nil {
		return err
	}
	return p.ArmCommandFault(req.Name, req.Failures)
}

func (s *KubeProxyService) WaitForAPI(req WaitRequest, r *proxier.Sync) error {
	p, err := s.proxier()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithDeadline(s.ctx, req.Deadline)
	defer cancel()
	*r, err = p.WaitForAPI(ctx, req.After)
	return err
}

func (s *KubeProxyService) WaitHandled(req HandledRequest, at *time.Time) error {
	if _, err := s.proxier(); err != nil {
		return err
	}
	ctx, cancel := context.WithDeadline(s.ctx, req.Deadline)
	defer cancel()
	var err error
	*at, err = s.handled.WaitDone(ctx, req.Events)
	return err
}

func (s *KubeProxyService) Usage(_ struct{}, r *KubeProxyUsage) error {
	var self, children syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		return err
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
		return err
	}
	r.CPUSeconds = tv(self.Utime) + tv(self.Stime)
	r.ChildCPUSeconds = tv(children.Utime) + tv(children.Stime)
	r.MaxRSSBytes = self.Maxrss * 1024 // kilobytes on Linux
	r.StartRSSBytes = s.startRSS
	r.Memory = s.memory.Samples()
	return nil
}

// kubeProxyRecord is what one kube-proxy process measured, read from it
// before it is stopped (or at the end).
type kubeProxyRecord struct {
	syncs    []proxier.Sync
	calls    []proxier.KernelCall
	totals   proxier.Totals
	inputs   proxier.Inputs
	faults   map[string]proxier.CommandFaultCount
	usage    KubeProxyUsage
	usageErr error
	err      error // the first failed accessor call
}

func (k *kubeProxy) record() kubeProxyRecord {
	r := kubeProxyRecord{syncs: k.Syncs(), calls: k.KernelCalls(), totals: k.Totals(), inputs: k.Inputs(), faults: k.CommandFaults()}
	r.usage, r.usageErr = k.Usage()
	r.err = k.Err()
	return r
}

// halt stops kube-proxy's process as its container's end does: the
// signal to kube-proxy (SIGKILL, or SIGTERM when graceful: kube-proxy has
// no handler for it and exits at once), and SIGKILL to every program it
// is running, which die with the container's PID namespace. It returns
// those programs as "name (pid)". Its rules stay in the kernel.
//
// The programs are signalled through pidfds taken when they were listed:
// once kube-proxy is gone they are no longer its children, and a bare pid
// could by then name another process.
func (k *kubeProxy) halt(graceful bool) ([]string, error) {
	pid := k.Pid()
	if !graceful {
		// Frozen, it starts no program while they are collected.
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	var names []string
	var fds []int
	for _, p := range descendants(pid) {
		fd, err := unix.PidfdOpen(p.pid, 0)
		if err != nil {
			continue // it exited meanwhile
		}
		fds = append(fds, fd)
		names = append(names, fmt.Sprintf("%s (%d)", p.comm, p.pid))
	}
	killAll := func() {
		for _, fd := range fds {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
	sig := syscall.SIGKILL
	if graceful {
		sig = syscall.SIGTERM
	} else {
		killAll()
	}
	_ = k.child.Signal(sig)
	k.calls.Close()
	err := k.child.Close()
	var exit interface{ ExitCode() int }
	if errors.As(err, &exit) && exit.ExitCode() == -1 {
		err = nil // killed by the signal, as meant
	}
	killAll() // graceful: the container ends
	for _, fd := range fds {
		unix.Close(fd)
	}
	return names, err
}
