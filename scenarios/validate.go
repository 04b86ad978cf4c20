package scenarios

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits the harness can honour.
const (
	// NodePortMin and NodePortMax bound the NodePort range, as the API
	// server's default --service-node-port-range.
	NodePortMin = 30000
	NodePortMax = 32767
	// MaxEndpointsPerService keeps one Service within what kube-proxy and
	// the fake pods handle sensibly.
	MaxEndpointsPerService = 10000
)

// Validate checks a defaulted scenario and returns every problem at once,
// each with its field path. Call Default first (Load does both).
func Validate(s *Scenario) error {
	if errs := validate(s); len(errs) > 0 {
		return lineIndex{}.locate(s.File, errs)
	}
	return nil
}

func validate(s *Scenario) field.ErrorList {
	var errs field.ErrorList
	if s.APIVersion != APIVersion {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), s.APIVersion, "must be "+APIVersion))
	}
	if s.Kind != Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), s.Kind, "must be "+Kind))
	}
	md := field.NewPath("metadata")
	if s.Metadata.Name == "" {
		errs = append(errs, field.Required(md.Child("name"), "names the scenario in results"))
	} else {
		errs = append(errs, dnsLabel(md.Child("name"), s.Metadata.Name)...)
	}

	spec := field.NewPath("spec")
	v := &validator{s: s}
	errs = append(errs, v.cluster(spec.Child("cluster"))...)
	errs = append(errs, v.proxy(spec.Child("proxy"), s.Spec.Proxy)...)
	errs = append(errs, v.modes(spec.Child("modes"))...)
	errs = append(errs, v.groups(spec.Child("serviceGroups"))...)
	errs = append(errs, v.objects(spec.Child("objects"))...)
	if n := s.Spec.Dataplane.AddressesPerNamespace; n < 0 || n > 4096 {
		errs = append(errs, field.Invalid(spec.Child("dataplane", "addressesPerNamespace"), n, "must be between 0 (automatic) and 4096"))
	}
	errs = append(errs, v.steps(spec.Child("steps"))...)
	errs = append(errs, v.lifecycle(spec.Child("steps"))...)
	for i := range s.Spec.Faults {
		errs = append(errs, v.fault(spec.Child("faults").Index(i), &s.Spec.Faults[i])...)
	}
	errs = append(errs, v.expectations(spec.Child("expectations"))...)
	errs = append(errs, v.sweep(spec.Child("sweep"))...)
	errs = append(errs, v.variants(spec)...)
	if len(errs) == 0 {
		errs = append(errs, v.capacity(spec)...)
	}
	return errs
}

type validator struct {
	s *Scenario
	// parsed CIDRs, valid when the cluster section validated.
	serviceCIDR, podCIDR, lbCIDR netip.Prefix
	nodeIP                       netip.Addr
	zones                        sets.Set[string]
}

func (v *validator) cluster(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	c := v.s.Spec.Cluster
	var e field.ErrorList
	v.serviceCIDR, e = ipv4Prefix(p.Child("serviceCIDR"), c.ServiceCIDR, 30)
	errs = append(errs, e...)
	v.podCIDR, e = ipv4Prefix(p.Child("podCIDR"), c.PodCIDR, 27)
	errs = append(errs, e...)
	v.lbCIDR, e = ipv4Prefix(p.Child("loadBalancerCIDR"), c.LoadBalancerCIDR, 30)
	errs = append(errs, e...)
	named := []struct {
		path string
		pfx  netip.Prefix
	}{{"serviceCIDR", v.serviceCIDR}, {"podCIDR", v.podCIDR}, {"loadBalancerCIDR", v.lbCIDR}}
	for i := range named {
		for j := i + 1; j < len(named); j++ {
			a, b := named[i], named[j]
			if a.pfx.IsValid() && b.pfx.IsValid() && a.pfx.Overlaps(b.pfx) {
				errs = append(errs, field.Invalid(p.Child(b.path), b.pfx.String(), fmt.Sprintf("overlaps %s %s", a.path, a.pfx)))
			}
		}
	}

	np := p.Child("node")
	errs = append(errs, dnsSubdomain(np.Child("name"), c.Node.Name)...)
	ip, err := netip.ParseAddr(c.Node.IP)
	switch {
	case err != nil || !ip.Is4():
		errs = append(errs, field.Invalid(np.Child("ip"), c.Node.IP, "must be an IPv4 address"))
	case ip.IsLoopback() || ip.IsMulticast() || ip.IsUnspecified():
		errs = append(errs, field.Invalid(np.Child("ip"), c.Node.IP, "must be a unicast address a node could have"))
	default:
		v.nodeIP = ip
		for _, n := range named {
			if n.pfx.IsValid() && n.pfx.Contains(ip) {
				errs = append(errs, field.Invalid(np.Child("ip"), c.Node.IP, "must lie outside "+n.path+" "+n.pfx.String()))
			}
		}
	}
	errs = append(errs, zone(np.Child("zone"), c.Node.Zone)...)

	v.zones = sets.New[string]()
	if c.Node.Zone != "" {
		v.zones.Insert(c.Node.Zone)
	}
	names := sets.New(c.Node.Name)
	for i, n := range c.OtherNodes {
		ip := p.Child("otherNodes").Index(i)
		if n.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else {
			errs = append(errs, dnsSubdomain(ip.Child("name"), n.Name)...)
			if names.Has(n.Name) {
				errs = append(errs, field.Duplicate(ip.Child("name"), n.Name))
			}
			names.Insert(n.Name)
		}
		if n.IP != "" {
			errs = append(errs, field.Forbidden(ip.Child("ip"), "only the simulated node has an address: endpoints on other nodes are served by fake pods attached to the simulated node"))
		}
		errs = append(errs, zone(ip.Child("zone"), n.Zone)...)
		if n.Zone != "" {
			v.zones.Insert(n.Zone)
		}
	}
	return errs
}

