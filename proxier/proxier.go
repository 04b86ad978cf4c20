package proxier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	v1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/apis"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/config"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/metrics"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
)

// Options configure Start.
type Options struct {
	// Mode is "iptables", "nftables" or "ipvs".
	Mode string
	// Backend of the iptables binaries for Mode "iptables" and "ipvs":
	// "legacy" or "nft" (default "legacy"). Must be empty for "nftables".
	Backend string
	// ToolsDir is where iptables mode creates its directory of backend
	// symlinks (default os.TempDir()). A node process should pass its
	// private /run, so nothing is left in the host if it is killed.
	ToolsDir string
	// Config is a defaulted kube-proxy configuration (DefaultConfiguration)
	// with the caller's settings (MinSyncPeriod, SyncPeriod, ...). Start
	// copies it and sets Mode, DetectLocalMode and DetectLocal.ClusterCIDRs
	// from these Options. Nil means DefaultConfiguration().
	Config *kubeproxyconfig.KubeProxyConfiguration
	// Client is the API the informers watch (normally a fake clientset).
	// It must hold a Node named NodeName: kube-proxy's NodeManager waits
	// 30 s for it otherwise, so Start refuses at once instead.
	Client kubernetes.Interface
	// NodeName is the node kube-proxy runs as.
	NodeName string
	// NodeIP is the node's IPv4 address (kube-proxy's primary node IP).
	NodeIP net.IP
	// ClusterCIDR is the IPv4 pod CIDR used for local traffic detection, as
	// kube-proxy's --detect-local-mode=ClusterCIDR --cluster-cidr.
	ClusterCIDR string
	// FaultPrograms are wrapped (commandfault.go) so ArmCommandFault can
	// make their runs fail; empty: nothing is wrapped.
	FaultPrograms []string
	// FaultsArmed are failures of FaultPrograms armed before the proxier
	// is built (so they meet its first syncs), per program.
	FaultsArmed map[string]int
	// NodeBackend is the iptables backend the node's plain "iptables"
	// runs, for nftables mode's startup cleanup of iptables leftovers:
	// on a node migrated off iptables mode it is the backend the old mode
	// wrote with (kube-proxy's image picks it from the rules it finds).
	// Empty: the PATH as it is.
	NodeBackend string
	// ExecTimer is the path of kpsim-exectimer (ExecTimerName). When set,
	// nftables mode runs nft through it, so KernelCalls has its runs
	// (exectimer.go). Empty: nft runs are not timed.
	ExecTimer string

	// EventHandled, when set, is called after kube-proxy's Service or
	// EndpointSlice handler returns, with the object it was handed
	// (remoteapi.Deliveries.Done): a sync that begins later has the change.
	EventHandled func(runtime.Object)

	// topologyDelay holds the node's topology labels back from the
	// proxier (tests: the startup race of a loaded machine, every time).
	topologyDelay time.Duration
}

// Proxier is a running upstream proxier with its informers and its sync
// recorder. It runs for the life of the process, as in kube-proxy: the
// upstream SyncLoop cannot be stopped. Cancelling Start's context stops
// the informers and the recorder.
type Proxier struct {
	mode     string
	tools    Tools
	provider proxy.Provider
	rec      *recorder
	// calls times the proxier's kernel-programming calls (kerneltime.go);
	// in nftables mode it holds the timer's nft runs (exectimer.go).
	calls *kernelCalls
	timer *execTimer
	// faultPrograms are the wrapped programs.
	faultPrograms []string
	// inputs records the topology labels and ServiceCIDRs the proxier
	// was handed (inputs.go); client and nodeName are where WaitForAPI
	// reads what it should have been handed.
	inputs     *inputs
	client     kubernetes.Interface
	nodeName   string
	watchCIDRs bool
}

// Tools says which dataplane programs the proxier runs.
type Tools struct {
	// Backend is "legacy" or "nft" in iptables mode, empty in nftables mode.
	Backend string `json:"backend,omitempty"`
	// Binaries maps the program names the proxier runs (iptables-restore,
	// nft, ...) to the files they resolve to.
	Binaries map[string]string `json:"binaries"`
	// Dir is the directory of symlinks placed first in PATH (iptables mode).
	Dir string `json:"dir,omitempty"`
	// FaultDir holds the command fault wrappers, first in PATH, when the
	// proxier was started with Options.FaultPrograms.
	FaultDir string `json:"faultDir,omitempty"`
	// TimerDir holds the program timer's links (exectimer.go), first in
	// PATH.
	TimerDir string `json:"timerDir,omitempty"`
}

// Mode is the proxy mode.
func (p *Proxier) Mode() string { return p.mode }

// Tools returns the programs the proxier runs.
func (p *Proxier) Tools() Tools { return p.tools }

