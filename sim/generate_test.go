package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kpsim/kpsim/scenarios"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// testScenario returns a defaulted scenario with the given groups.
func testScenario(groups ...scenarios.ServiceGroup) *scenarios.Scenario {
	s := &scenarios.Scenario{
		APIVersion: scenarios.APIVersion,
		Kind:       scenarios.Kind,
		Metadata:   scenarios.Metadata{Name: "test"},
		Spec:       scenarios.Spec{ServiceGroups: groups},
	}
	scenarios.Default(s)
	return s
}

func fixed(n int) *scenarios.IntRange { return &scenarios.IntRange{Min: n, Max: n} }

func newTestCluster(t testing.TB, s *scenarios.Scenario) *Cluster {
	t.Helper()
	c, err := New(s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func listSlices(t testing.TB, c *Cluster, ns string) map[string]*discoveryv1.EndpointSlice {
	t.Helper()
	l, err := c.Clientset.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*discoveryv1.EndpointSlice{}
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out
}

func TestSlicesOver100Endpoints(t *testing.T) {
	s := testScenario(scenarios.ServiceGroup{
		Name: "big", Count: 1, Endpoints: fixed(250),
		Ports:  []scenarios.ServicePort{{Name: "http", Port: 80, TargetPort: 8080}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
		Labels: map[string]string{"team": "a"},
	})
	scenarios.Default(s)
	c := newTestCluster(t, s)
	slices := listSlices(t, c, "default")
	var sizes []int
	for _, name := range []string{"big-0-0", "big-0-1", "big-0-2"} {
		sl, ok := slices[name]
		if !ok {
			t.Fatalf("slice %s missing; have %v", name, keys(slices))
		}
		sizes = append(sizes, len(sl.Endpoints))
		wantLabels := map[string]string{
			"kubernetes.io/service-name":             "big-0",
			"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
			"team":                                   "a",
			GroupLabel:                               "big",
		}
		if diff := cmp.Diff(wantLabels, sl.Labels); diff != "" {
			t.Errorf("%s labels (-want +got):\n%s", name, diff)
		}
		wantPorts := []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))},
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(53))},
		}
		if diff := cmp.Diff(wantPorts, sl.Ports); diff != "" {
			t.Errorf("%s ports (-want +got):\n%s", name, diff)
		}
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			t.Errorf("%s addressType = %s", name, sl.AddressType)
		}
		if len(sl.OwnerReferences) != 1 || sl.OwnerReferences[0].Kind != "Service" || sl.OwnerReferences[0].Name != "big-0" || !*sl.OwnerReferences[0].Controller {
			t.Errorf("%s ownerReferences = %+v", name, sl.OwnerReferences)
		}
		for _, ep := range sl.Endpoints {
			want := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
			if diff := cmp.Diff(want, ep.Conditions); diff != "" {
				t.Fatalf("%s conditions (-want +got):\n%s", name, diff)
			}
			if *ep.NodeName != "kpsim-node" || *ep.Zone != "zone-a" || ep.Hints != nil {
				t.Fatalf("%s endpoint placement: node %v zone %v hints %v", name, *ep.NodeName, *ep.Zone, ep.Hints)
			}
		}
	}
	if diff := cmp.Diff([]int{100, 100, 50}, sizes); diff != "" {
		t.Errorf("slice sizes (-want +got):\n%s", diff)
	}
	if len(slices) != 3 {
		t.Errorf("got %d slices, want 3", len(slices))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestServiceObject(t *testing.T) {
	s := testScenario(scenarios.ServiceGroup{
		Name: "lb", Count: 1, Type: corev1.ServiceTypeLoadBalancer,
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		InternalTrafficPolicy: corev1.ServiceInternalTrafficPolicyLocal,
		TrafficDistribution:   corev1.ServiceTrafficDistributionPreferSameNode,
		Labels:                map[string]string{"service.kubernetes.io/service-proxy-name": "other"},
	})
	c := newTestCluster(t, s)
	got, err := c.Clientset.CoreV1().Services("default").Get(context.Background(), "lb-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "lb-0", Namespace: "default", UID: uidFor("Service", "default", "lb-0"),
			Labels: map[string]string{"service.kubernetes.io/service-proxy-name": "other", GroupLabel: "lb"},
		},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			Selector:                      map[string]string{"app": "lb-0"},
			ClusterIP:                     "10.96.0.2",
			ClusterIPs:                    []string{"10.96.0.2"},
			Ports:                         []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30000}},
			SessionAffinity:               corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:         &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(10800))}},
			IPFamilies:                    []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:                ptr.To(corev1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy:         ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort:           30001,
			AllocateLoadBalancerNodePorts: ptr.To(true),
			TrafficDistribution:           ptr.To(corev1.ServiceTrafficDistributionPreferSameNode),
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: "192.168.100.1", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
		}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("service (-want +got):\n%s", diff)
	}
	sl := listSlices(t, c, "default")["lb-0-0"]
	wantHints := &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}, ForNodes: []discoveryv1.ForNode{{Name: "kpsim-node"}}}
	if diff := cmp.Diff(wantHints, sl.Endpoints[0].Hints); diff != "" {
		t.Errorf("hints (-want +got):\n%s", diff)
	}

	nodes, _ := c.Clientset.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if len(nodes.Items) != 1 || nodes.Items[0].Labels[corev1.LabelTopologyZone] != "zone-a" ||
		nodes.Items[0].Labels[corev1.LabelHostname] != "kpsim-node" ||
		nodes.Items[0].Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.30.0.2"}) {
		t.Errorf("nodes = %+v", nodes.Items)
	}
	cidr, err := c.Clientset.NetworkingV1().ServiceCIDRs().Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil || !cmp.Equal(cidr.Spec.CIDRs, []string{"10.96.0.0/16"}) {
		t.Errorf("ServiceCIDR kubernetes = %+v, %v", cidr, err)
	}
}

