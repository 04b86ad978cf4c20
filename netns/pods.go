package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ClientKind says where a probe starts.
type ClientKind string

// Client kinds.
const (
	// ClientPod is a pod on the node (address inside the pod CIDR): its
	// traffic enters the node through PREROUTING.
	ClientPod ClientKind = "pod"
	// ClientExternal is a host outside the cluster (ExternalClientIP)
	// behind the node's gateway: NodePorts and LoadBalancer IPs.
	ClientExternal ClientKind = "external"
	// ClientNode is the node itself: its traffic takes the OUTPUT path.
	ClientNode ClientKind = "node"
)

// Pod-side plumbing. Every pod veth uses the same link-local gateway pair
// with permanent neighbour entries on both sides: no ARP at all, so the
// node's neighbour table (gc_thresh3 is global and 1024 by default) holds
// one entry per pod namespace, not one per endpoint address.
var (
	podGatewayIP = netip.MustParseAddr("169.254.1.1") // node side, as the pod sees it
	podPeerIP    = netip.MustParseAddr("169.254.1.2") // pod side, as the node sees it
)

// DefaultClientPodIP is the client pod's address when PodNetworkConfig
// leaves it unset: inside the default pod CIDR 10.244.0.0/16, at its end.
var DefaultClientPodIP = netip.MustParseAddr("10.244.255.254")

// PodNetworkConfig configures the fake pods of a node.
type PodNetworkConfig struct {
	// Ports every pod namespace answers on (endpoint ports, after DNAT).
	Ports []Port `json:"ports"`
	// AddressesPerNamespace is how many endpoint addresses share a pod
	// namespace: a power of two; namespaces hold aligned blocks, so each
	// full block is one route. Default 1 (one namespace per endpoint);
	// 256 sets up 2000x10 in well under a second.
	AddressesPerNamespace int `json:"addressesPerNamespace,omitempty"`
	// ClientPodIP is the client pod's address (default 10.244.255.254).
	ClientPodIP netip.Addr `json:"clientPodIP,omitzero"`
	// PodCIDR gets an unreachable route on the node (default
	// 10.244.0.0/16): an address that is no endpoint (any more) is never
	// sent to the router. The node answers "host unreachable" within the
	// kernel's ICMP error budget (net.ipv4.route.error_cost/burst, global,
	// about 5 at once then 1/s); beyond it the probe times out.
	PodCIDR netip.Prefix `json:"podCIDR,omitzero"`
}

// DefaultPodCIDR is PodNetworkConfig.PodCIDR's default.
var DefaultPodCIDR = netip.MustParsePrefix("10.244.0.0/16")

// PodNetwork is the set of fake pods of a node: namespaces holding endpoint
// addresses with responders, and a client pod. Safe for concurrent use.
type PodNetwork struct {
	env   *NodeEnv
	cfg   PodNetworkConfig
	shift uint
	sctp  bool

	mu      sync.Mutex
	pods    map[blockKey]*podNS
	owner   map[netip.Addr]blockKey
	client  *podNS
	nextIdx int
	closed  bool

	portCursor atomic.Uint64 // next probe source port (see Probe)

	// The probes' conntrack entries in the node namespace (see Probe).
	ctMu    sync.Mutex
	ctBatch int // flush when entries would pass it; 0 until first read
	ctSince int // connections since the last flush
}

// podNS is one pod namespace and its veth.
type podNS struct {
	idx      int
	ns       netns.NsHandle
	h        *netlink.Handle // in the pod namespace
	nodeLink netlink.Link    // node side of the veth
	podIf    int             // ifindex of eth0 in the pod namespace
	addrs    []netip.Addr    // sorted
	routes   []netip.Prefix
	resp     *responders
}