// Provider is the upstream proxier.
func (p *Proxier) Provider() proxy.Provider { return p.provider }

// The upstream metrics are process-global (metrics.RegisterMetrics is a
// sync.Once and the histograms are package variables), so one process runs
// one proxier.
var (
	startMu      sync.Mutex
	startedMode  string
	errSecondRun = errors.New("a proxier was already started in this process: kube-proxy's metrics are process-global (one mode and one proxier per process; run another node process)")
)

// Start builds the upstream proxier for opts.Mode the way cmd/kube-proxy
// does, wires it to informers on opts.Client, starts its SyncLoop and a
// recorder of every sync. It acts in the network namespace of the calling
// process. One Start per process.
func Start(ctx context.Context, opts Options) (*Proxier, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	startMu.Lock()
	defer startMu.Unlock()
	switch {
	case startedMode != "" && startedMode != opts.Mode:
		return nil, fmt.Errorf("cannot start mode %q: mode %q already registered kube-proxy's metrics in this process (metrics.RegisterMetrics runs once per process)", opts.Mode, startedMode)
	case startedMode != "":
		return nil, errSecondRun
	}

	// cmd/kube-proxy/app/options.go:371: Run cleans up other modes'
	// leftovers before it builds the proxy server.
	if opts.Mode == ModeNFTables && opts.NodeBackend != "" {
		if _, err := useIPTablesBackend(ctx, opts.ToolsDir, opts.NodeBackend); err != nil {
			return nil, err
		}
	}
	cleanup := startupCleanup(ctx, opts.Mode)

	// cmd/kube-proxy/app/server.go: NewProxyServer creates the NodeManager
	// (proxy.NewNodeManager) before the proxier; it waits up to 30 s for a
	// missing Node, which is always a harness bug here.
	if _, err := opts.Client.CoreV1().Nodes().Get(ctx, opts.NodeName, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the clientset has no Node %q: add it (with an InternalIP) before Start", opts.NodeName)
		}
		return nil, fmt.Errorf("get node %q: %w", opts.NodeName, err)
	}
	nodeManager, err := newNodeManager(ctx, opts.Client, opts.NodeName, cfg)
	if err != nil {
		return nil, fmt.Errorf("node manager: %w", err)
	}

	metrics.RegisterMetrics(cfg.Mode)
	startedMode = opts.Mode

	p := &Proxier{mode: opts.Mode, faultPrograms: slices.Clone(opts.FaultPrograms),
		inputs: newInputs(), client: opts.Client, nodeName: opts.NodeName,
		watchCIDRs: utilfeature.DefaultFeatureGate.Enabled(features.MultiCIDRServiceAllocator)}
	p.inputs.record(func(r *Inputs, _ time.Time) { r.Cleanup = &cleanup })
	// Events go nowhere: a FakeRecorder with a nil channel drops them.
	recorder := &events.FakeRecorder{}
	// server.go line ~246: kube-proxy always has a health server. It is
	// constructed but not served (kube-proxy serves it from Run); the
	// service health server asks it whether the proxier is healthy.
	healthz := healthcheck.NewProxyHealthServer("127.0.0.1:0", 2*cfg.SyncPeriod.Duration, nodeManager)
	// server_linux.go getLocalDetectors, LocalModeClusterCIDR.
	detector := proxyutil.NewDetectLocalByCIDR(opts.ClusterCIDR)

	switch opts.Mode {
	case ModeIPTables:
		p.calls = &kernelCalls{}
		p.provider, p.tools, err = newIPTables(ctx, cfg, opts, detector, recorder, healthz, p.calls)
	case ModeNFTables:
		p.calls = &kernelCalls{}
		p.provider, p.tools, p.timer, err = newNFTables(ctx, cfg, opts, detector, recorder, healthz)
	case ModeIPVS:
		p.calls = &kernelCalls{}
		p.provider, p.tools, err = newIPVS(ctx, cfg, opts, detector, recorder, healthz, p.calls)
	}
	if err != nil {
		return nil, err
	}

	p.rec = newRecorder(defaultGather, v1.IPv4Protocol)
	p.rec.allFull = opts.Mode == ModeIPVS
	p.rec.minSync = cfg.MinSyncPeriod.Duration
	p.rec.start(ctx)
	handlers := observedHandlers{
		topology: topologyObserver{next: p.provider, in: p.inputs, delay: opts.topologyDelay},
		cidrs:    serviceCIDRObserver{next: p.provider, in: p.inputs},
		hold:     p.inputs.nodeEvents,
		direct:   p.rec.directSyncDone,
		handled:  opts.EventHandled,
	}
	if err := wireInformers(ctx, cfg, opts.Client, p.provider, handlers, nodeManager); err != nil {
		return nil, err
	}
	// server.go line ~641.
	go p.provider.SyncLoop()
	return p, nil
}

