// Package netns isolates a kpsim run from the machine it runs on and gives
// it a dataplane to measure.
//
// It provides:
//
//   - the node process: this binary re-executed (see [RegisterNodeMain],
//     [Init] and [StartNode]) into a new network and mount namespace, with a
//     private /run (so /run/xtables.lock is its own), lo up, a node interface
//     and address, and the sysctls a Kubernetes node has. The proxier under
//     test runs there, so every iptables, nft or netlink call it makes acts
//     on the node namespace only.
//   - a node's child processes ([StartChild], [RegisterChildMain]): this
//     binary re-executed by the node process into the same namespaces,
//     talking to it over pipes; kube-proxy runs in one (package node), the
//     fake pods and the prober in another ([Dataplane]), so that neither's
//     cost is counted as the other's.
//   - fake pods ([PodNetwork]): unnamed namespaces held by file descriptor,
//     connected to the node by veth, holding the endpoint addresses, each
//     with TCP and UDP responders that name the endpoint that received a
//     packet and the source address they saw.
//   - a prober ([PodNetwork.Probe]) that opens real connections from a client
//     pod, an external client or the node itself and attributes every reply.
//   - a host guard ([TakeHostSnapshot], [Diff]) that proves a run left the
//     host's rules, links, addresses, routes and sysctls unchanged, and
//     [Cleanup], which sweeps what a crashed run could leave behind.
//
// Network topology of one node (all of it is gone when the node process
// exits, even on SIGKILL, because every namespace is unnamed and held only
// by it and its children, which die with it):
//
//	external ns: ext0 172.18.0.1/24 + 203.0.113.10/32 (the "router" and an
//	             outside client; routes ExternalRoutes via the node)
//	   | veth
//	node ns:     kpsim-node0 172.18.0.2/24, default route via 172.18.0.1,
//	             routes to each pod namespace's addresses (covering
//	             prefixes), unreachable PodCIDR behind them
//	   | veth kpvN <-> eth0, one per pod namespace, static neighbours
//	pod ns N:    eth0 with /32 endpoint addresses, default via 169.254.1.1
//	client pod:  the same, holding the client pod address 10.244.255.254
//
// What it must not do: change anything in the host (initial) network
// namespace - no rules, links, addresses, routes or sysctls, not even in
// tests; connect any of its namespaces to the host's interfaces; send a
// packet to an address outside its own namespaces; call setns on a thread
// that is not locked, or return a thread to the Go scheduler when switching
// it back failed. The host side of this package ([StartNode],
// [TakeHostSnapshot], [Cleanup]) only starts processes, reads, and removes
// leftovers that carry the kpsim- prefix.
package netns
