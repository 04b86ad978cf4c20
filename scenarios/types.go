package scenarios

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// APIVersion and Kind identify a scenario file. A file with another
// apiVersion or kind is refused, so the schema can change under a new
// version without old files being misread.
const (
	APIVersion = "kpsim.dev/v1alpha1"
	Kind       = "Scenario"
)

// Scenario is one scenario file: a fake cluster, the churn applied to it,
// the probes sent through it, the proxy modes that run it and the
// thresholds the run must meet.
type Scenario struct {
	// APIVersion must be kpsim.dev/v1alpha1.
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	// Kind must be Scenario.
	Kind string `yaml:"kind" json:"kind"`
	// Metadata names the scenario.
	Metadata Metadata `yaml:"metadata" json:"metadata"`
	// Spec is everything the run does.
	Spec Spec `yaml:"spec" json:"spec"`

	// File is the path the scenario was loaded from (set by the loader).
	File string `yaml:"-" json:"-"`
}

// Metadata names a scenario.
type Metadata struct {
	// Name is a DNS label that names the scenario in results and reports.
	// Required.
	Name string `yaml:"name" json:"name"`
	// Description says in a sentence what the scenario is for.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// Spec is the body of a scenario.
type Spec struct {
	// Seed drives every random choice (endpoint placement, condition mix,
	// churn targets, jitter): the same file and seed generate the same
	// objects and the same mutations. Default 1.
	Seed int64 `yaml:"seed,omitempty" json:"seed"`
	// Cluster is the shape of the simulated cluster.
	Cluster Cluster `yaml:"cluster,omitempty" json:"cluster"`
	// Proxy holds kube-proxy options common to every mode.
	Proxy ProxyOptions `yaml:"proxy,omitempty" json:"proxy"`
	// Modes are the proxy modes to run, each in its own node process.
	// Default: iptables (legacy backend), nftables and ipvs.
	Modes []ModeSpec `yaml:"modes,omitempty" json:"modes"`
	// ServiceGroups generate Services and their EndpointSlices.
	ServiceGroups []ServiceGroup `yaml:"serviceGroups,omitempty" json:"serviceGroups,omitempty"`
	// Objects are literal Service and EndpointSlice manifests, added to the
	// cluster as written (for hand-made cases).
	Objects []Object `yaml:"objects,omitempty" json:"objects,omitempty"`
	// Dataplane shapes the fake pods that answer probes.
	Dataplane Dataplane `yaml:"dataplane,omitempty" json:"dataplane"`
	// Steps run in order after the objects are created. Default: a single
	// sync step.
	Steps []Step `yaml:"steps,omitempty" json:"steps"`
	// Expectations are thresholds checked after the run; a miss makes
	// `kpsim run` exit 1.
	Expectations Expectations `yaml:"expectations,omitempty" json:"expectations"`
	// Sweep, when set, repeats the run for several sizes of one service
	// group to draw cost-versus-size curves.
	Sweep *Sweep `yaml:"sweep,omitempty" json:"sweep,omitempty"`
	// Variants run every mode with each of several kpsim binaries built
	// against different kube-proxy code (make variant), alternating, Repeat
	// times each, for a before/after comparison in one run. Binary paths
	// are relative to the working directory. `kpsim run --variants`
	// overrides them.
	Variants []Variant `yaml:"variants,omitempty" json:"variants,omitempty"`
	// Repeat is how many times each variant runs each mode; variants
	// only. Default 5: a metric measured once per run (the first sync)
	// then has 5 values a side, and the Mann-Whitney test's smallest
	// two-sided p is 0.008 (0.029 for 4, 0.1 for 3), which leaves room for
	// the Holm correction across metrics.
	Repeat int `yaml:"repeat,omitempty" json:"repeat,omitempty"`
	// Faults are armed when a node starts, before the proxier's informers
	// list anything: API faults here hit kube-proxy's initial lists and
	// watches, command faults its first syncs. A step's fault is armed
	// when the step runs.
	Faults []Fault `yaml:"faults,omitempty" json:"faults,omitempty"`
	// VMLane says when the mode entries placed in a VM run: "after" the
	// host's entries, one entry at a time (default), or "beside" them, a
	// lane of VM entries running at the same time as the lane of host
	// entries. Beside saves the VM's time (minutes under software
	// emulation) but the two lanes share the machine's CPUs: the report
	// says which entries overlapped, for how long, and what sharing cost
	// the host's unit costs. Not with variants or a sweep. `kpsim run
	// --vm-lane` overrides it.
	VMLane string `yaml:"vmLane,omitempty" json:"vmLane,omitempty"`
}

// Spec.VMLane values.
const (
	VMLaneAfter  = "after"
	VMLaneBeside = "beside"
)

// Variant is one kpsim binary of a before/after comparison.
type Variant struct {
	// Name labels the variant's results: a DNS label, unique.
	Name string `yaml:"name" json:"name"`
	// Binary is the kpsim binary (bin/kpsim, bin/kpsim-v1.36.3).
	Binary string `yaml:"binary" json:"binary"`
}

// DefaultVariantRepeat is Repeat's default with variants.
const DefaultVariantRepeat = 5

// Runs is how many times each variant runs each mode.
func (s *Scenario) Runs() int {
	switch {
	case s.Spec.Repeat > 0:
		return s.Spec.Repeat
	case len(s.Spec.Variants) > 0:
		return DefaultVariantRepeat
	}
	return 1
}

// Cluster is the shape of the simulated cluster. Every address here exists
// only inside kpsim's own namespaces.
type Cluster struct {
	// ServiceCIDR is where ClusterIPs are allocated from (IPv4).
	// Default 10.96.0.0/16. The first address is left for the
	// "kubernetes" Service, as the API server does.
	ServiceCIDR string `yaml:"serviceCIDR,omitempty" json:"serviceCIDR"`
	// PodCIDR is where endpoint addresses are allocated from (IPv4); it is
	// also the cluster CIDR kube-proxy uses to detect local traffic.
	// Default 10.244.0.0/16. The first 16 addresses are reserved for the
	// harness's client pods.
	PodCIDR string `yaml:"podCIDR,omitempty" json:"podCIDR"`
	// LoadBalancerCIDR is where LoadBalancer ingress IPs are allocated
	// from. Default 192.168.100.0/24.
	LoadBalancerCIDR string `yaml:"loadBalancerCIDR,omitempty" json:"loadBalancerCIDR"`
	// Node is the simulated node: the one kube-proxy runs on.
	Node Node `yaml:"node,omitempty" json:"node"`
	// OtherNodes are the rest of the cluster; endpoints that are not on the
	// simulated node live on them. Default: none (every endpoint is then on
	// the simulated node unless localFraction says otherwise, which then
	// requires other nodes).
	OtherNodes []Node `yaml:"otherNodes,omitempty" json:"otherNodes,omitempty"`
}

// Node is one node of the simulated cluster.
type Node struct {
	// Name is the node name (a DNS subdomain). Default for the simulated
	// node: kpsim-node.
	Name string `yaml:"name,omitempty" json:"name"`
	// IP is the node's address. Used for the simulated node only (its
	// NodePorts are probed there). Default 172.30.0.2.
	IP string `yaml:"ip,omitempty" json:"ip,omitempty"`
	// Zone is the node's topology.kubernetes.io/zone label. Default for the
	// simulated node: zone-a. Empty means the node has no zone.
	Zone string `yaml:"zone,omitempty" json:"zone,omitempty"`
}

// ProxyOptions are kube-proxy settings. Each maps to a field of
// KubeProxyConfiguration; unset fields keep kube-proxy's own defaults.
type ProxyOptions struct {
	// MinSyncPeriod is kube-proxy's minSyncPeriod. Default 1s.
	MinSyncPeriod *Duration `yaml:"minSyncPeriod,omitempty" json:"minSyncPeriod,omitempty"`
	// SyncPeriod is kube-proxy's syncPeriod. Default 30s.
	SyncPeriod *Duration `yaml:"syncPeriod,omitempty" json:"syncPeriod,omitempty"`
	// MasqueradeAll is kube-proxy's masqueradeAll. Default false.
	MasqueradeAll *bool `yaml:"masqueradeAll,omitempty" json:"masqueradeAll,omitempty"`
	// LocalhostNodePorts is kube-proxy's iptables.localhostNodePorts.
	// Default true.
	LocalhostNodePorts *bool `yaml:"localhostNodePorts,omitempty" json:"localhostNodePorts,omitempty"`
	// NodePortAddresses is kube-proxy's nodePortAddresses (CIDRs, or
	// "primary"). Default: kube-proxy's default.
	NodePortAddresses []string `yaml:"nodePortAddresses,omitempty" json:"nodePortAddresses,omitempty"`
}

// Mode names, as kube-proxy spells them.
const (
	ModeIPTables = "iptables"
	ModeNFTables = "nftables"
	ModeIPVS     = "ipvs"
)

// iptables backends: which binaries the node's PATH holds.
const (
	BackendLegacy = "legacy"
	BackendNFT    = "nft"
)

// ModeSpec is one proxy mode to run, with options that override
// spec.proxy for that mode only.
type ModeSpec struct {
	// Mode is iptables, nftables or ipvs. Required.
	Mode string `yaml:"mode" json:"mode"`
	// Name identifies this entry in results. Default: the mode, with the
	// backend for iptables ("iptables-legacy", "iptables-nft"). Names must
	// be unique.
	Name string `yaml:"name,omitempty" json:"name"`
	// Backend is the iptables backend for the iptables and ipvs modes:
	// legacy or nft. Default legacy. Debian's plain `iptables` is nft.
	Backend string `yaml:"backend,omitempty" json:"backend,omitempty"`
	// Scheduler is the IPVS scheduler (ipvs mode only). Default rr.
	Scheduler string `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// Kernel is where this mode's node runs: auto (the host, or a VM when
	// the host kernel lacks the mode), host, or vm (a qemu VM on a Debian
	// kernel; list a mode twice, host and vm, to compare it with a mode
	// only the VM has on one kernel). kpsim run --kernel host|vm overrides
	// it for every mode. Default auto.
	Kernel string `yaml:"kernel,omitempty" json:"kernel,omitempty"`
	// Proxy overrides spec.proxy for this mode.
	Proxy ProxyOptions `yaml:"proxy,omitempty" json:"proxy"`
}

// ServiceGroup generates Count Services named <name>-<index> (index from 0,
// zero-padded to the width of count-1) that share one shape.
type ServiceGroup struct {
	// Name is a DNS label, unique among groups. Required.
	Name string `yaml:"name" json:"name"`
	// Namespace of the Services. Default "default".
	Namespace string `yaml:"namespace,omitempty" json:"namespace"`
	// Count is how many Services the group starts with (0 is allowed when
	// churn creates them later).
	Count int `yaml:"count" json:"count"`
	// Endpoints per Service: a number ("endpoints: 10") or a range
	// ("endpoints: {min: 1, max: 20}", drawn uniformly per Service with
	// the seeded RNG). 0 is allowed (Services with no endpoints). Default
	// 1. Never nil after Default.
	Endpoints *IntRange `yaml:"endpoints,omitempty" json:"endpoints"`
	// Ports of each Service. Default: one TCP port named "http", port 80,
	// targetPort 8080.
	Ports []ServicePort `yaml:"ports,omitempty" json:"ports"`
	// Type is ClusterIP, NodePort or LoadBalancer. Default ClusterIP.
	// NodePorts are allocated from 30000-32767, LoadBalancer IPs from
	// cluster.loadBalancerCIDR.
	Type corev1.ServiceType `yaml:"type,omitempty" json:"type"`
	// Headless makes the Services headless (clusterIP: None), which
	// kube-proxy ignores. Default false.
	Headless bool `yaml:"headless,omitempty" json:"headless,omitempty"`
	// SessionAffinity is None or ClientIP. Default None.
	SessionAffinity corev1.ServiceAffinity `yaml:"sessionAffinity,omitempty" json:"sessionAffinity"`
	// SessionAffinityTimeoutSeconds applies to ClientIP affinity. Default
	// 10800 (the API server's default).
	SessionAffinityTimeoutSeconds *int32 `yaml:"sessionAffinityTimeoutSeconds,omitempty" json:"sessionAffinityTimeoutSeconds,omitempty"`
	// InternalTrafficPolicy is Cluster or Local. Default Cluster.
	InternalTrafficPolicy corev1.ServiceInternalTrafficPolicy `yaml:"internalTrafficPolicy,omitempty" json:"internalTrafficPolicy"`
	// ExternalTrafficPolicy is Cluster or Local; NodePort and LoadBalancer
	// only. Default Cluster for those types.
	ExternalTrafficPolicy corev1.ServiceExternalTrafficPolicy `yaml:"externalTrafficPolicy,omitempty" json:"externalTrafficPolicy,omitempty"`
	// TrafficDistribution is empty, PreferClose, PreferSameZone or
	// PreferSameNode. When set, EndpointSlices carry zone (and node) hints
	// as the EndpointSlice controller writes them.
	TrafficDistribution string `yaml:"trafficDistribution,omitempty" json:"trafficDistribution,omitempty"`
	// Conditions is the mix of endpoint conditions. Default: all ready.
	Conditions ConditionMix `yaml:"conditions,omitempty" json:"conditions"`
	// LocalFraction is the share of endpoints placed on the simulated
	// node, in [0, 1]; the rest are spread round-robin over the other
	// nodes (restricted to Zones when set). Default: 1 when there are no
	// other nodes, else an even spread over all nodes.
	LocalFraction *float64 `yaml:"localFraction,omitempty" json:"localFraction,omitempty"`
	// Zones restricts the nodes that endpoints not on the simulated node
	// are placed on to these zones. Default: every zone.
	Zones []string `yaml:"zones,omitempty" json:"zones,omitempty"`
	// Labels are added to every Service of the group (for example
	// service.kubernetes.io/service-proxy-name, which kube-proxy filters).
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// ExternalIPs are given to every Service of the group
	// (spec.externalIPs), IPv4 addresses, as upstream's rule-count test
	// (pkg/proxy/iptables/number_generated_rules_test.go) gives each
	// Service "1.2.3.4". kube-proxy programs them; kpsim does not probe
	// them.
	ExternalIPs []string `yaml:"externalIPs,omitempty" json:"externalIPs,omitempty"`
	// LoadBalancerSourceRanges restrict which clients may reach the
	// LoadBalancer IPs (IPv4 CIDRs); LoadBalancer groups only. kube-proxy
	// adds a firewall per Service. kpsim's expected-endpoint model does
	// not cover them, so probe steps may not target these groups'
	// LoadBalancer IPs.
	LoadBalancerSourceRanges []string `yaml:"loadBalancerSourceRanges,omitempty" json:"loadBalancerSourceRanges,omitempty"`
}

// IntRange is a fixed number or an inclusive range drawn uniformly. In YAML
// it is written as a plain integer or as {min: A, max: B}.
type IntRange struct {
	// Min is the smallest value.
	Min int `yaml:"min" json:"min"`
	// Max is the largest value; equal to Min for a fixed number.
	Max int `yaml:"max" json:"max"`
}

// Fixed reports whether the range holds a single value.
func (r IntRange) Fixed() bool { return r.Min == r.Max }

// ServicePort is one port of a generated Service.
type ServicePort struct {
	// Name is the port name; required when a Service has several ports.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Port is the Service port. Required.
	Port int32 `yaml:"port" json:"port"`
	// TargetPort is the port the fake pods listen on. Default: Port.
	TargetPort int32 `yaml:"targetPort,omitempty" json:"targetPort"`
	// Protocol is TCP, UDP or SCTP. Default TCP.
	Protocol corev1.Protocol `yaml:"protocol,omitempty" json:"protocol"`
}

// ConditionMix gives the share of endpoints in each condition state. The
// shares must add up to 1. They are apportioned over the whole group by
// largest remainder, so the group total is exact.
type ConditionMix struct {
	// Ready: ready, serving, not terminating. Default 1 when no share is
	// set.
	Ready float64 `yaml:"ready,omitempty" json:"ready"`
	// ServingTerminating: not ready, serving, terminating (a pod draining
	// gracefully; kube-proxy falls back to these when no endpoint is
	// ready).
	ServingTerminating float64 `yaml:"servingTerminating,omitempty" json:"servingTerminating"`
	// Terminating: not ready, not serving, terminating.
	Terminating float64 `yaml:"terminating,omitempty" json:"terminating"`
	// NotReady: not ready, not serving, not terminating.
	NotReady float64 `yaml:"notReady,omitempty" json:"notReady"`
}

// Object is one literal manifest: a v1 Service or a discovery.k8s.io/v1
// EndpointSlice, decoded strictly. Exactly one of the fields is set.
type Object struct {
	Service       *corev1.Service            `yaml:"-" json:"service,omitempty"`
	EndpointSlice *discoveryv1.EndpointSlice `yaml:"-" json:"endpointSlice,omitempty"`
	// Line is where the manifest starts in the scenario file.
	Line int `yaml:"-" json:"-"`
}

// Dataplane shapes the fake pods that answer probes.
type Dataplane struct {
	// AddressesPerNamespace is how many endpoint addresses share one fake
	// pod network namespace. 0 (the default) means one namespace per
	// endpoint up to 256 endpoints, and 64 per namespace above that.
	AddressesPerNamespace int `yaml:"addressesPerNamespace,omitempty" json:"addressesPerNamespace"`
}

// Step is one phase of a run. Exactly one of its actions is set.
type Step struct {
	// Name labels the step in results. Default: the action and index,
	// for example "churn-2".
	Name string `yaml:"name,omitempty" json:"name"`
	// Sync waits until the proxier has programmed the current API state.
	Sync *SyncStep `yaml:"sync,omitempty" json:"sync,omitempty"`
	// Churn mutates Services and EndpointSlices through the API.
	Churn *ChurnStep `yaml:"churn,omitempty" json:"churn,omitempty"`
	// Probe sends real connections through the dataplane.
	Probe *ProbeStep `yaml:"probe,omitempty" json:"probe,omitempty"`
	// DataPath measures what a new connection costs through kube-proxy's
	// rules against one made directly to a pod (datapath.go).
	DataPath *DataPathStep `yaml:"datapath,omitempty" json:"datapath,omitempty"`
	// Wait pauses.
	Wait *WaitStep `yaml:"wait,omitempty" json:"wait,omitempty"`
	// Fault arms a fault and returns at once; the steps after it meet it.
	Fault *Fault `yaml:"fault,omitempty" json:"fault,omitempty"`
	// Restart stops kube-proxy and starts a new one (lifecycle.go).
	Restart *RestartStep `yaml:"restart,omitempty" json:"restart,omitempty"`
	// Tamper changes kube-proxy's rules behind its back.
	Tamper *TamperStep `yaml:"tamper,omitempty" json:"tamper,omitempty"`
	// Cleanup stops kube-proxy and runs kube-proxy --cleanup.
	Cleanup *CleanupStep `yaml:"cleanup,omitempty" json:"cleanup,omitempty"`
	// Migrate stops kube-proxy and starts another mode's.
	Migrate *MigrateStep `yaml:"migrate,omitempty" json:"migrate,omitempty"`
}

// Fault is one injected failure: exactly one of Command and API.
type Fault struct {
	// Modes limits the fault to these mode entries, by entry name or mode
	// (a command fault names a program only some modes run). Default:
	// every mode.
	Modes []string `yaml:"modes,omitempty" json:"modes,omitempty"`
	// Command makes runs of a dataplane program fail.
	Command *CommandFault `yaml:"command,omitempty" json:"command,omitempty"`
	// API makes calls to the fake API server fail or wait.
	API *APIFault `yaml:"api,omitempty" json:"api,omitempty"`
}

// AppliesTo says whether the fault is for the mode entry m.
func (f Fault) AppliesTo(m ModeSpec) bool {
	return len(f.Modes) == 0 || slices.Contains(f.Modes, m.Name) || slices.Contains(f.Modes, m.Mode)
}

// Programs a CommandFault can fail: the ones the proxiers run to program
// the kernel.
var FaultCommands = []string{"iptables-restore", "iptables", "nft", "ipset"}

// CommandFault makes the next Failures runs of a program that change
// rules exit 1 without running, as a kernel or binary that rejects the
// input would. It works through the node's PATH: a wrapper named like the
// program comes first and runs the real one otherwise. Runs that only read
// (arguments list, save, --version, -V, version) always go through, so
// kube-proxy's reads and kpsim's own rule readers are never failed.
type CommandFault struct {
	// Name is the program: iptables-restore, iptables, nft or ipset.
	Name string `yaml:"name" json:"name"`
	// Failures is how many runs fail. Required, at least 1.
	Failures int `yaml:"failures" json:"failures"`
}

// API verbs an APIFault can match.
var FaultVerbs = []string{"get", "list", "watch", "create", "update", "delete"}

// APIFault fails or delays calls to the fake API server, through the fake
// clientset's reactors: kube-proxy's informers and kpsim's churn writes
// meet it alike. The fake clientset runs its reactors under one lock, so a
// delayed call also holds back every other call for that time.
type APIFault struct {
	// Resource is the resource the calls are for: services,
	// endpointslices, nodes, servicecidrs, or * for every one.
	Resource string `yaml:"resource" json:"resource"`
	// Verbs to match (get, list, watch, create, update, delete). Default:
	// every verb.
	Verbs []string `yaml:"verbs,omitempty" json:"verbs,omitempty"`
	// Errors is how many matching calls fail with an internal server
	// error (HTTP 500), the next ones in order.
	Errors int `yaml:"errors,omitempty" json:"errors,omitempty"`
	// Delay holds each delayed matching call this long before it runs.
	Delay Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
	// Delayed is how many matching calls are delayed, the next ones in
	// order. Default with Delay set: every one until the node ends.
	Delayed int `yaml:"delayed,omitempty" json:"delayed,omitempty"`
}

// SyncStep waits for the proxier to catch up with the API.
type SyncStep struct {
	// Timeout bounds the wait. Default 10m.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Churn actions.
const (
	// ChurnFlap toggles one endpoint between ready and not ready.
	ChurnFlap = "flap"
	// ChurnRollingUpdate replaces one endpoint with a new pod (new address).
	ChurnRollingUpdate = "rollingUpdate"
	// ChurnScaleUp adds one endpoint to a Service.
	ChurnScaleUp = "scaleUp"
	// ChurnScaleDown removes one endpoint from a Service (never the last).
	ChurnScaleDown = "scaleDown"
	// ChurnCreateServices creates one Service of the group, with endpoints.
	ChurnCreateServices = "createServices"
	// ChurnDeleteServices deletes one Service of the group and its slices.
	ChurnDeleteServices = "deleteServices"
)

// ChurnActions lists the valid churn actions.
var ChurnActions = []string{ChurnFlap, ChurnRollingUpdate, ChurnScaleUp, ChurnScaleDown, ChurnCreateServices, ChurnDeleteServices}

// ChurnStep applies one kind of mutation to a service group. It ends after
// Count mutations or after Duration, whichever is set (one of them must
// be).
type ChurnStep struct {
	// Action is one of flap, rollingUpdate, scaleUp, scaleDown,
	// createServices, deleteServices. Required.
	Action string `yaml:"action" json:"action"`
	// Group is the service group the mutations apply to. Required.
	Group string `yaml:"group" json:"group"`
	// Rate is mutations per second. 0 means as fast as the engine allows
	// (it never outruns the informers' watch buffers).
	Rate float64 `yaml:"rate,omitempty" json:"rate"`
	// Count is how many mutations to make.
	Count int `yaml:"count,omitempty" json:"count,omitempty"`
	// Duration is how long to churn at Rate (requires Rate > 0).
	Duration *Duration `yaml:"duration,omitempty" json:"duration,omitempty"`
	// Jitter in [0, 1) moves each mutation by up to this fraction of the
	// interval between mutations, at random. Default 0.
	Jitter float64 `yaml:"jitter,omitempty" json:"jitter,omitempty"`
}

// Probe clients.
const (
	// FromPod probes from a client pod inside the pod CIDR (PREROUTING).
	FromPod = "pod"
	// FromExternal probes from outside the cluster CIDR, to NodePorts and
	// LoadBalancer IPs (PREROUTING, masqueraded unless Local policy).
	FromExternal = "external"
	// FromNode probes from the node itself (OUTPUT).
	FromNode = "node"
)

// ProbeStep sends real connections through the kernel to sampled Services
// and tallies which endpoint answered.
type ProbeStep struct {
	// Group limits probing to one service group. Default: every group.
	Group string `yaml:"group,omitempty" json:"group,omitempty"`
	// Services is how many Services to sample. 0 means all of them.
	Services int `yaml:"services,omitempty" json:"services,omitempty"`
	// Connections per sampled Service. 0 means: as many as the
	// distribution test's power calculation asks for (see PowerFor).
	Connections int `yaml:"connections,omitempty" json:"connections,omitempty"`
	// PowerFor says which test an automatic count (connections 0) gives
	// the designed power (0.9): service, each Service's own test (a +20%
	// excess on one endpoint; about 9,000 connections a Service of 10
	// endpoints among 20), pooled, the test pooled by chain position (a
	// +2% excess; about a million connections in all at 10 endpoints),
	// or both (the default, the larger of the two).
	PowerFor string `yaml:"powerFor,omitempty" json:"powerFor,omitempty"`
	// VMConnections, when set, replaces the count for modes that run in
	// a VM, where software emulation makes each connection about 30
	// times as slow. The report gives the power either count reaches.
	VMConnections int `yaml:"vmConnections,omitempty" json:"vmConnections,omitempty"`
	// From is pod, external or node. Default pod.
	From string `yaml:"from,omitempty" json:"from"`
	// Target is clusterIP, nodePort or loadBalancer. Default clusterIP
	// (nodePort from external clients).
	Target string `yaml:"target,omitempty" json:"target"`
}

// ProbeStep.PowerFor values.
const (
	PowerForBoth    = "both"
	PowerForService = "service"
	PowerForPooled  = "pooled"
)

// Probe targets.
const (
	TargetClusterIP    = "clusterIP"
	TargetNodePort     = "nodePort"
	TargetLoadBalancer = "loadBalancer"
)

// WaitStep pauses the run.
type WaitStep struct {
	// Duration of the pause. Required.
	Duration Duration `yaml:"duration" json:"duration"`
}

// Expectations.Oracle values.
const (
	OracleEqual = "equal"
	OracleSkip  = "skip"
	// OracleHost runs the oracle for the entries on the host only: in an
	// emulated VM it costs a second first sync (about 3 minutes for IPVS
	// at 2000x10).
	OracleHost = "host"
)

// Expectations are thresholds checked after a run. Unset means unchecked,
// except HostUnchanged, which is checked unless set to false.
type Expectations struct {
	// SyncP99 bounds the 99th percentile of sync durations, per mode.
	SyncP99 *Duration `yaml:"syncP99,omitempty" json:"syncP99,omitempty"`
	// FirstSync bounds the first full sync, per mode.
	FirstSync *Duration `yaml:"firstSync,omitempty" json:"firstSync,omitempty"`
	// NetworkProgrammingLatencyP99 bounds kube-proxy's network programming
	// latency p99 and the harness's end-to-end figure, per mode.
	NetworkProgrammingLatencyP99 *Duration `yaml:"networkProgrammingLatencyP99,omitempty" json:"networkProgrammingLatencyP99,omitempty"`
	// MemoryGrowthMiBPerMinute bounds, per mode, the growth of the node
	// process's resident set after the first sync: the least-squares
	// slope of its memory samples (one every 5 s), in MiB per minute. A
	// soak sets it to show memory stays flat.
	MemoryGrowthMiBPerMinute *float64 `yaml:"memoryGrowthMiBPerMinute,omitempty" json:"memoryGrowthMiBPerMinute,omitempty"`
	// Rules bound rule counts in the dataplane.
	Rules []RuleExpectation `yaml:"rules,omitempty" json:"rules,omitempty"`
	// Distribution, when "pass", requires every probed Service's traffic
	// to fit its expected shares.
	Distribution string `yaml:"distribution,omitempty" json:"distribution,omitempty"`
	// DistributionAlpha is the family-wise false-alarm probability of each
	// probe step's share tests: a correct proxier still fails them with
	// this probability, so CI scenarios that must not flake use a small
	// one (power then needs more probes). Default 0.01.
	DistributionAlpha *float64 `yaml:"distributionAlpha,omitempty" json:"distributionAlpha,omitempty"`
	// Oracle, when "equal", requires the dataplane after churn to equal
	// what a fresh proxier builds from the final API state. "skip" runs
	// no oracle, for sizes where the fresh proxier's full sync alone
	// takes many minutes. Unset: the oracle runs after churn and
	// migration and is reported, not required.
	Oracle string `yaml:"oracle,omitempty" json:"oracle,omitempty"`
	// HostUnchanged requires the host namespace's rules, links, routes and
	// sysctls to be the same after the run. Default true.
	HostUnchanged *bool `yaml:"hostUnchanged,omitempty" json:"hostUnchanged,omitempty"`
}

// RuleExpectation bounds one rule count. Set Equals, or Min and/or Max.
type RuleExpectation struct {
	// Mode is the mode entry name (for example iptables-legacy) or mode
	// (iptables: every entry of that mode) it applies to. Required.
	Mode string `yaml:"mode" json:"mode"`
	// Count names what is counted. iptables and ipvs modes:
	// "iptables/<table>" (rules in a table, e.g. iptables/nat) or
	// "iptables/<table>/chains". nftables: "nftables/rules",
	// "nftables/chains", "nftables/setElements", "nftables/mapElements",
	// "nftables/numgenRules".
	// ipvs: "ipvs/virtualServers", "ipvs/realServers", "ipset/members".
	Count string `yaml:"count" json:"count"`
	// At is when the count is taken: "firstSync" (right after the
	// proxier's first full sync) or "end" (after the last step). Default
	// end.
	At string `yaml:"at,omitempty" json:"at,omitempty"`
	// Equals requires an exact count.
	Equals *int `yaml:"equals,omitempty" json:"equals,omitempty"`
	// Min is the smallest count allowed.
	Min *int `yaml:"min,omitempty" json:"min,omitempty"`
	// Max is the largest count allowed.
	Max *int `yaml:"max,omitempty" json:"max,omitempty"`
}

// When a rule count is taken.
const (
	RulesAtFirstSync = "firstSync"
	RulesAtEnd       = "end"
)

// Sweep repeats the run with one service group at several sizes: every
// mode entry runs the whole scenario once per size, in a fresh node, with
// the group's count set to that size.
type Sweep struct {
	// Group is the service group whose count is swept. Required.
	Group string `yaml:"group" json:"group"`
	// Counts are the group sizes, ascending. Required.
	Counts []int `yaml:"counts" json:"counts"`
	// MaxCount caps the sizes a mode runs, keyed by mode entry name
	// (ipvs-nft) or mode (ipvs: every entry of that mode; an entry name
	// wins over its mode). Larger sizes are skipped for that mode and the
	// report says so. For modes whose cost at the largest sizes would be
	// hours, such as IPVS in an emulated VM. Default: no cap.
	MaxCount map[string]int `yaml:"maxCount,omitempty" json:"maxCount,omitempty"`
}

// Cap returns the largest size mode entry m runs and the maxCount key
// that set it; ok is false when no cap applies.
func (sw *Sweep) Cap(m ModeSpec) (limit int, key string, ok bool) {
	if sw == nil {
		return 0, "", false
	}
	if c, ok := sw.MaxCount[m.Name]; ok {
		return c, m.Name, true
	}
	if c, ok := sw.MaxCount[m.Mode]; ok {
		return c, m.Mode, true
	}
	return 0, "", false
}