// config checks opts and returns the configuration the proxier gets.
func (opts Options) config() (*kubeproxyconfig.KubeProxyConfiguration, error) {
	var errs []error
	switch opts.Mode {
	case ModeIPTables, ModeIPVS:
		if opts.Backend != "" && opts.Backend != BackendLegacy && opts.Backend != BackendNFT {
			errs = append(errs, fmt.Errorf("backend: %q is not %q or %q", opts.Backend, BackendLegacy, BackendNFT))
		}
	case ModeNFTables:
		if opts.Backend != "" {
			errs = append(errs, fmt.Errorf("backend: %q set, but nftables mode has no iptables backend", opts.Backend))
		}
	default:
		errs = append(errs, fmt.Errorf("mode: %q is not %q, %q or %q", opts.Mode, ModeIPTables, ModeNFTables, ModeIPVS))
	}
	if opts.Client == nil {
		errs = append(errs, errors.New("client: nil"))
	}
	if opts.NodeName == "" {
		errs = append(errs, errors.New("nodeName: empty"))
	}
	if opts.NodeIP.To4() == nil {
		errs = append(errs, fmt.Errorf("nodeIP: %v is not an IPv4 address", opts.NodeIP))
	}
	if ip, _, err := net.ParseCIDR(opts.ClusterCIDR); err != nil || ip.To4() == nil {
		errs = append(errs, fmt.Errorf("clusterCIDR: %q is not an IPv4 CIDR", opts.ClusterCIDR))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("proxier options: %w", errors.Join(errs...))
	}
	var cfg *kubeproxyconfig.KubeProxyConfiguration
	if opts.Config == nil {
		var err error
		if cfg, err = DefaultConfiguration(); err != nil {
			return nil, err
		}
	} else {
		cfg = opts.Config.DeepCopy()
	}
	cfg.Mode = kubeproxyconfig.ProxyMode(opts.Mode)
	cfg.DetectLocalMode = kubeproxyconfig.LocalModeClusterCIDR
	cfg.DetectLocal.ClusterCIDRs = []string{opts.ClusterCIDR}
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// observedHandlers stand between two of kube-proxy's configs and the
// proxier: they pass every call through and record it (inputs.go).
type observedHandlers struct {
	topology config.NodeTopologyHandler
	cidrs    config.ServiceCIDRHandler
	hold     *nodeEventHold
	// direct is told when the provider's OnEndpointSlicesSynced, which
	// runs kube-proxy's one direct sync, has returned.
	direct func(time.Time)
	// handled, when set, is told of every Service and EndpointSlice the
	// provider's handlers have returned from.
	handled func(runtime.Object)
}

// endpointSlicesSynced passes every call through to the provider and
// tells when OnEndpointSlicesSynced returned: every proxier calls
// syncProxyRules directly from it, once per lifetime; every later sync
// comes from its BoundedFrequencyRunner (recorder.checkCaughtUp).
type endpointSlicesSynced struct {
	config.EndpointSliceHandler
	done func(time.Time)
}

func (e endpointSlicesSynced) OnEndpointSlicesSynced() {
	e.EndpointSliceHandler.OnEndpointSlicesSynced()
	if e.done != nil {
		e.done(time.Now())
	}
}

// handledServices and handledEndpointSlices pass every call through to
// the provider and then say which object it has handled: kube-proxy's
// change trackers have counted the change by then (Options.EventHandled).
type handledServices struct {
	config.ServiceHandler
	done func(runtime.Object)
}

func (h handledServices) OnServiceAdd(s *v1.Service) {
	h.ServiceHandler.OnServiceAdd(s)
	h.done(s)
}

func (h handledServices) OnServiceUpdate(old, s *v1.Service) {
	h.ServiceHandler.OnServiceUpdate(old, s)
	h.done(s)
}

func (h handledServices) OnServiceDelete(s *v1.Service) {
	h.ServiceHandler.OnServiceDelete(s)
	h.done(s)
}

type handledEndpointSlices struct {
	config.EndpointSliceHandler
	done func(runtime.Object)
}

func (h handledEndpointSlices) OnEndpointSliceAdd(e *discoveryv1.EndpointSlice) {
	h.EndpointSliceHandler.OnEndpointSliceAdd(e)
	h.done(e)
}

func (h handledEndpointSlices) OnEndpointSliceUpdate(old, e *discoveryv1.EndpointSlice) {
	h.EndpointSliceHandler.OnEndpointSliceUpdate(old, e)
	h.done(e)
}

func (h handledEndpointSlices) OnEndpointSliceDelete(e *discoveryv1.EndpointSlice) {
	h.EndpointSliceHandler.OnEndpointSliceDelete(e)
	h.done(e)
}

// wireInformers mirrors ProxyServer.Run in cmd/kube-proxy/app/server.go
// (v1.37.1, lines ~564-641). Differences: the informers stop with ctx
// instead of wait.NeverStop, no healthz or metrics server is served, the
// topology and ServiceCIDR handlers are observed, and the Service and
// EndpointSlice ones too when asked (observedHandlers), and the Node
// configs' events wait until their handlers are registered
// (nodehandlers.go: upstream races there).
//
// The fake clientset applies label selectors on List but no selector on
// Watch, and no field selector at all: Services labelled
// service.kubernetes.io/service-proxy-name and headless Services still
// reach the proxier through watch events (kube-proxy's own handling of
// headless Services then ignores them). Scenarios should not rely on those
// filters.
func wireInformers(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration, client kubernetes.Interface, provider proxy.Provider, observed observedHandlers, nodeManager *proxy.NodeManager) error {
	noProxyName, err := labels.NewRequirement(apis.LabelServiceProxyName, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	noHeadlessEndpoints, err := labels.NewRequirement(v1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	labelSelectorNoProxyName := labels.NewSelector().Add(*noProxyName)
	labelSelectorNoHeadlessEndpoints := labels.NewSelector().Add(*noHeadlessEndpoints)

	trimManagedFields := func(obj interface{}) (interface{}, error) {
		if accessor, err := meta.Accessor(obj); err == nil {
			accessor.SetManagedFields(nil)
		}
		return obj, nil
	}
	resync := cfg.ConfigSyncPeriod.Duration

	informerFactory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(trimManagedFields),
	)
	endpointSliceInformerFactory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(trimManagedFields),
		informers.WithTweakListOptions(func(options *metav1.ListOptions) {
			options.LabelSelector = labelSelectorNoHeadlessEndpoints.String()
		}))
	serviceInformerFactory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(trimManagedFields),
		informers.WithTweakListOptions(func(options *metav1.ListOptions) {
			options.LabelSelector = labelSelectorNoProxyName.String()
			options.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()
		}))

	serviceConfig := config.NewServiceConfig(ctx, serviceInformerFactory.Core().V1().Services(), resync)
	var services config.ServiceHandler = provider
	var endpointSlices config.EndpointSliceHandler = provider
	if observed.handled != nil {
		services = handledServices{ServiceHandler: provider, done: observed.handled}
		endpointSlices = handledEndpointSlices{EndpointSliceHandler: provider, done: observed.handled}
	}
	serviceConfig.RegisterEventHandler(services)
	go serviceConfig.Run(ctx.Done())

	endpointSliceConfig := config.NewEndpointSliceConfig(ctx, endpointSliceInformerFactory.Discovery().V1().EndpointSlices(), resync)
	endpointSliceConfig.RegisterEventHandler(endpointSlicesSynced{EndpointSliceHandler: endpointSlices, done: observed.direct})
	go endpointSliceConfig.Run(ctx.Done())

	if utilfeature.DefaultFeatureGate.Enabled(features.MultiCIDRServiceAllocator) {
		serviceCIDRConfig := config.NewServiceCIDRConfig(ctx, informerFactory.Networking().V1().ServiceCIDRs(), resync)
		serviceCIDRConfig.RegisterEventHandler(observed.cidrs)
		go serviceCIDRConfig.Run(ctx.Done())
	}
	informerFactory.Start(ctx.Done())
	endpointSliceInformerFactory.Start(ctx.Done())
	serviceInformerFactory.Start(ctx.Done())

	wireNodeHandlers(ctx, resync, nodeManager.NodeInformer(), nodeManager, observed.topology, observed.hold, nil)
	return nil
}

// wireNodeHandlers is the end of ProxyServer.Run: the Node configs on the
// NodeManager's running informer, their events held until both handlers
// are registered (nodehandlers.go). gap, for tests, runs between building
// each config and registering its handler.
func wireNodeHandlers(ctx context.Context, resync time.Duration, informer v1informers.NodeInformer, nodeHandler config.NodeHandler, topology config.NodeTopologyHandler, hold *nodeEventHold, gap func()) {
	if gap == nil {
		gap = func() {}
	}
	informer = heldNodeInformer{NodeInformer: informer, hold: hold}
	nodeConfig := config.NewNodeConfig(ctx, informer, resync)
	gap()
	nodeConfig.RegisterEventHandler(nodeHandler)
	nodeTopologyConfig := config.NewNodeTopologyConfig(ctx, informer, resync)
	gap()
	nodeTopologyConfig.RegisterEventHandler(topology)
	hold.release()
	go nodeConfig.Run(ctx.Done())
}