func TestHeadlessService(t *testing.T) {
	c := newTestCluster(t, testScenario(scenarios.ServiceGroup{Name: "hl", Count: 1, Headless: true}))
	svc, _ := c.Clientset.CoreV1().Services("default").Get(context.Background(), "hl-0", metav1.GetOptions{})
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("clusterIP = %q, want None", svc.Spec.ClusterIP)
	}
	if _, ok := listSlices(t, c, "default")["hl-0-0"].Labels[HeadlessLabel]; !ok {
		t.Error("headless Service's slice lacks the service.kubernetes.io/headless label")
	}
}

func TestPlacementAndConditionMix(t *testing.T) {
	s := testScenario(scenarios.ServiceGroup{
		Name: "mix", Count: 7, Endpoints: fixed(10), // 70 endpoints
		Conditions:    scenarios.ConditionMix{Ready: 0.5, ServingTerminating: 0.25, Terminating: 0.15, NotReady: 0.1},
		LocalFraction: ptr.To(0.3),
		Zones:         []string{"zone-b"},
	})
	s.Spec.Cluster.OtherNodes = []scenarios.Node{{Name: "n1", Zone: "zone-b"}, {Name: "n2", Zone: "zone-c"}, {Name: "n3", Zone: "zone-b"}}
	c := newTestCluster(t, s)
	conds := map[Condition]int{}
	nodes := map[string]int{}
	for _, svc := range c.Snapshot().Services {
		for _, ep := range svc.Endpoints() {
			conds[ep.Condition]++
			nodes[ep.Node]++
		}
	}
	// 70 x {0.5, 0.25, 0.15, 0.1} = {35, 17.5, 10.5, 7}: largest remainder
	// gives the extra one to the earlier tie.
	if diff := cmp.Diff(map[Condition]int{Ready: 35, ServingTerminating: 18, Terminating: 10, NotReady: 7}, conds); diff != "" {
		t.Errorf("condition counts (-want +got):\n%s", diff)
	}
	// 21 local, 49 round-robin over n1 and n3 (zone-b only).
	if nodes["kpsim-node"] != 21 || nodes["n2"] != 0 || nodes["n1"]+nodes["n3"] != 49 || abs(nodes["n1"]-nodes["n3"]) > 1 {
		t.Errorf("placement = %v", nodes)
	}
}