func (v *validator) proxy(p *field.Path, o ProxyOptions) field.ErrorList {
	var errs field.ErrorList
	if o.MinSyncPeriod != nil && o.MinSyncPeriod.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("minSyncPeriod"), o.MinSyncPeriod.String(), "must not be negative"))
	}
	if o.SyncPeriod != nil && o.SyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("syncPeriod"), o.SyncPeriod.String(), "must be positive"))
	}
	if o.MinSyncPeriod != nil && o.SyncPeriod != nil && o.MinSyncPeriod.Duration > o.SyncPeriod.Duration {
		errs = append(errs, field.Invalid(p.Child("minSyncPeriod"), o.MinSyncPeriod.String(), "must not exceed syncPeriod "+o.SyncPeriod.String()))
	}
	for i, a := range o.NodePortAddresses {
		if a == "primary" {
			continue
		}
		if _, err := netip.ParsePrefix(a); err != nil {
			errs = append(errs, field.Invalid(p.Child("nodePortAddresses").Index(i), a, `must be a CIDR or "primary"`))
		}
	}
	return errs
}

var ipvsSchedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh"}

func (v *validator) modes(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, m := range v.s.Spec.Modes {
		mp := p.Index(i)
		switch m.Mode {
		case ModeIPTables, ModeNFTables, ModeIPVS:
		case "":
			errs = append(errs, field.Required(mp.Child("mode"), "one of iptables, nftables, ipvs"))
		default:
			errs = append(errs, field.NotSupported(mp.Child("mode"), m.Mode, []string{ModeIPTables, ModeNFTables, ModeIPVS}))
		}
		if names.Has(m.Name) {
			errs = append(errs, field.Duplicate(mp.Child("name"), m.Name))
		}
		names.Insert(m.Name)
		errs = append(errs, dnsLabel(mp.Child("name"), m.Name)...)
		switch {
		case m.Mode == ModeNFTables && m.Backend != "":
			errs = append(errs, field.Forbidden(mp.Child("backend"), "nftables mode uses nft directly; backend is for iptables and ipvs modes"))
		case m.Backend != "" && m.Backend != BackendLegacy && m.Backend != BackendNFT:
			errs = append(errs, field.NotSupported(mp.Child("backend"), m.Backend, []string{BackendLegacy, BackendNFT}))
		}
		if m.Scheduler != "" && m.Mode != ModeIPVS {
			errs = append(errs, field.Forbidden(mp.Child("scheduler"), "only the ipvs mode has a scheduler"))
		} else if m.Mode == ModeIPVS && !slices.Contains(ipvsSchedulers, m.Scheduler) {
			errs = append(errs, field.NotSupported(mp.Child("scheduler"), m.Scheduler, ipvsSchedulers))
		}
		if m.Kernel != KernelAuto && m.Kernel != KernelHost && m.Kernel != KernelVM {
			errs = append(errs, field.NotSupported(mp.Child("kernel"), m.Kernel, []string{KernelAuto, KernelHost, KernelVM}))
		}
		errs = append(errs, v.proxy(mp.Child("proxy"), m.Proxy)...)
	}
	return errs
}

func (v *validator) group(name string) *ServiceGroup {
	for i := range v.s.Spec.ServiceGroups {
		if v.s.Spec.ServiceGroups[i].Name == name {
			return &v.s.Spec.ServiceGroups[i]
		}
	}
	return nil
}

var trafficDistributions = []string{"PreferClose", "PreferSameZone", "PreferSameNode"}

