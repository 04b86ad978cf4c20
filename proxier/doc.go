// Package proxier builds the production kube-proxy proxiers (iptables,
// nftables and IPVS modes, imported unmodified from k8s.io/kubernetes) the
// way cmd/kube-proxy builds them, wires them to a clientset's informers, and
// records what they do: every sync's duration and the rules they leave in
// the kernel.
//
// It must not reimplement or patch upstream code: it wraps and observes.
// It knows the clientset and the kernel tools, not namespaces: it acts in
// whatever network namespace its process runs in, so callers must place
// the process first (see package netns).
package proxier
