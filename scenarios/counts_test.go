package scenarios

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCounts(t *testing.T) {
	// A literal Service and its EndpointSlice, as in policies.yaml.
	const literal = `
  objects:
    - apiVersion: v1
      kind: Service
      metadata: {name: no-ready, namespace: default}
      spec:
        ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
    - apiVersion: discovery.k8s.io/v1
      kind: EndpointSlice
      metadata:
        name: no-ready-1
        namespace: default
        labels: {kubernetes.io/service-name: no-ready}
      addressType: IPv4
      ports: [{name: http, port: 8080, protocol: TCP}]
      endpoints:
        - addresses: [10.244.200.1]
          conditions: {ready: false}
`
	for _, tc := range []struct {
		name string
		spec string
		// generated and literal are the want of Generated and Literal;
		// Start is their sum. peak is the want of Peak.
		generated, literal, peak Tally
	}{
		{
			name:    "literal EndpointSlice endpoints count",
			spec:    literal,
			literal: Tally{Services: 1, ClusterIPs: 1, Endpoints: 1, EndpointSlices: 1},
			peak:    Tally{Services: 1, ClusterIPs: 1, Endpoints: 1, EndpointSlices: 1},
		},
		{
			name: "fixed endpoints",
			spec: `
  serviceGroups: [{name: web, count: 3, endpoints: 10}]`,
			generated: Tally{Services: 3, ClusterIPs: 3, Endpoints: 30, EndpointSlices: 3},
			peak:      Tally{Services: 3, ClusterIPs: 3, Endpoints: 30, EndpointSlices: 3},
		},
		{
			name: "groups and literal objects add up",
			spec: `
  serviceGroups: [{name: web, count: 3, endpoints: 10}]` + literal,
			generated: Tally{Services: 3, ClusterIPs: 3, Endpoints: 30, EndpointSlices: 3},
			literal:   Tally{Services: 1, ClusterIPs: 1, Endpoints: 1, EndpointSlices: 1},
			peak:      Tally{Services: 4, ClusterIPs: 4, Endpoints: 31, EndpointSlices: 4},
		},
		{
			// Pins the seed's stream: 1, 3, 2, 2. Changing the stream
			// changes every generated cluster of a ranged group.
			name: "ranged endpoints are drawn with the seed, peak at max",
			spec: `
  serviceGroups: [{name: ranged, count: 4, endpoints: {min: 1, max: 3}}]`,
			generated: Tally{Services: 4, ClusterIPs: 4, Endpoints: 8, EndpointSlices: 4},
			peak:      Tally{Services: 4, ClusterIPs: 4, Endpoints: 12, EndpointSlices: 4},
		},
		{
			name: "no endpoints still one slice",
			spec: `
  serviceGroups: [{name: empty, count: 2, endpoints: 0}]`,
			generated: Tally{Services: 2, ClusterIPs: 2, EndpointSlices: 2},
			peak:      Tally{Services: 2, ClusterIPs: 2, EndpointSlices: 2},
		},
		{
			name: "100 endpoints a slice",
			spec: `
  serviceGroups: [{name: big, count: 2, endpoints: 250}]`,
			generated: Tally{Services: 2, ClusterIPs: 2, Endpoints: 500, EndpointSlices: 6},
			peak:      Tally{Services: 2, ClusterIPs: 2, Endpoints: 500, EndpointSlices: 6},
		},
		{
			name: "headless Services hold no ClusterIP",
			spec: `
  serviceGroups: [{name: hl, count: 2, headless: true}]`,
			generated: Tally{Services: 2, Endpoints: 2, EndpointSlices: 2},
			peak:      Tally{Services: 2, Endpoints: 2, EndpointSlices: 2},
		},
		{
			// NodePort: 2 x 2 ports. LoadBalancer, Local: 3 x (1 port + 1
			// health check node port), 3 IPs.
			name: "NodePorts, health check node ports and LoadBalancer IPs",
			spec: `
  serviceGroups:
    - {name: np, count: 2, type: NodePort, ports: [{name: a, port: 80}, {name: b, port: 81}]}
    - {name: lb, count: 3, type: LoadBalancer, externalTrafficPolicy: Local}`,
			generated: Tally{Services: 5, ClusterIPs: 5, NodePorts: 10, LoadBalancerIPs: 3, Endpoints: 5, EndpointSlices: 5},
			peak:      Tally{Services: 5, ClusterIPs: 5, NodePorts: 10, LoadBalancerIPs: 3, Endpoints: 5, EndpointSlices: 5},
		},
		{
			// pinned: 2 NodePorts and its health check port; listed: the
			// two ingress IPs it lists; bare: one IP kpsim allocates;
			// none: no ClusterIP.
			name: "literal Services",
			spec: `
  objects:
    - apiVersion: v1
      kind: Service
      metadata: {name: pinned}
      spec:
        type: LoadBalancer
        externalTrafficPolicy: Local
        healthCheckNodePort: 31000
        ports: [{name: a, port: 80, nodePort: 30100}, {name: b, port: 81}]
      status: {loadBalancer: {ingress: [{ip: 192.168.100.7}, {ip: 192.168.100.8}]}}
    - apiVersion: v1
      kind: Service
      metadata: {name: bare}
      spec: {type: LoadBalancer, ports: [{port: 80}]}
    - apiVersion: v1
      kind: Service
      metadata: {name: none}
      spec: {clusterIP: None}`,
			literal: Tally{Services: 3, ClusterIPs: 2, NodePorts: 4, LoadBalancerIPs: 3},
			peak:    Tally{Services: 3, ClusterIPs: 2, NodePorts: 4, LoadBalancerIPs: 3},
		},
		{
			// createServices: 5 by count and ceil(2.5/s x 1.5s) = 4 by
			// duration, each at 2 endpoints and 2 NodePorts; scaleUp: 7
			// addresses; rollingUpdate: 1 whatever its count; flap,
			// scaleDown and deleteServices add nothing.
			name: "churn grows the peak",
			spec: `
  serviceGroups: [{name: web, count: 2, endpoints: {min: 1, max: 2}, type: NodePort, ports: [{name: a, port: 80}, {name: b, port: 81}]}]
  steps:
    - churn: {action: createServices, group: web, count: 5}
    - churn: {action: createServices, group: web, rate: 2.5, duration: 1500ms}
    - churn: {action: scaleUp, group: web, count: 7}
    - churn: {action: rollingUpdate, group: web, count: 50}
    - churn: {action: flap, group: web, count: 9}
    - churn: {action: scaleDown, group: web, count: 9}
    - churn: {action: deleteServices, group: web, count: 9}`,
			generated: Tally{Services: 2, ClusterIPs: 2, NodePorts: 4, Endpoints: 3, EndpointSlices: 2},
			peak:      Tally{Services: 11, ClusterIPs: 11, NodePorts: 22, Endpoints: 30, EndpointSlices: 11},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Load("counts.yaml", []byte("apiVersion: kpsim.dev/v1alpha1\nkind: Scenario\nmetadata: {name: counts}\nspec:"+tc.spec+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			want := Counts{Generated: tc.generated, Literal: tc.literal, Start: tc.generated.plus(tc.literal), Peak: tc.peak}
			if diff := cmp.Diff(want, s.Counts()); diff != "" {
				t.Errorf("Counts (-want +got):\n%s", diff)
			}
			if got, want := s.Size(), (Size{Services: tc.peak.Services, Endpoints: tc.peak.Endpoints, EndpointSlices: tc.peak.EndpointSlices}); got != want {
				t.Errorf("Size() = %+v, want %+v (Counts().Peak)", got, want)
			}
		})
	}
}

// TestShippedScenarioCounts pins the counts of shipped scenarios, which
// kpsim validate summarizes.
func TestShippedScenarioCounts(t *testing.T) {
	for _, tc := range []struct {
		file      string
		services  int
		endpoints int64
		// peakServices and peakEndpoints are what churn can grow them to.
		peakServices  int
		peakEndpoints int64
	}{
		// 17 generated Services with 92 endpoints, and the literal
		// no-ready Service with its one endpoint.
		{"policies.yaml", 18, 93, 18, 93},
		// flap churn only.
		{"2000x10.yaml", 2000, 20000, 2000, 20000},
		// app: 500 x 2-20 endpoints (drawn: 5612), big: 5 x 250. Peak:
		// app at 20, rollingUpdate 1, scaleUp 100, createServices 50 x 20.
		{"churn.yaml", 505, 5612 + 1250, 555, 10000 + 1250 + 1 + 100 + 1000},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s, err := LoadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			c := s.Counts()
			if c.Start.Services != tc.services || c.Start.Endpoints != tc.endpoints || c.Peak.Services != tc.peakServices || c.Peak.Endpoints != tc.peakEndpoints {
				t.Errorf("%d Services, %d endpoints, growing to %d, %d; want %d, %d, growing to %d, %d",
					c.Start.Services, c.Start.Endpoints, c.Peak.Services, c.Peak.Endpoints, tc.services, tc.endpoints, tc.peakServices, tc.peakEndpoints)
			}
		})
	}
}