func (v *validator) groups(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i := range v.s.Spec.ServiceGroups {
		g := &v.s.Spec.ServiceGroups[i]
		gp := p.Index(i)
		if g.Name == "" {
			errs = append(errs, field.Required(gp.Child("name"), "generated Services are named <name>-<index>"))
		} else {
			errs = append(errs, dnsLabel(gp.Child("name"), g.Name)...)
			if names.Has(g.Name) {
				errs = append(errs, field.Duplicate(gp.Child("name"), g.Name))
			}
			names.Insert(g.Name)
		}
		errs = append(errs, dnsLabel(gp.Child("namespace"), g.Namespace)...)
		if g.Count < 0 {
			errs = append(errs, field.Invalid(gp.Child("count"), g.Count, "must not be negative"))
		}
		ep := gp.Child("endpoints")
		switch r := g.Endpoints; {
		case r.Min < 0:
			errs = append(errs, field.Invalid(ep, r.Min, "must not be negative"))
		case r.Max < r.Min:
			errs = append(errs, field.Invalid(ep.Child("max"), r.Max, fmt.Sprintf("must be at least min (%d)", r.Min)))
		case r.Max > MaxEndpointsPerService:
			errs = append(errs, field.Invalid(ep, r.Max, fmt.Sprintf("must be at most %d per Service", MaxEndpointsPerService)))
		}
		errs = append(errs, ports(gp.Child("ports"), g.Ports)...)

		switch g.Type {
		case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		default:
			errs = append(errs, field.NotSupported(gp.Child("type"), g.Type, []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}))
		}
		if g.Headless && g.Type != corev1.ServiceTypeClusterIP {
			errs = append(errs, field.Invalid(gp.Child("headless"), true, "only ClusterIP Services can be headless"))
		}
		switch g.SessionAffinity {
		case corev1.ServiceAffinityNone:
			if g.SessionAffinityTimeoutSeconds != nil {
				errs = append(errs, field.Forbidden(gp.Child("sessionAffinityTimeoutSeconds"), "applies to sessionAffinity ClientIP only"))
			}
		case corev1.ServiceAffinityClientIP:
			if t := *g.SessionAffinityTimeoutSeconds; t < 1 || t > 86400 {
				errs = append(errs, field.Invalid(gp.Child("sessionAffinityTimeoutSeconds"), t, "must be between 1 and 86400"))
			}
		default:
			errs = append(errs, field.NotSupported(gp.Child("sessionAffinity"), g.SessionAffinity, []corev1.ServiceAffinity{corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP}))
		}
		switch g.InternalTrafficPolicy {
		case corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal:
		default:
			errs = append(errs, field.NotSupported(gp.Child("internalTrafficPolicy"), g.InternalTrafficPolicy, []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}))
		}
		etp := gp.Child("externalTrafficPolicy")
		switch {
		case g.Type == corev1.ServiceTypeClusterIP && g.ExternalTrafficPolicy != "":
			errs = append(errs, field.Forbidden(etp, "applies to NodePort and LoadBalancer Services only"))
		case g.Type != corev1.ServiceTypeNodePort && g.Type != corev1.ServiceTypeLoadBalancer:
		case g.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster && g.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal:
			errs = append(errs, field.NotSupported(etp, g.ExternalTrafficPolicy, []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}))
		}
		if g.TrafficDistribution != "" && !slices.Contains(trafficDistributions, g.TrafficDistribution) {
			errs = append(errs, field.NotSupported(gp.Child("trafficDistribution"), g.TrafficDistribution, trafficDistributions))
		}

		cp := gp.Child("conditions")
		cm := g.Conditions
		sum := 0.0
		for _, f := range []struct {
			name string
			v    float64
		}{{"ready", cm.Ready}, {"servingTerminating", cm.ServingTerminating}, {"terminating", cm.Terminating}, {"notReady", cm.NotReady}} {
			if f.v < 0 || f.v > 1 || math.IsNaN(f.v) {
				errs = append(errs, field.Invalid(cp.Child(f.name), f.v, "must be a fraction between 0 and 1"))
			}
			sum += f.v
		}
		if math.Abs(sum-1) > 1e-9 {
			errs = append(errs, field.Invalid(cp, fmt.Sprintf("%g", sum), "shares must add up to 1"))
		}

		others := v.s.Spec.Cluster.OtherNodes
		offNode := g.LocalFraction == nil || *g.LocalFraction < 1
		if f := g.LocalFraction; f != nil && (*f < 0 || *f > 1 || math.IsNaN(*f)) {
			errs = append(errs, field.Invalid(gp.Child("localFraction"), *f, "must be a fraction between 0 and 1"))
		} else if f != nil && *f < 1 && len(others) == 0 {
			errs = append(errs, field.Invalid(gp.Child("localFraction"), *f, "endpoints off the simulated node need spec.cluster.otherNodes"))
		}
		if len(g.Zones) > 0 {
			eligible, unknown := 0, false
			for j, z := range g.Zones {
				if !v.zones.Has(z) {
					errs = append(errs, field.NotFound(gp.Child("zones").Index(j), z))
					unknown = true
				}
				for _, n := range others {
					if n.Zone == z {
						eligible++
					}
				}
			}
			if eligible == 0 && !unknown && offNode && len(others) > 0 {
				errs = append(errs, field.Invalid(gp.Child("zones"), strings.Join(g.Zones, ","), "no other node is in these zones, so endpoints off the simulated node have nowhere to live"))
			}
		}
		for j, ip := range g.ExternalIPs {
			a, err := netip.ParseAddr(ip)
			switch {
			case err != nil || !a.Is4():
				errs = append(errs, field.Invalid(gp.Child("externalIPs").Index(j), ip, "must be an IPv4 address such as 1.2.3.4"))
			case a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast():
				errs = append(errs, field.Invalid(gp.Child("externalIPs").Index(j), ip, "must be a unicast address, not loopback, link-local or unspecified (the API server refuses them)"))
			}
		}
		if len(g.LoadBalancerSourceRanges) > 0 && g.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(gp.Child("loadBalancerSourceRanges"), "applies to LoadBalancer Services only"))
		}
		for j, r := range g.LoadBalancerSourceRanges {
			if p, err := netip.ParsePrefix(r); err != nil || !p.Addr().Is4() {
				errs = append(errs, field.Invalid(gp.Child("loadBalancerSourceRanges").Index(j), r, "must be an IPv4 CIDR such as 1.2.3.4/28"))
			}
		}
		for k, val := range g.Labels {
			lp := gp.Child("labels").Key(k)
			for _, msg := range utilvalidation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(lp, k, msg))
			}
			for _, msg := range utilvalidation.IsValidLabelValue(val) {
				errs = append(errs, field.Invalid(lp, val, msg))
			}
		}
	}
	return errs
}