// NewPodNetwork creates the client pod; endpoints come with AddEndpoints.
// Everything is torn down by Close, or with the process.
func (e *NodeEnv) NewPodNetwork(cfg PodNetworkConfig) (*PodNetwork, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	if cfg.AddressesPerNamespace == 0 {
		cfg.AddressesPerNamespace = 1
	}
	if !cfg.ClientPodIP.IsValid() {
		cfg.ClientPodIP = DefaultClientPodIP
	}
	if !cfg.PodCIDR.IsValid() {
		cfg.PodCIDR = DefaultPodCIDR
	}
	shift, err := blockShift(cfg.AddressesPerNamespace)
	if err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	if !cfg.ClientPodIP.Is4() {
		return nil, fmt.Errorf("pod network: clientPodIP %s: only IPv4 is supported", cfg.ClientPodIP)
	}
	if !cfg.PodCIDR.Addr().Is4() {
		return nil, fmt.Errorf("pod network: podCIDR %s: only IPv4 is supported", cfg.PodCIDR)
	}
	for i, p := range cfg.Ports {
		if !p.Protocol.valid() || p.Port == 0 {
			return nil, fmt.Errorf("pod network: ports[%d] %s: want tcp, udp or sctp and a port > 0", i, p)
		}
	}
	pn := &PodNetwork{
		env:   e,
		cfg:   cfg,
		shift: shift,
		sctp:  sctpSupported(),
		pods:  map[blockKey]*podNS{},
		owner: map[netip.Addr]blockKey{},
	}
	if err := e.nl.RouteReplace(&netlink.Route{
		Dst:  prefixToIPNet(cfg.PodCIDR.Masked()),
		Type: unix.RTN_UNREACHABLE,
	}); err != nil {
		return nil, fmt.Errorf("pod network: unreachable route %s: %w", cfg.PodCIDR, err)
	}
	pn.client, err = pn.newPod([]netip.Addr{cfg.ClientPodIP}, false)
	if err != nil {
		return nil, fmt.Errorf("pod network: client pod %s: %w", cfg.ClientPodIP, err)
	}
	// No Close at node exit: the kernel tears the namespaces down in one
	// batch when the process exits, while deleting veths one by one waits
	// for an RCU grace period each (250 take seconds).
	return pn, nil
}

// SCTPSupported reports whether the kernel has SCTP sockets; without them
// SCTP ports get no responders and SCTP probes fail with an error.
func (pn *PodNetwork) SCTPSupported() bool { return pn.sctp }

// AddEndpoints assigns endpoint addresses to pod namespaces (creating
// namespaces as needed), routes them from the node and answers on them.
// Adding an address that is already there is an error.
func (pn *PodNetwork) AddEndpoints(addrs []netip.Addr) error {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	if pn.closed {
		return errors.New("pod network is closed")
	}
	groups, err := packAddresses(addrs, pn.shift)
	if err != nil {
		return fmt.Errorf("add endpoints: %w", err)
	}
	for _, a := range addrs {
		if _, ok := pn.owner[a.Unmap()]; ok {
			return fmt.Errorf("add endpoints: %s is already an endpoint", a)
		}
		if a.Unmap() == pn.cfg.ClientPodIP {
			return fmt.Errorf("add endpoints: %s is the client pod's address", a)
		}
	}
	for _, k := range sortedKeys(groups) {
		g := groups[k]
		if p, ok := pn.pods[k]; ok {
			if err := pn.addToPod(p, g); err != nil {
				return fmt.Errorf("add endpoints: %w", err)
			}
		} else {
			p, err := pn.newPod(g, true)
			if err != nil {
				return fmt.Errorf("add endpoints: %w", err)
			}
			pn.pods[k] = p
		}
		for _, a := range g {
			pn.owner[a] = k
		}
	}
	return nil
}

// RemoveEndpoints removes endpoint addresses; a namespace left empty is
// deleted. Removing an address that is not an endpoint is an error, and
// nothing is changed then.
func (pn *PodNetwork) RemoveEndpoints(addrs []netip.Addr) error {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	if pn.closed {
		return errors.New("pod network is closed")
	}
	groups, err := packAddresses(addrs, pn.shift)
	if err != nil {
		return fmt.Errorf("remove endpoints: %w", err)
	}
	for _, a := range addrs {
		if _, ok := pn.owner[a.Unmap()]; !ok {
			return fmt.Errorf("remove endpoints: %s is not an endpoint", a)
		}
	}
	for _, k := range sortedKeys(groups) {
		p := pn.pods[k]
		g := groups[k]
		if len(g) == len(p.addrs) {
			pn.deletePod(p)
			delete(pn.pods, k)
		} else if err := pn.removeFromPod(p, g); err != nil {
			return fmt.Errorf("remove endpoints: %w", err)
		}
		for _, a := range g {
			delete(pn.owner, a)
		}
	}
	return nil
}

