package scenarios

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Defaults documented on the types.
const (
	DefaultServiceCIDR      = "10.96.0.0/16"
	DefaultPodCIDR          = "10.244.0.0/16"
	DefaultLoadBalancerCIDR = "192.168.100.0/24"
	DefaultNodeName         = "kpsim-node"
	DefaultNodeIP           = "172.30.0.2"
	DefaultNodeZone         = "zone-a"
	DefaultNamespace        = "default"
	DefaultScheduler        = "rr"
	// Where a mode's node runs (ModeSpec.Kernel).
	KernelAuto         = "auto"
	KernelHost         = "host"
	KernelVM           = "vm"
	DefaultSyncTimeout = 10 * time.Minute
	// DefaultDistributionAlpha is the share tests' family-wise
	// false-alarm probability.
	DefaultDistributionAlpha = 0.01
	// ReservedPodAddresses is how many addresses at the start of the pod
	// CIDR are kept for the harness's client pods.
	ReservedPodAddresses = 16
	// DefaultAffinityTimeoutSeconds is the API server's default for
	// ClientIP session affinity.
	DefaultAffinityTimeoutSeconds int32 = 10800
)

// Default fills every unset field with the default documented on its
// type. It is idempotent, and Load calls it before validating.
func Default(s *Scenario) {
	sp := &s.Spec
	if sp.Seed == 0 {
		sp.Seed = 1
	}
	c := &sp.Cluster
	setString(&c.ServiceCIDR, DefaultServiceCIDR)
	setString(&c.PodCIDR, DefaultPodCIDR)
	setString(&c.LoadBalancerCIDR, DefaultLoadBalancerCIDR)
	setString(&c.Node.Name, DefaultNodeName)
	setString(&c.Node.IP, DefaultNodeIP)
	setString(&c.Node.Zone, DefaultNodeZone)

	if len(sp.Modes) == 0 {
		sp.Modes = []ModeSpec{{Mode: ModeIPTables}, {Mode: ModeNFTables}, {Mode: ModeIPVS}}
	}
	for i := range sp.Modes {
		m := &sp.Modes[i]
		if m.Mode == ModeIPTables || m.Mode == ModeIPVS {
			setString(&m.Backend, BackendLegacy)
		}
		if m.Mode == ModeIPVS {
			setString(&m.Scheduler, DefaultScheduler)
		}
		setString(&m.Kernel, KernelAuto)
		if m.Name == "" {
			switch {
			case m.Mode == ModeIPTables:
				m.Name = m.Mode + "-" + m.Backend
			case m.Mode == ModeIPVS && m.Backend != BackendLegacy:
				m.Name = m.Mode + "-" + m.Backend
			default:
				m.Name = m.Mode
			}
		}
	}

	for i := range sp.ServiceGroups {
		defaultGroup(&sp.ServiceGroups[i])
	}
	if sp.Expectations.DistributionAlpha == nil {
		a := DefaultDistributionAlpha
		sp.Expectations.DistributionAlpha = &a
	}
	for i := range sp.Expectations.Rules {
		setString(&sp.Expectations.Rules[i].At, RulesAtEnd)
	}

	if len(sp.Steps) == 0 {
		sp.Steps = []Step{{Sync: &SyncStep{}}}
	}
	for i := range sp.Steps {
		st := &sp.Steps[i]
		if st.Name == "" {
			st.Name = fmt.Sprintf("%s-%d", st.Action(), i)
		}
		if st.Sync != nil && st.Sync.Timeout == nil {
			st.Sync.Timeout = D(DefaultSyncTimeout)
		}
		defaultLifecycle(st)
		defaultDataPath(st)
		if p := st.Probe; p != nil {
			setString(&p.From, FromPod)
			setString(&p.PowerFor, PowerForBoth)
			if p.From == FromExternal {
				setString(&p.Target, TargetNodePort)
			}
			setString(&p.Target, TargetClusterIP)
		}
	}
}

func defaultGroup(g *ServiceGroup) {
	setString(&g.Namespace, DefaultNamespace)
	if g.Endpoints == nil {
		g.Endpoints = &IntRange{Min: 1, Max: 1}
	}
	if len(g.Ports) == 0 {
		g.Ports = []ServicePort{{Name: "http", Port: 80, TargetPort: 8080, Protocol: corev1.ProtocolTCP}}
	}
	for i := range g.Ports {
		p := &g.Ports[i]
		if p.TargetPort == 0 {
			p.TargetPort = p.Port
		}
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
	}
	if g.Type == "" {
		g.Type = corev1.ServiceTypeClusterIP
	}
	if g.SessionAffinity == "" {
		g.SessionAffinity = corev1.ServiceAffinityNone
	}
	if g.SessionAffinity == corev1.ServiceAffinityClientIP && g.SessionAffinityTimeoutSeconds == nil {
		t := DefaultAffinityTimeoutSeconds
		g.SessionAffinityTimeoutSeconds = &t
	}
	if g.InternalTrafficPolicy == "" {
		g.InternalTrafficPolicy = corev1.ServiceInternalTrafficPolicyCluster
	}
	if g.ExternalTrafficPolicy == "" && (g.Type == corev1.ServiceTypeNodePort || g.Type == corev1.ServiceTypeLoadBalancer) {
		g.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if g.Conditions == (ConditionMix{}) {
		g.Conditions.Ready = 1
	}
}

// Action names the step's action: sync, churn, probe, datapath, wait,
// fault, restart, tamper, cleanup or migrate ("step" when none is set, which
// validation refuses).
func (s Step) Action() string {
	switch {
	case s.Sync != nil:
		return "sync"
	case s.Churn != nil:
		return "churn"
	case s.Probe != nil:
		return "probe"
	case s.DataPath != nil:
		return "datapath"
	case s.Wait != nil:
		return "wait"
	case s.Fault != nil:
		return "fault"
	case s.Restart != nil:
		return "restart"
	case s.Tamper != nil:
		return "tamper"
	case s.Cleanup != nil:
		return "cleanup"
	case s.Migrate != nil:
		return "migrate"
	}
	return "step"
}

func setString(s *string, def string) {
	if *s == "" {
		*s = def
	}
}