func ports(p *field.Path, ps []ServicePort) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	type key struct {
		port  int32
		proto corev1.Protocol
	}
	seen := sets.New[key]()
	for i, sp := range ps {
		pp := p.Index(i)
		if sp.Name == "" && len(ps) > 1 {
			errs = append(errs, field.Required(pp.Child("name"), "every port needs a name when a Service has several"))
		} else if sp.Name != "" {
			for _, msg := range utilvalidation.IsValidPortName(sp.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), sp.Name, msg))
			}
			if names.Has(sp.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), sp.Name))
			}
			names.Insert(sp.Name)
		}
		for _, f := range []struct {
			name string
			v    int32
		}{{"port", sp.Port}, {"targetPort", sp.TargetPort}} {
			if f.v < 1 || f.v > 65535 {
				errs = append(errs, field.Invalid(pp.Child(f.name), f.v, "must be between 1 and 65535"))
			}
		}
		switch sp.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), sp.Protocol, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}))
		}
		k := key{sp.Port, sp.Protocol}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(pp, fmt.Sprintf("%d/%s", sp.Port, sp.Protocol)))
		}
		seen.Insert(k)
	}
	return errs
}

func (v *validator) objects(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	services := sets.New[string]()
	for _, g := range v.s.Spec.ServiceGroups {
		// Literal names must not collide with generated ones.
		if g.Count > 0 {
			services.Insert(g.Namespace + "/" + g.Name + "-0")
		}
	}
	sliceNames := sets.New[string]()
	for i, o := range v.s.Spec.Objects {
		op := p.Index(i)
		switch {
		case o.Service != nil:
			svc := o.Service
			mp := op.Child("metadata")
			errs = append(errs, dnsLabel(mp.Child("name"), svc.Name)...)
			ns := svc.Namespace
			if ns == "" {
				ns = DefaultNamespace
			}
			if key := ns + "/" + svc.Name; services.Has(key) {
				errs = append(errs, field.Duplicate(mp.Child("name"), svc.Name))
			} else {
				services.Insert(key)
			}
			if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone && v.serviceCIDR.IsValid() {
				if a, err := netip.ParseAddr(ip); err != nil || !v.serviceCIDR.Contains(a) {
					errs = append(errs, field.Invalid(op.Child("spec", "clusterIP"), ip, "must be an address in spec.cluster.serviceCIDR "+v.serviceCIDR.String()))
				}
			}
			if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP != corev1.ClusterIPNone {
				errs = append(errs, field.Required(op.Child("spec", "ports"), "a Service needs at least one port"))
			}
		case o.EndpointSlice != nil:
			es := o.EndpointSlice
			mp := op.Child("metadata")
			errs = append(errs, dnsSubdomain(mp.Child("name"), es.Name)...)
			if sliceNames.Has(es.Namespace + "/" + es.Name) {
				errs = append(errs, field.Duplicate(mp.Child("name"), es.Name))
			}
			sliceNames.Insert(es.Namespace + "/" + es.Name)
			if es.Labels[discoveryv1.LabelServiceName] == "" {
				errs = append(errs, field.Required(mp.Child("labels").Key(discoveryv1.LabelServiceName), "kube-proxy finds a Service's slices by this label"))
			}
			if es.AddressType != discoveryv1.AddressTypeIPv4 {
				errs = append(errs, field.NotSupported(op.Child("addressType"), es.AddressType, []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}))
			}
			for j, ep := range es.Endpoints {
				for k, a := range ep.Addresses {
					ap := op.Child("endpoints").Index(j).Child("addresses").Index(k)
					addr, err := netip.ParseAddr(a)
					if err != nil || !addr.Is4() {
						errs = append(errs, field.Invalid(ap, a, "must be an IPv4 address"))
					} else if v.podCIDR.IsValid() && !v.podCIDR.Contains(addr) {
						errs = append(errs, field.Invalid(ap, a, "must lie in spec.cluster.podCIDR "+v.podCIDR.String()+": fake pods exist only there"))
					}
				}
			}
		}
	}
	return errs
}