// Endpoints returns every endpoint address, sorted.
func (pn *PodNetwork) Endpoints() []netip.Addr {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	out := make([]netip.Addr, 0, len(pn.owner))
	for a := range pn.owner {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Namespaces returns how many endpoint namespaces exist (the client pod's
// is not counted).
func (pn *PodNetwork) Namespaces() int {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	return len(pn.pods)
}

// Client describes a probe origin.
type Client struct {
	Kind ClientKind `json:"kind"`
	// IP is the client's own address: the source the pod sees when nothing
	// masquerades (for ClientNode the node IP, used for the default route).
	IP netip.Addr `json:"ip"`
	ns netns.NsHandle
	// bind is the address probes bind to (unspecified: let routing choose,
	// as a process on the node would).
	bind netip.Addr
}

// Client returns the probe origin of the given kind.
func (pn *PodNetwork) Client(kind ClientKind) (Client, error) {
	switch kind {
	case ClientPod:
		return Client{Kind: kind, IP: pn.cfg.ClientPodIP, ns: pn.client.ns, bind: pn.cfg.ClientPodIP}, nil
	case ClientExternal:
		return Client{Kind: kind, IP: pn.env.Config.ExternalClientIP, ns: pn.env.extNS, bind: pn.env.Config.ExternalClientIP}, nil
	case ClientNode:
		return Client{Kind: kind, IP: pn.env.NodeIP, ns: pn.env.nodeNS, bind: netip.IPv4Unspecified()}, nil
	}
	return Client{}, fmt.Errorf("unknown client kind %q (want pod, external or node)", kind)
}

// Do runs fn on a thread locked into the namespace of the given client, for
// traffic the prober does not cover. Sockets created in fn stay there.
func (pn *PodNetwork) Do(kind ClientKind, fn func() error) error {
	c, err := pn.Client(kind)
	if err != nil {
		return err
	}
	return pn.env.Do(c.ns, fn)
}

// Close deletes every pod namespace now (slow: one RCU grace period per
// veth). A node process need not call it: its namespaces go with it.
// Idempotent.
func (pn *PodNetwork) Close() {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	if pn.closed {
		return
	}
	pn.closed = true
	for k, p := range pn.pods {
		pn.deletePod(p)
		delete(pn.pods, k)
	}
	if pn.client != nil {
		pn.deletePod(pn.client)
		pn.client = nil
	}
}

func podMAC(idx int) net.HardwareAddr {
	return net.HardwareAddr{0x0a, 0x6b, 0x70, byte(idx >> 16), byte(idx >> 8), byte(idx)}
}

func nodeSideMAC(idx int) net.HardwareAddr {
	return net.HardwareAddr{0x0e, 0x6b, 0x70, byte(idx >> 16), byte(idx >> 8), byte(idx)}
}

// newPod creates a pod namespace holding addrs (sorted), connected to the
// node; with responders unless it is the client pod.
func (pn *PodNetwork) newPod(addrs []netip.Addr, respond bool) (_ *podNS, err error) {
	e := pn.env
	idx := pn.nextIdx
	pn.nextIdx++
	if idx >= 1<<24 {
		return nil, errors.New("too many pod namespaces")
	}
	p := &podNS{idx: idx, ns: netns.None()}
	ifName := fmt.Sprintf("kpv%d", idx)
	defer func() {
		if err != nil {
			pn.deletePod(p)
		}
	}()
	p.ns, err = newNetNS(e.nodeNS)
	if err != nil {
		return nil, fmt.Errorf("pod namespace for %s: %w", ifName, err)
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: ifName, HardwareAddr: nodeSideMAC(idx), MTU: 1500},
		PeerName:         "eth0",
		PeerHardwareAddr: podMAC(idx),
		PeerNamespace:    netlink.NsFd(p.ns),
	}
	if err := e.nl.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth %s: %w", ifName, err)
	}
	p.nodeLink, err = e.nl.LinkByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("veth %s: %w", ifName, err)
	}
	if err := e.nl.LinkSetUp(p.nodeLink); err != nil {
		return nil, fmt.Errorf("set %s up: %w", ifName, err)
	}
	if err := e.nl.NeighSet(&netlink.Neigh{
		LinkIndex: p.nodeLink.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: addrToIP(podPeerIP), HardwareAddr: podMAC(idx),
	}); err != nil {
		return nil, fmt.Errorf("neighbour %s on %s: %w", podPeerIP, ifName, err)
	}

	p.h, err = netlink.NewHandleAt(p.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in pod namespace of %s: %w", ifName, err)
	}
	if err := linkUp(p.h, "lo"); err != nil {
		return nil, fmt.Errorf("pod namespace of %s: %w", ifName, err)
	}
	eth0, err := p.h.LinkByName("eth0")
	if err != nil {
		return nil, fmt.Errorf("pod namespace of %s: eth0: %w", ifName, err)
	}
	p.podIf = eth0.Attrs().Index
	if err := p.h.LinkSetUp(eth0); err != nil {
		return nil, fmt.Errorf("pod namespace of %s: set eth0 up: %w", ifName, err)
	}
	if err := p.h.NeighSet(&netlink.Neigh{
		LinkIndex: p.podIf, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: addrToIP(podGatewayIP), HardwareAddr: nodeSideMAC(idx),
	}); err != nil {
		return nil, fmt.Errorf("pod namespace of %s: neighbour %s: %w", ifName, podGatewayIP, err)
	}
	if err := p.h.RouteReplace(&netlink.Route{
		LinkIndex: p.podIf,
		Dst:       prefixToIPNet(netip.MustParsePrefix("0.0.0.0/0")),
		Gw:        addrToIP(podGatewayIP),
		Flags:     int(netlink.FLAG_ONLINK),
	}); err != nil {
		return nil, fmt.Errorf("pod namespace of %s: default route via %s: %w", ifName, podGatewayIP, err)
	}
	if err := pn.addToPod(p, addrs); err != nil {
		return nil, err
	}
	if respond {
		p.resp, err = startResponders(p.ns, e.nodeNS, pn.cfg.Ports, pn.sctp)
		if err != nil {
			return nil, fmt.Errorf("pod namespace of %s: %w", ifName, err)
		}
	}
	return p, nil
}