func abs(x int) int { return max(x, -x) }

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(s *scenarios.Scenario)
		want   []string
	}{
		{
			name: "pod CIDR too small",
			mutate: func(s *scenarios.Scenario) {
				s.Spec.Cluster.PodCIDR = "10.244.0.0/24"
				s.Spec.ServiceGroups[0].Endpoints = fixed(30) // 300 endpoints
			},
			want: []string{"pod CIDR 10.244.0.0/24 is too small", "239 usable addresses", "needs 300"},
		},
		{
			name:   "service CIDR too small",
			mutate: func(s *scenarios.Scenario) { s.Spec.Cluster.ServiceCIDR = "10.96.0.0/29" },
			want:   []string{"service CIDR 10.96.0.0/29 is too small", "5 usable addresses", "needs 10"},
		},
		{
			name: "NodePort range exhausted",
			mutate: func(s *scenarios.Scenario) {
				g := &s.Spec.ServiceGroups[0]
				g.Count, g.Type = 1000, corev1.ServiceTypeNodePort
				g.Ports = []scenarios.ServicePort{{Name: "a", Port: 80, TargetPort: 80, Protocol: "TCP"}, {Name: "b", Port: 81, TargetPort: 81, Protocol: "TCP"}, {Name: "c", Port: 82, TargetPort: 82, Protocol: "TCP"}}
			},
			want: []string{"NodePort range 30000-32767 is too small", "2768 ports", "needs 3000"},
		},
		{
			name: "load-balancer CIDR too small",
			mutate: func(s *scenarios.Scenario) {
				s.Spec.Cluster.LoadBalancerCIDR = "192.168.100.0/30"
				s.Spec.ServiceGroups[0].Type = corev1.ServiceTypeLoadBalancer
			},
			want: []string{"load-balancer CIDR 192.168.100.0/30 is too small", "2 usable addresses", "needs 10"},
		},
		{
			name:   "local fraction without other nodes",
			mutate: func(s *scenarios.Scenario) { s.Spec.ServiceGroups[0].LocalFraction = ptr.To(0.5) },
			want:   []string{"spec.serviceGroups[0].localFraction", "otherNodes is empty"},
		},
		{
			name: "literal ClusterIP collides",
			mutate: func(s *scenarios.Scenario) {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.9"}}
				dup := svc.DeepCopy()
				dup.Name = "y"
				s.Spec.Objects = []scenarios.Object{{Service: svc, Line: 7}, {Service: dup, Line: 12}}
			},
			want: []string{"spec.objects[1] (line 12) service default/y", "10.96.0.9 is already in use"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testScenario(scenarios.ServiceGroup{Name: "web", Count: 10})
			tc.mutate(s)
			_, err := New(s)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLiteralObjects(t *testing.T) {
	s := testScenario(scenarios.ServiceGroup{Name: "web", Count: 3})
	s.Spec.Objects = []scenarios.Object{
		{Service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pinned"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.2"}}},
		{Service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: "default"}}},
		{EndpointSlice: &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "pinned-x", Namespace: "default"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.16"}}},
		}},
	}
	c := newTestCluster(t, s)
	m := c.Snapshot()
	for _, svc := range m.Services {
		if svc.ClusterIP.String() == "10.96.0.2" {
			t.Errorf("generated %s took the literal ClusterIP 10.96.0.2", svc.Key())
		}
		for _, ep := range svc.Endpoints() {
			if ep.IP.String() == "10.244.0.16" {
				t.Errorf("generated endpoint took literal address 10.244.0.16")
			}
		}
	}
	free, err := c.Clientset.CoreV1().Services("default").Get(context.Background(), "free", metav1.GetOptions{})
	if err != nil || free.Spec.ClusterIP != "10.96.0.6" {
		t.Errorf("literal Service without ClusterIP: got %q, %v; want the next free 10.96.0.6", free.Spec.ClusterIP, err)
	}
	assertUnique(t, c)
}

// TestBuildDeterministic: the same scenario and seed give byte-identical
// objects, and another seed gives different ones.
func TestBuildDeterministic(t *testing.T) {
	mk := func(seed int64) []byte {
		s := testScenario(
			scenarios.ServiceGroup{Name: "a", Count: 20, Endpoints: &scenarios.IntRange{Min: 1, Max: 150}, LocalFraction: ptr.To(0.4),
				Conditions: scenarios.ConditionMix{Ready: 0.7, NotReady: 0.2, Terminating: 0.1}, TrafficDistribution: "PreferClose"},
			scenarios.ServiceGroup{Name: "b", Count: 5, Type: corev1.ServiceTypeLoadBalancer},
		)
		s.Spec.Seed = seed
		s.Spec.Cluster.OtherNodes = []scenarios.Node{{Name: "n1", Zone: "zone-b"}, {Name: "n2", Zone: "zone-c"}}
		c := newTestCluster(t, s)
		var b strings.Builder
		for _, o := range c.DesiredObjects() {
			j, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
			b.WriteByte('\n')
		}
		return []byte(b.String())
	}
	a, b := mk(7), mk(7)
	if diff := cmp.Diff(string(a), string(b)); diff != "" {
		t.Errorf("same seed, different objects (-first +second):\n%s", diff)
	}
	if string(a) == string(mk(8)) {
		t.Error("seeds 7 and 8 generate identical objects")
	}
}