func (v *validator) steps(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, st := range v.s.Spec.Steps {
		sp := p.Index(i)
		set := 0
		for _, b := range []bool{st.Sync != nil, st.Churn != nil, st.Probe != nil, st.Wait != nil, st.Fault != nil,
			st.Restart != nil, st.Tamper != nil, st.Cleanup != nil, st.Migrate != nil, st.DataPath != nil} {
			if b {
				set++
			}
		}
		if set != 1 {
			errs = append(errs, field.Invalid(sp, fmt.Sprintf("%d actions", set), "a step needs exactly one of sync, churn, probe, datapath, wait, fault, restart, tamper, cleanup, migrate"))
		}
		if st.DataPath != nil {
			errs = append(errs, v.dataPath(sp.Child("datapath"), st.DataPath)...)
		}
		if st.Fault != nil {
			errs = append(errs, v.fault(sp.Child("fault"), st.Fault)...)
		}
		if names.Has(st.Name) {
			errs = append(errs, field.Duplicate(sp.Child("name"), st.Name))
		}
		names.Insert(st.Name)
		if st.Sync != nil && st.Sync.Timeout.Duration <= 0 {
			errs = append(errs, field.Invalid(sp.Child("sync", "timeout"), st.Sync.Timeout.String(), "must be positive"))
		}
		if st.Wait != nil && st.Wait.Duration.Duration <= 0 {
			errs = append(errs, field.Invalid(sp.Child("wait", "duration"), st.Wait.Duration.String(), "must be positive"))
		}
		if c := st.Churn; c != nil {
			cp := sp.Child("churn")
			if !slices.Contains(ChurnActions, c.Action) {
				errs = append(errs, field.NotSupported(cp.Child("action"), c.Action, ChurnActions))
			}
			if c.Group == "" {
				errs = append(errs, field.Required(cp.Child("group"), "the service group to churn"))
			} else if v.group(c.Group) == nil {
				errs = append(errs, field.NotFound(cp.Child("group"), c.Group))
			}
			if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
				errs = append(errs, field.Invalid(cp.Child("rate"), c.Rate, "must be a finite number of mutations per second, 0 for as fast as possible"))
			}
			switch {
			case c.Count < 0:
				errs = append(errs, field.Invalid(cp.Child("count"), c.Count, "must not be negative"))
			case c.Count > 0 && c.Duration != nil:
				errs = append(errs, field.Invalid(cp.Child("duration"), c.Duration.String(), "set count or duration, not both"))
			case c.Count == 0 && c.Duration == nil:
				errs = append(errs, field.Required(cp.Child("count"), "set count (mutations) or duration"))
			case c.Duration != nil && c.Duration.Duration <= 0:
				errs = append(errs, field.Invalid(cp.Child("duration"), c.Duration.String(), "must be positive"))
			case c.Duration != nil && c.Rate == 0:
				errs = append(errs, field.Required(cp.Child("rate"), "a churn bounded by duration needs a rate"))
			}
			if c.Jitter < 0 || c.Jitter >= 1 || math.IsNaN(c.Jitter) {
				errs = append(errs, field.Invalid(cp.Child("jitter"), c.Jitter, "must be in [0, 1)"))
			}
		}
		if pr := st.Probe; pr != nil {
			pp := sp.Child("probe")
			var g *ServiceGroup
			if pr.Group != "" {
				if g = v.group(pr.Group); g == nil {
					errs = append(errs, field.NotFound(pp.Child("group"), pr.Group))
				}
			}
			if pr.Services < 0 {
				errs = append(errs, field.Invalid(pp.Child("services"), pr.Services, "must not be negative (0 probes every Service)"))
			}
			if pr.Connections < 0 {
				errs = append(errs, field.Invalid(pp.Child("connections"), pr.Connections, "must not be negative (0 lets the power calculation decide)"))
			}
			if pr.VMConnections < 0 {
				errs = append(errs, field.Invalid(pp.Child("vmConnections"), pr.VMConnections, "must not be negative (0 takes connections)"))
			}
			if powers := []string{PowerForBoth, PowerForService, PowerForPooled}; !slices.Contains(powers, pr.PowerFor) {
				errs = append(errs, field.NotSupported(pp.Child("powerFor"), pr.PowerFor, powers))
			} else if pr.PowerFor != PowerForBoth && pr.Connections > 0 {
				errs = append(errs, field.Invalid(pp.Child("powerFor"), pr.PowerFor, "plans the automatic count, but connections sets the count: leave connections out (0)"))
			}
			froms := []string{FromPod, FromExternal, FromNode}
			if !slices.Contains(froms, pr.From) {
				errs = append(errs, field.NotSupported(pp.Child("from"), pr.From, froms))
			}
			targets := []string{TargetClusterIP, TargetNodePort, TargetLoadBalancer}
			switch {
			case !slices.Contains(targets, pr.Target):
				errs = append(errs, field.NotSupported(pp.Child("target"), pr.Target, targets))
			case pr.Target == TargetNodePort && g != nil && g.Type == corev1.ServiceTypeClusterIP:
				errs = append(errs, field.Invalid(pp.Child("target"), pr.Target, "group "+g.Name+" is ClusterIP: it has no NodePorts"))
			case pr.Target == TargetLoadBalancer && g != nil && g.Type != corev1.ServiceTypeLoadBalancer:
				errs = append(errs, field.Invalid(pp.Child("target"), pr.Target, "group "+g.Name+" is not type LoadBalancer"))
			case pr.Target == TargetLoadBalancer && sourceRanged(v.s, g) != "":
				errs = append(errs, field.Invalid(pp.Child("target"), pr.Target, "group "+sourceRanged(v.s, g)+" sets loadBalancerSourceRanges, which kpsim's expected-endpoint model does not cover: probe its clusterIP or nodePort, or name another group"))
			case pr.Target == TargetClusterIP && pr.From == FromExternal:
				errs = append(errs, field.Invalid(pp.Child("target"), pr.Target, "ClusterIPs are not reachable from outside the cluster; probe a nodePort or loadBalancer"))
			}
		}
	}
	return errs
}

// RuleCounts lists, per mode, the names a rule expectation can count.
// "iptables/<table>" and "iptables/<table>/chains" take any table name.
var RuleCounts = map[string][]string{
	ModeIPTables: {"iptables/<table>", "iptables/<table>/chains"},
	ModeNFTables: {"nftables/rules", "nftables/chains", "nftables/setElements", "nftables/mapElements", "nftables/numgenRules"},
	ModeIPVS:     {"ipvs/virtualServers", "ipvs/realServers", "ipset/members", "iptables/<table>", "iptables/<table>/chains"},
}