// addToPod assigns addrs to the pod's eth0 and updates the node's routes.
func (pn *PodNetwork) addToPod(p *podNS, addrs []netip.Addr) error {
	fd, err := nlSocketIn(p.ns, pn.env.nodeNS)
	if err != nil {
		return fmt.Errorf("pod namespace kpv%d: %w", p.idx, err)
	}
	defer unix.Close(fd)
	if err := changeAddrs(fd, p.podIf, addrs, true); err != nil {
		return fmt.Errorf("pod namespace kpv%d: %w", p.idx, err)
	}
	p.addrs = append(p.addrs, addrs...)
	slices.SortFunc(p.addrs, netip.Addr.Compare)
	return pn.syncRoutes(p)
}

func (pn *PodNetwork) removeFromPod(p *podNS, addrs []netip.Addr) error {
	fd, err := nlSocketIn(p.ns, pn.env.nodeNS)
	if err != nil {
		return fmt.Errorf("pod namespace kpv%d: %w", p.idx, err)
	}
	defer unix.Close(fd)
	if err := changeAddrs(fd, p.podIf, addrs, false); err != nil {
		return fmt.Errorf("pod namespace kpv%d: %w", p.idx, err)
	}
	gone := map[netip.Addr]bool{}
	for _, a := range addrs {
		gone[a] = true
	}
	p.addrs = slices.DeleteFunc(p.addrs, func(a netip.Addr) bool { return gone[a] })
	return pn.syncRoutes(p)
}

// syncRoutes makes the node's routes to the pod the covering prefixes of its
// addresses: new routes first, so no address is unreachable in between.
func (pn *PodNetwork) syncRoutes(p *podNS) error {
	want := coveringPrefixes(p.addrs)
	add, del := diffPrefixes(p.routes, want)
	for _, r := range add {
		if err := pn.env.nl.RouteReplace(pn.podRoute(p, r)); err != nil {
			return fmt.Errorf("route %s via kpv%d: %w", r, p.idx, err)
		}
	}
	for _, r := range del {
		if err := pn.env.nl.RouteDel(pn.podRoute(p, r)); err != nil {
			return fmt.Errorf("delete route %s via kpv%d: %w", r, p.idx, err)
		}
	}
	p.routes = want
	return nil
}

func (pn *PodNetwork) podRoute(p *podNS, dst netip.Prefix) *netlink.Route {
	return &netlink.Route{
		LinkIndex: p.nodeLink.Attrs().Index,
		Dst:       prefixToIPNet(dst),
		Gw:        addrToIP(podPeerIP),
		Src:       addrToIP(pn.env.NodeIP),
		Flags:     int(netlink.FLAG_ONLINK),
	}
}

// deletePod tears a pod namespace down; deleting the node side of the veth
// removes the pod side and the routes through it.
func (pn *PodNetwork) deletePod(p *podNS) {
	if p.resp != nil {
		p.resp.close()
	}
	if p.nodeLink != nil {
		_ = pn.env.nl.LinkDel(p.nodeLink)
	}
	if p.h != nil {
		p.h.Close()
	}
	if p.ns.IsOpen() {
		p.ns.Close()
	}
}
