// Package sim is kpsim's fake cluster: it turns a scenario into the objects
// a kube-proxy would see from a real API server (Services, EndpointSlices as
// the EndpointSlice controller writes them, Nodes and the default
// ServiceCIDR), holds them in a fake clientset
// (k8s.io/client-go/kubernetes/fake), and churns them through that
// clientset so real watch events reach the proxier's informers.
//
// Everything is deterministic from the scenario's seed: the same scenario
// gives byte-identical objects and the same mutation sequence. Addresses
// come from allocators over the scenario's CIDRs and never repeat.
//
// Decisions worth knowing:
//   - The first address of the service CIDR is kept for the "kubernetes"
//     Service, which is not created: kube-proxy would program it as a
//     Service without endpoints, adding rules no scenario asked for. A
//     scenario that wants it adds it in spec.objects at that address.
//   - Initial slices carry no endpoints.kubernetes.io/last-change-trigger-time
//     (no timestamps, so objects stay byte-identical, and kube-proxy's
//     latency metric is not polluted by start-up time); every churn write
//     stamps it.
//   - The churn engine is the only writer and waits for room in every watch
//     buffer before each write, so the fake never panics with "channel
//     full". watch.DefaultChanSize is left alone: it is a process-wide
//     global read without a lock.
//
// What it must not do: no dataplane, no network namespaces, no kernel
// calls, and no import of the proxiers; those live in the proxier and
// netns packages.
package sim