func validRuleCount(mode, count string) bool {
	for _, c := range RuleCounts[mode] {
		if c == count {
			return true
		}
		if strings.HasPrefix(c, "iptables/") {
			parts := strings.Split(count, "/")
			table := len(parts) >= 2 && parts[0] == "iptables" && slices.Contains([]string{"nat", "filter", "mangle", "raw"}, parts[1])
			if table && (len(parts) == 2 || (len(parts) == 3 && parts[2] == "chains")) {
				return true
			}
		}
	}
	return false
}

func (v *validator) expectations(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	e := v.s.Spec.Expectations
	for _, d := range []struct {
		name string
		v    *Duration
	}{{"syncP99", e.SyncP99}, {"firstSync", e.FirstSync}, {"networkProgrammingLatencyP99", e.NetworkProgrammingLatencyP99}} {
		if d.v != nil && d.v.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.String(), "must be positive"))
		}
	}
	if g := e.MemoryGrowthMiBPerMinute; g != nil && (math.IsNaN(*g) || math.IsInf(*g, 0)) {
		errs = append(errs, field.Invalid(p.Child("memoryGrowthMiBPerMinute"), *g, "must be a number"))
	}
	if e.Distribution != "" && e.Distribution != "pass" {
		errs = append(errs, field.NotSupported(p.Child("distribution"), e.Distribution, []string{"pass"}))
	}
	if a := e.DistributionAlpha; a != nil && (*a <= 0 || *a >= 0.5 || math.IsNaN(*a)) {
		errs = append(errs, field.Invalid(p.Child("distributionAlpha"), *a, "must be a probability in (0, 0.5)"))
	}
	if e.Oracle != "" && e.Oracle != OracleEqual && e.Oracle != OracleSkip && e.Oracle != OracleHost {
		errs = append(errs, field.NotSupported(p.Child("oracle"), e.Oracle, []string{OracleEqual, OracleSkip, OracleHost}))
	}
	for i, r := range e.Rules {
		rp := p.Child("rules").Index(i)
		var modes []string
		for _, m := range v.s.Spec.Modes {
			if r.Mode == m.Name || r.Mode == m.Mode {
				modes = append(modes, m.Mode)
			}
		}
		if len(modes) == 0 {
			errs = append(errs, field.NotFound(rp.Child("mode"), r.Mode))
		}
		for _, m := range modes {
			if !validRuleCount(m, r.Count) {
				errs = append(errs, field.NotSupported(rp.Child("count"), r.Count, RuleCounts[m]))
				break
			}
		}
		if r.At != RulesAtFirstSync && r.At != RulesAtEnd {
			errs = append(errs, field.NotSupported(rp.Child("at"), r.At, []string{RulesAtFirstSync, RulesAtEnd}))
		}
		switch {
		case r.Equals == nil && r.Min == nil && r.Max == nil:
			errs = append(errs, field.Required(rp.Child("equals"), "set equals, or min and/or max"))
		case r.Equals != nil && (r.Min != nil || r.Max != nil):
			errs = append(errs, field.Invalid(rp.Child("equals"), *r.Equals, "set equals or a min/max range, not both"))
		case r.Min != nil && r.Max != nil && *r.Min > *r.Max:
			errs = append(errs, field.Invalid(rp.Child("max"), *r.Max, fmt.Sprintf("must be at least min (%d)", *r.Min)))
		}
		for _, b := range []struct {
			name string
			v    *int
		}{{"equals", r.Equals}, {"min", r.Min}, {"max", r.Max}} {
			if b.v != nil && *b.v < 0 {
				errs = append(errs, field.Invalid(rp.Child(b.name), *b.v, "must not be negative"))
			}
		}
	}
	return errs
}

// variants checks spec.variants and spec.repeat; that the binaries exist
// is checked when a run starts (kpsim validate runs anywhere).
func (v *validator) variants(spec *field.Path) field.ErrorList {
	errs := CheckVariants(spec.Child("variants"), v.s.Spec.Variants)
	if len(v.s.Spec.Variants) > 0 && v.s.Spec.Sweep != nil {
		errs = append(errs, field.Forbidden(spec.Child("variants"), "variants and a sweep in one run are not supported: run the sweep once per variant"))
	}
	switch r := v.s.Spec.Repeat; {
	case r < 0:
		errs = append(errs, field.Invalid(spec.Child("repeat"), r, "must not be negative"))
	case r > 0 && len(v.s.Spec.Variants) == 0:
		errs = append(errs, field.Forbidden(spec.Child("repeat"), "repeats the runs of spec.variants, which are not set (with kpsim run --variants, use --repeat)"))
	}
	errs = append(errs, CheckVMLane(spec.Child("vmLane"), v.s.Spec.VMLane)...)
	if v.s.Spec.VMLane == VMLaneBeside && (len(v.s.Spec.Variants) > 0 || v.s.Spec.Sweep != nil) {
		errs = append(errs, field.Forbidden(spec.Child("vmLane"), VMLaneBesideForbidden))
	}
	return errs
}

// VMLaneBesideForbidden says why a VM lane beside the host's cannot go
// with variants or a sweep.
const VMLaneBesideForbidden = "a VM lane beside the host's is for plain runs: variants and sweeps compare timings across runs, which sharing the machine would skew"