// assertUnique checks the clientset's contents: ClusterIPs, LoadBalancer
// IPs, NodePorts and generated endpoint addresses are each handed out once
// and lie in their ranges.
func assertUnique(t testing.TB, c *Cluster) {
	t.Helper()
	m := c.Snapshot()
	ctx := context.Background()
	svcs, err := c.Clientset.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	claim := func(kind, v, owner string) {
		k := kind + " " + v
		if prev, dup := seen[k]; dup {
			t.Errorf("%s handed out twice: %s and %s", k, prev, owner)
		}
		seen[k] = owner
	}
	for _, svc := range svcs.Items {
		owner := svc.Namespace + "/" + svc.Name
		if ip := svc.Spec.ClusterIP; ip != corev1.ClusterIPNone {
			a := netip.MustParseAddr(ip)
			if !m.ServiceCIDR.Contains(a) || a == m.ServiceCIDR.Addr() || a == m.ServiceCIDR.Addr().Next() {
				t.Errorf("%s clusterIP %s not usable in %s", owner, a, m.ServiceCIDR)
			}
			claim("clusterIP", ip, owner)
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if !m.LoadBalancerCIDR.Contains(netip.MustParseAddr(in.IP)) {
				t.Errorf("%s LB IP %s outside %s", owner, in.IP, m.LoadBalancerCIDR)
			}
			claim("lbIP", in.IP, owner)
		}
		ports := []int32{svc.Spec.HealthCheckNodePort}
		for _, p := range svc.Spec.Ports {
			ports = append(ports, p.NodePort)
		}
		for _, p := range ports {
			if p == 0 {
				continue
			}
			if p < NodePortMin || p > NodePortMax {
				t.Errorf("%s nodePort %d outside range", owner, p)
			}
			claim("nodePort", fmt.Sprint(p), owner)
		}
	}
	slices, err := c.Clientset.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	firstPod := ipToUint32(m.PodCIDR.Addr()) + uint32(scenarios.ReservedPodAddresses)
	for _, sl := range slices.Items {
		if sl.Labels[ManagedByLabel] != ManagedByValue {
			continue // literal
		}
		for _, ep := range sl.Endpoints {
			a := netip.MustParseAddr(ep.Addresses[0])
			if !m.PodCIDR.Contains(a) || ipToUint32(a) < firstPod {
				t.Errorf("slice %s endpoint %s not usable in %s", sl.Name, a, m.PodCIDR)
			}
			claim("podIP", a.String(), sl.Namespace+"/"+sl.Name)
		}
	}
}

// TestCountsMatchCluster: scenarios.Counts, which counts without
// building, agrees with the objects the generator hands kube-proxy,
// including endpoint counts drawn from ranges and literal objects.
func TestCountsMatchCluster(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s := testScenario(
				scenarios.ServiceGroup{Name: "ranged", Count: 30, Endpoints: &scenarios.IntRange{Min: 0, Max: 250}},
				scenarios.ServiceGroup{Name: "hl", Count: 3, Headless: true, Endpoints: &scenarios.IntRange{Min: 1, Max: 3}},
				scenarios.ServiceGroup{Name: "lb", Count: 4, Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Endpoints: fixed(2),
					Ports: []scenarios.ServicePort{{Name: "a", Port: 80}, {Name: "b", Port: 81}}},
				scenarios.ServiceGroup{Name: "np", Count: 2, Type: corev1.ServiceTypeNodePort},
			)
			s.Spec.Seed = seed
			port := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
			s.Spec.Objects = []scenarios.Object{
				{Service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pinned"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.2", Type: corev1.ServiceTypeNodePort,
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 31000}}}}},
				{Service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "free"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: port}}},
				{Service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "none"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}},
				{EndpointSlice: &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: "pinned-x", Namespace: "default"},
					AddressType: discoveryv1.AddressTypeIPv4,
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.16"}}, {Addresses: []string{"10.244.0.17"}}},
				}},
			}
			c := newTestCluster(t, s)
			ctx := context.Background()
			var got scenarios.Tally
			svcs, err := c.Clientset.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, svc := range svcs.Items {
				got.Services++
				if svc.Spec.ClusterIP != corev1.ClusterIPNone {
					got.ClusterIPs++
				}
				for _, p := range svc.Spec.Ports {
					if p.NodePort != 0 {
						got.NodePorts++
					}
				}
				if svc.Spec.HealthCheckNodePort != 0 {
					got.NodePorts++
				}
				got.LoadBalancerIPs += len(svc.Status.LoadBalancer.Ingress)
			}
			slices, err := c.Clientset.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, sl := range slices.Items {
				got.EndpointSlices++
				for _, ep := range sl.Endpoints {
					got.Endpoints += int64(len(ep.Addresses))
				}
			}
			if diff := cmp.Diff(got, s.Counts().Start); diff != "" {
				t.Errorf("Counts().Start differs from the cluster (-cluster +counts):\n%s", diff)
			}
		})
	}
}
