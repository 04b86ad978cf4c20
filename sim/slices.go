package sim

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Labels and annotations the EndpointSlice controller writes.
const (
	ManagedByLabel     = discoveryv1.LabelManagedBy // endpointslice.kubernetes.io/managed-by
	ManagedByValue     = "endpointslice-controller.k8s.io"
	ServiceNameLabel   = discoveryv1.LabelServiceName // kubernetes.io/service-name
	HeadlessLabel      = corev1.IsHeadlessService     // service.kubernetes.io/headless
	TriggerTimeAnnoKey = corev1.EndpointsLastChangeTriggerTime
)

// packSlices cuts a new Service's endpoints into slices of at most 100,
// as the controller does for a Service it sees for the first time
// (250 -> 100/100/50). A Service with no endpoints gets one empty
// placeholder slice, as the controller writes.
func packSlices(svc *Service, eps []Endpoint) []Slice {
	var out []Slice
	for len(eps) > 0 || len(out) == 0 {
		n := min(len(eps), maxEndpointsPerSlice)
		out = append(out, Slice{Name: svc.nextSliceName(), Endpoints: append([]Endpoint(nil), eps[:n]...)})
		eps = eps[n:]
	}
	return out
}

func (s *Service) nextSliceName() string {
	name := fmt.Sprintf("%s-%d", s.Name, s.nextSlice)
	s.nextSlice++
	return name
}

// serviceObject renders a generated Service as the API server stores it
// after defaulting and allocation.
func (st *state) serviceObject(svc *Service) *corev1.Service {
	g := st.byName[svc.Group]
	spec := &g.spec
	obj := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name,
			Namespace: svc.Namespace,
			UID:       svc.UID,
			Labels:    copyLabels(g.labels),
		},
		Spec: corev1.ServiceSpec{
			Type:                  svc.Type,
			Selector:              map[string]string{"app": svc.Name},
			SessionAffinity:       spec.SessionAffinity,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr.To(spec.InternalTrafficPolicy),
		},
	}
	if obj.Spec.SessionAffinity == "" {
		obj.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.InternalTrafficPolicy == "" {
		obj.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if svc.Headless {
		obj.Spec.ClusterIP = corev1.ClusterIPNone
	} else {
		obj.Spec.ClusterIP = svc.ClusterIP.String()
	}
	obj.Spec.ClusterIPs = []string{obj.Spec.ClusterIP}
	if obj.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		timeout := ptr.To(int32(10800))
		if spec.SessionAffinityTimeoutSeconds != nil {
			timeout = ptr.To(*spec.SessionAffinityTimeoutSeconds)
		}
		obj.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: timeout}}
	}
	if svc.Type == corev1.ServiceTypeNodePort || svc.Type == corev1.ServiceTypeLoadBalancer {
		obj.Spec.ExternalTrafficPolicy = spec.ExternalTrafficPolicy
		if obj.Spec.ExternalTrafficPolicy == "" {
			obj.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
	}
	if spec.TrafficDistribution != "" {
		obj.Spec.TrafficDistribution = ptr.To(spec.TrafficDistribution)
	}
	for _, p := range svc.Ports {
		obj.Spec.Ports = append(obj.Spec.Ports, corev1.ServicePort{
			Name:       p.Name,
			Protocol:   p.Protocol,
			Port:       p.Port,
			TargetPort: intstr.FromInt32(p.TargetPort),
			NodePort:   p.NodePort,
		})
	}
	obj.Spec.ExternalIPs = slices.Clone(spec.ExternalIPs)
	if svc.Type == corev1.ServiceTypeLoadBalancer {
		obj.Spec.LoadBalancerSourceRanges = slices.Clone(spec.LoadBalancerSourceRanges)
		obj.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
		obj.Spec.HealthCheckNodePort = svc.HealthCheckNodePort
		obj.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{
			IP:     svc.LoadBalancerIP.String(),
			IPMode: ptr.To(corev1.LoadBalancerIPModeVIP),
		}}
	}
	return obj
}

// sliceObject renders one slice as the EndpointSlice controller writes it.
func (st *state) sliceObject(svc *Service, sl *Slice) *discoveryv1.EndpointSlice {
	g := st.byName[svc.Group]
	labels := copyLabels(g.labels)
	labels[ServiceNameLabel] = svc.Name
	labels[ManagedByLabel] = ManagedByValue
	if svc.Headless {
		labels[HeadlessLabel] = ""
	}
	obj := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:         sl.Name,
			GenerateName: svc.Name + "-",
			Namespace:    svc.Namespace,
			UID:          uidFor("EndpointSlice", svc.Namespace, sl.Name),
			Labels:       labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "v1",
				Kind:               "Service",
				Name:               svc.Name,
				UID:                svc.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{},
		Endpoints:   make([]discoveryv1.Endpoint, 0, len(sl.Endpoints)),
	}
	if !sl.TriggerTime.IsZero() {
		obj.Annotations = map[string]string{TriggerTimeAnnoKey: sl.TriggerTime.UTC().Format(time.RFC3339Nano)}
	}
	// The controller writes no ports on a placeholder slice.
	if len(sl.Endpoints) > 0 {
		for _, p := range svc.Ports {
			obj.Ports = append(obj.Ports, discoveryv1.EndpointPort{
				Name:     ptr.To(p.Name),
				Protocol: ptr.To(p.Protocol),
				Port:     ptr.To(p.TargetPort),
			})
		}
	}
	dist := g.spec.TrafficDistribution
	for _, ep := range sl.Endpoints {
		ready, serving, terminating := ep.Condition.Flags()
		e := discoveryv1.Endpoint{
			Addresses:  []string{ep.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)},
			NodeName:   ptr.To(ep.Node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: ep.Pod, UID: uidFor("Pod", svc.Namespace, ep.Pod)},
		}
		if ep.Zone != "" {
			e.Zone = ptr.To(ep.Zone)
		}
		// The controller's trafficDistribution heuristic hints every
		// endpoint at its own zone (and node for PreferSameNode); an
		// endpoint without a zone gets no hint.
		if dist != "" && ep.Zone != "" {
			e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: ep.Zone}}}
			if dist == corev1.ServiceTrafficDistributionPreferSameNode {
				e.Hints.ForNodes = []discoveryv1.ForNode{{Name: ep.Node}}
			}
		}
		obj.Endpoints = append(obj.Endpoints, e)
	}
	return obj
}

func nodeObject(n NodeInfo) *corev1.Node {
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			UID:    uidFor("Node", "", n.Name),
			Labels: map[string]string{corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux"},
		},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	if n.Zone != "" {
		obj.Labels[corev1.LabelTopologyZone] = n.Zone
	}
	if n.IP.IsValid() {
		obj.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.IP.String()},
			{Type: corev1.NodeHostName, Address: n.Name},
		}
	}
	return obj
}

// serviceCIDRObject is the default ServiceCIDR the API server creates.
func serviceCIDRObject(p netip.Prefix) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", UID: uidFor("ServiceCIDR", "", "kubernetes")},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{p.String()}},
		Status: networkingv1.ServiceCIDRStatus{
			Conditions: []metav1.Condition{{Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue, Reason: "", Message: ""}},
		},
	}
}

func copyLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in)+3)
	for k, v := range in {
		out[k] = v
	}
	return out
}