// CheckVMLane checks spec.vmLane or kpsim run --vm-lane (at p).
func CheckVMLane(p *field.Path, lane string) field.ErrorList {
	if lane != "" && lane != VMLaneAfter && lane != VMLaneBeside {
		return field.ErrorList{field.NotSupported(p, lane, []string{VMLaneAfter, VMLaneBeside})}
	}
	return nil
}

// CheckVariants checks the variants of a comparison (spec.variants or
// kpsim run --variants, at p): unique DNS-label names, a binary each, and
// at least two.
func CheckVariants(p *field.Path, vs []Variant) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, vr := range vs {
		vp := p.Index(i)
		switch {
		case vr.Name == "":
			errs = append(errs, field.Required(vp.Child("name"), "a DNS label naming the variant's results"))
		case len(utilvalidation.IsDNS1123Label(vr.Name)) > 0:
			errs = append(errs, field.Invalid(vp.Child("name"), vr.Name, strings.Join(utilvalidation.IsDNS1123Label(vr.Name), "; ")))
		case names[vr.Name]:
			errs = append(errs, field.Duplicate(vp.Child("name"), vr.Name))
		}
		names[vr.Name] = true
		if vr.Binary == "" {
			errs = append(errs, field.Required(vp.Child("binary"), "the kpsim binary of this variant, e.g. bin/kpsim-v1.36.3 (make variant)"))
		}
	}
	if n := len(vs); n == 1 {
		errs = append(errs, field.Invalid(p, n, "a comparison needs at least two variants"))
	}
	return errs
}

func (v *validator) sweep(p *field.Path) field.ErrorList {
	sw := v.s.Spec.Sweep
	if sw == nil {
		return nil
	}
	var errs field.ErrorList
	if v.group(sw.Group) == nil {
		errs = append(errs, field.NotFound(p.Child("group"), sw.Group))
	}
	if len(sw.Counts) == 0 {
		errs = append(errs, field.Required(p.Child("counts"), "the group sizes to run"))
	}
	for i, c := range sw.Counts {
		if c < 1 {
			errs = append(errs, field.Invalid(p.Child("counts").Index(i), c, "must be positive"))
		} else if i > 0 && c <= sw.Counts[i-1] {
			errs = append(errs, field.Invalid(p.Child("counts").Index(i), c, "counts must be ascending"))
		}
	}
	keys := make([]string, 0, len(sw.MaxCount))
	for k := range sw.MaxCount {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kp, c := p.Child("maxCount").Key(k), sw.MaxCount[k]
		if !slices.ContainsFunc(v.s.Spec.Modes, func(m ModeSpec) bool { return m.Name == k || m.Mode == k }) {
			errs = append(errs, field.NotFound(kp, k))
			continue
		}
		switch {
		case c < 1:
			errs = append(errs, field.Invalid(kp, c, "must be positive"))
		case len(sw.Counts) > 0 && c < sw.Counts[0]:
			errs = append(errs, field.Invalid(kp, c, fmt.Sprintf("is below the smallest count %d: the mode would run no size (remove it from spec.modes instead)", sw.Counts[0])))
		}
	}
	return errs
}

// capacity refuses a scenario whose addresses or ports cannot fit, before
// anything is created, and says the largest size that fits. A sweep is
// checked at each of its counts: a count that does not fit is named, with
// the largest count that does.
func (v *validator) capacity(spec *field.Path) field.ErrorList {
	errs := v.fit(v.s.peak()).errors()
	sw := v.s.Spec.Sweep
	if len(errs) > 0 || sw == nil {
		return errs
	}
	at := func(count int) misfits { return v.fit(v.s.resized(sw.Group, count).peak()) }
	for i, c := range sw.Counts {
		misfit := at(c)
		if len(misfit) == 0 {
			continue
		}
		lo, hi := 0, c // lo fits, hi does not
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if len(at(mid)) == 0 {
				lo = mid
			} else {
				hi = mid
			}
		}
		errs = append(errs, field.Invalid(spec.Child("sweep", "counts").Index(i), c,
			fmt.Sprintf("group %s at this size does not fit: %s %v %s; the largest count that fits is %d", sw.Group, misfit[0].path, misfit[0].value, misfit[0].detail, lo)))
	}
	return errs
}

// resized returns a copy of s with group's count set to count (the copy
// shares everything but the groups).
func (s *Scenario) resized(group string, count int) *Scenario {
	c := *s
	c.Spec.ServiceGroups = slices.Clone(s.Spec.ServiceGroups)
	for i := range c.Spec.ServiceGroups {
		if c.Spec.ServiceGroups[i].Name == group {
			c.Spec.ServiceGroups[i].Count = count
		}
	}
	return &c
}

// misfit is one range too small for what a scenario needs.
type misfit struct {
	path   *field.Path
	value  any
	detail string
}

type misfits []misfit

func (ms misfits) errors() field.ErrorList {
	var errs field.ErrorList
	for _, m := range ms {
		errs = append(errs, field.Invalid(m.path, m.value, m.detail))
	}
	return errs
}

