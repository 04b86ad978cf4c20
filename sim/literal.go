package sim

import (
	"fmt"
	"net/netip"

	"github.com/kpsim/kpsim/scenarios"
	corev1 "k8s.io/api/core/v1"
)

// literalPending lists what literal Services left unset and the generator
// fills in after the groups, as the API server (ClusterIP, NodePorts) or a
// cloud controller (LoadBalancer ingress) would.
type literalPending struct {
	clusterIPs []*corev1.Service
	nodePorts  []*corev1.ServicePort
	lbIPs      []*corev1.Service
	// names of literal Services, so a generated one cannot shadow them.
	keys map[string]string
}

// reserveLiterals copies spec.objects and claims every address and port
// they set, before any is generated, so generated ones never collide with
// them.
func (st *state) reserveLiterals(objs []scenarios.Object) (*literalPending, error) {
	pending := &literalPending{keys: map[string]string{}}
	st.literalKeys = pending.keys
	slicePodIPs := map[netip.Addr]bool{}
	for i, o := range objs {
		where := fmt.Sprintf("spec.objects[%d]", i)
		if o.Line > 0 {
			where += fmt.Sprintf(" (line %d)", o.Line)
		}
		switch {
		case o.Service != nil:
			svc := o.Service.DeepCopy()
			if svc.Namespace == "" {
				svc.Namespace = scenarios.DefaultNamespace
			}
			key := svc.Namespace + "/" + svc.Name
			where += " service " + key
			if _, dup := pending.keys[key]; dup {
				return nil, fmt.Errorf("%s: duplicate Service", where)
			}
			pending.keys[key] = where
			if err := st.reserveLiteralService(svc, pending); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			st.literalServices = append(st.literalServices, svc)
		case o.EndpointSlice != nil:
			sl := o.EndpointSlice.DeepCopy()
			if sl.Namespace == "" {
				sl.Namespace = scenarios.DefaultNamespace
			}
			where += " endpointSlice " + sl.Namespace + "/" + sl.Name
			for _, ep := range sl.Endpoints {
				for _, a := range ep.Addresses {
					addr, err := netip.ParseAddr(a)
					if err != nil {
						return nil, fmt.Errorf("%s: address %q: %w", where, a, err)
					}
					// One pod may back several Services, so the same address
					// may repeat across literal slices; it only has to stay
					// out of the generated pool.
					if !st.podIPs.Contains(addr) || slicePodIPs[addr] {
						continue
					}
					if err := st.podIPs.Reserve(addr); err != nil {
						return nil, fmt.Errorf("%s: %w", where, err)
					}
					slicePodIPs[addr] = true
				}
			}
			st.literalSlices = append(st.literalSlices, sl)
		default:
			return nil, fmt.Errorf("%s: neither a Service nor an EndpointSlice", where)
		}
	}
	return pending, nil
}

func (st *state) reserveLiteralService(svc *corev1.Service, pending *literalPending) error {
	switch ip := svc.Spec.ClusterIP; ip {
	case "":
		pending.clusterIPs = append(pending.clusterIPs, svc)
	case corev1.ClusterIPNone:
	default:
		addr, err := netip.ParseAddr(ip)
		if err != nil || !addr.Is4() {
			return fmt.Errorf("clusterIP %q is not an IPv4 address", ip)
		}
		if !st.svcIPs.Contains(addr) {
			return fmt.Errorf("clusterIP %s is outside service CIDR %s", addr, st.serviceCIDR)
		}
		// The first address belongs to default/kubernetes, which a scenario
		// may add literally.
		kubernetes := svc.Namespace == "default" && svc.Name == "kubernetes" && addr == st.serviceCIDR.Addr().Next()
		if !kubernetes {
			if err := st.svcIPs.Reserve(addr); err != nil {
				return fmt.Errorf("clusterIP: %w", err)
			}
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for j := range svc.Spec.Ports {
			p := &svc.Spec.Ports[j]
			if p.NodePort == 0 {
				pending.nodePorts = append(pending.nodePorts, p)
				continue
			}
			if err := st.nodePorts.Reserve(p.NodePort); err != nil {
				return fmt.Errorf("ports[%d].nodePort: %w", j, err)
			}
		}
	}
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
		if err := st.nodePorts.Reserve(hc); err != nil {
			return fmt.Errorf("healthCheckNodePort: %w", err)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		if len(svc.Status.LoadBalancer.Ingress) == 0 {
			pending.lbIPs = append(pending.lbIPs, svc)
		}
		for j, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP == "" {
				continue
			}
			addr, err := netip.ParseAddr(in.IP)
			if err != nil {
				return fmt.Errorf("status.loadBalancer.ingress[%d].ip: %w", j, err)
			}
			if st.lbIPs.Contains(addr) {
				if err := st.lbIPs.Reserve(addr); err != nil {
					return fmt.Errorf("status.loadBalancer.ingress[%d].ip: %w", j, err)
				}
			}
		}
	}
	return nil
}

// allocateLiterals fills what literal Services left unset. Capacity was
// checked with the groups, so errors here are unexpected.
func (st *state) allocateLiterals(p *literalPending) error {
	for _, svc := range p.clusterIPs {
		ip, err := st.svcIPs.Allocate()
		if err != nil {
			return fmt.Errorf("literal service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		svc.Spec.ClusterIP = ip.String()
		svc.Spec.ClusterIPs = []string{ip.String()}
	}
	for _, port := range p.nodePorts {
		np, err := st.nodePorts.Allocate()
		if err != nil {
			return fmt.Errorf("literal service port %q: %w", port.Name, err)
		}
		port.NodePort = np
	}
	for _, svc := range p.lbIPs {
		ip, err := st.lbIPs.Allocate()
		if err != nil {
			return fmt.Errorf("literal service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		vip := corev1.LoadBalancerIPModeVIP
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String(), IPMode: &vip}}
	}
	return nil
}