// fit checks n, what the scenario can grow to (Counts().Peak), against
// the cluster's ranges.
func (v *validator) fit(n Tally) misfits {
	var out misfits
	cl := field.NewPath("spec", "cluster")
	check := func(path *field.Path, pfx netip.Prefix, reserved int64, need int64, what string) {
		have := prefixSize(pfx) - reserved
		if need > have {
			out = append(out, misfit{path, pfx.String(), fmt.Sprintf("holds %d %s, the scenario needs up to %d: use a /%d or larger prefix", have, what, need, bitsFor(need+reserved))})
		}
	}
	// The service CIDR's network address and the "kubernetes" Service's
	// address are not handed out. Headless Services are counted too: it
	// errs on the safe side, and bounds a group's count before anything
	// is generated for it.
	check(cl.Child("serviceCIDR"), v.serviceCIDR, 2, int64(n.Services), "ClusterIPs")
	check(cl.Child("podCIDR"), v.podCIDR, ReservedPodAddresses+1, n.Endpoints, "endpoint addresses")
	check(cl.Child("loadBalancerCIDR"), v.lbCIDR, 1, int64(n.LoadBalancerIPs), "LoadBalancer IPs")
	if have := NodePortMax - NodePortMin + 1; n.NodePorts > have {
		out = append(out, misfit{field.NewPath("spec", "serviceGroups"), n.NodePorts, fmt.Sprintf("NodePort and LoadBalancer Services need %d NodePorts; the range %d-%d holds %d", n.NodePorts, NodePortMin, NodePortMax, have)})
	}
	return out
}

func prefixSize(p netip.Prefix) int64 {
	n := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// bitsFor returns the longest IPv4 prefix length that holds n addresses.
func bitsFor(n int64) int {
	bits := 32
	for bits > 0 && int64(1)<<(32-bits) < n {
		bits--
	}
	return bits
}

func ipv4Prefix(p *field.Path, s string, maxBits int) (netip.Prefix, field.ErrorList) {
	pfx, err := netip.ParsePrefix(s)
	switch {
	case err != nil || !pfx.Addr().Is4():
		return netip.Prefix{}, field.ErrorList{field.Invalid(p, s, "must be an IPv4 CIDR such as 10.96.0.0/16 (IPv6 is not supported yet)")}
	case pfx.Masked() != pfx:
		return netip.Prefix{}, field.ErrorList{field.Invalid(p, s, "has host bits set; did you mean "+pfx.Masked().String()+"?")}
	case pfx.Bits() > maxBits:
		return netip.Prefix{}, field.ErrorList{field.Invalid(p, s, fmt.Sprintf("is too small: at most /%d", maxBits))}
	}
	return pfx, nil
}

func dnsLabel(p *field.Path, s string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Label(s) {
		errs = append(errs, field.Invalid(p, s, msg))
	}
	return errs
}

func dnsSubdomain(p *field.Path, s string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(s) {
		errs = append(errs, field.Invalid(p, s, msg))
	}
	return errs
}

func zone(p *field.Path, z string) field.ErrorList {
	if z == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsValidLabelValue(z) {
		errs = append(errs, field.Invalid(p, z, msg))
	}
	return errs
}

// fault checks one fault of spec.faults or a fault step.
func (v *validator) fault(p *field.Path, f *Fault) field.ErrorList {
	var errs field.ErrorList
	for i, name := range f.Modes {
		if !slices.ContainsFunc(v.s.Spec.Modes, func(m ModeSpec) bool { return m.Name == name || m.Mode == name }) {
			errs = append(errs, field.NotFound(p.Child("modes").Index(i), name))
		}
	}
	if (f.Command == nil) == (f.API == nil) {
		return append(errs, field.Invalid(p, "", "a fault needs exactly one of command, api"))
	}
	if c := f.Command; c != nil {
		cp := p.Child("command")
		if !slices.Contains(FaultCommands, c.Name) {
			errs = append(errs, field.NotSupported(cp.Child("name"), c.Name, FaultCommands))
		}
		if c.Failures < 1 {
			errs = append(errs, field.Invalid(cp.Child("failures"), c.Failures, "must be at least 1"))
		}
	}
	if a := f.API; a != nil {
		ap := p.Child("api")
		if a.Resource == "" {
			errs = append(errs, field.Required(ap.Child("resource"), "services, endpointslices, nodes, servicecidrs or *"))
		}
		for i, v := range a.Verbs {
			if !slices.Contains(FaultVerbs, v) {
				errs = append(errs, field.NotSupported(ap.Child("verbs").Index(i), v, FaultVerbs))
			}
		}
		if a.Errors < 0 {
			errs = append(errs, field.Invalid(ap.Child("errors"), a.Errors, "must not be negative"))
		}
		if a.Delay.Duration < 0 {
			errs = append(errs, field.Invalid(ap.Child("delay"), a.Delay.String(), "must not be negative"))
		}
		if a.Delayed < 0 {
			errs = append(errs, field.Invalid(ap.Child("delayed"), a.Delayed, "must not be negative"))
		}
		if a.Delayed > 0 && a.Delay.Duration == 0 {
			errs = append(errs, field.Required(ap.Child("delay"), "delayed calls need a delay"))
		}
		if a.Errors == 0 && a.Delay.Duration == 0 {
			errs = append(errs, field.Invalid(ap, "", "set errors, delay or both"))
		}
	}
	return errs
}

// sourceRanged names the group with loadBalancerSourceRanges a probe of g
// (nil: every group) would reach, or "".
func sourceRanged(s *Scenario, g *ServiceGroup) string {
	for i := range s.Spec.ServiceGroups {
		sg := &s.Spec.ServiceGroups[i]
		if (g == nil || g == sg) && len(sg.LoadBalancerSourceRanges) > 0 {
			return sg.Name
		}
	}
	return ""
}
