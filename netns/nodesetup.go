package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NodeEnv is what a node main gets: the node's namespaces and addresses, the
// pipes to the orchestrator, and constructors for the fake pods.
type NodeEnv struct {
	// Config is the effective node configuration (defaults applied).
	Config NodeConfig
	// NodeIP is the node's address on NodeInterface.
	NodeIP netip.Addr
	// NodeInterface is the node's interface (kpsim-node0).
	NodeInterface string
	// GatewayIP is the external router's address, the node's default
	// gateway.
	GatewayIP netip.Addr

	nodeNS netns.NsHandle // the node namespace (this process's)
	extNS  netns.NsHandle // the external router/client namespace
	nl     *netlink.Handle
	// extNSFile is extNS for children's ExtraFiles (externalNSFile).
	extNSOnce sync.Once
	extNSFile *os.File
	extNSErr  error

	in     interface{ Decode(any) error }
	inRaw  *os.File
	out    *msgWriter
	result []byte

	closers []func()
}

// Input returns the raw input stream from the orchestrator, for node mains
// that do not use Recv.
func (e *NodeEnv) Input() *os.File { return e.inRaw }

// externalNSFile is extNS as one *os.File for the environment's life, on
// a duplicate of the handle, which it owns. An os.File made with NewFile
// closes its descriptor when the garbage collector finalizes it: one per
// child on extNS itself closed extNS once a child's File was collected,
// and then, through the next stale File, whatever had reused the number.
// After a few restarts of kube-proxy's process a program run of the node
// failed reading its output with "bad file descriptor".
func (e *NodeEnv) externalNSFile() (*os.File, error) {
	e.extNSOnce.Do(func() {
		fd, err := unix.FcntlInt(uintptr(e.extNS), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			e.extNSErr = fmt.Errorf("duplicate the external namespace's handle: %w", err)
			return
		}
		e.extNSFile = os.NewFile(uintptr(fd), "kpsim-external-ns")
		e.onClose(func() { e.extNSFile.Close() })
	})
	return e.extNSFile, e.extNSErr
}

func (e *NodeEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

func (e *NodeEnv) onClose(f func()) { e.closers = append(e.closers, f) }

// setupNode turns this freshly cloned process into a node. Nothing in here
// may run before the namespace checks: if the process is somehow still in
// the orchestrator's namespaces it must not touch a thing.
func setupNode(spec nodeSpec) (_ *NodeEnv, err error) {
	cfg := spec.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkIsolated(spec); err != nil {
		return nil, err
	}
	if err := privateMounts(); err != nil {
		return nil, err
	}
	env := &NodeEnv{
		Config:        cfg,
		NodeIP:        cfg.NodeIP.Addr(),
		NodeInterface: NodeInterface,
		GatewayIP:     cfg.gatewayIP(),
	}
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	env.nodeNS, err = netns.GetFromPath("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open node namespace: %w", err)
	}
	env.onClose(func() { env.nodeNS.Close() })
	setCurrentNode(env)

	for _, s := range nodeSysctls {
		if err := writeSysctl(s.key, s.value); err != nil && !s.optional {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
	}
	for k, v := range cfg.Sysctls {
		if err := writeSysctl(k, v); err != nil {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
	}
	env.nl, err = netlink.NewHandleAt(env.nodeNS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in node namespace: %w", err)
	}
	env.onClose(env.nl.Close)
	if err := linkUp(env.nl, "lo"); err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	if err := env.setupExternal(); err != nil {
		return nil, err
	}
	return env, nil
}

// checkIsolated refuses to go on unless this process is in a network and
// mount namespace of its own.
func checkIsolated(spec nodeSpec) error {
	netIno, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return err
	}
	mntIno, err := nsInode("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	if spec.HostNetNS == 0 || netIno == spec.HostNetNS {
		return fmt.Errorf("refusing to run: node process is in the orchestrator's network namespace (inode %d)", netIno)
	}
	if spec.HostMntNS == 0 || mntIno == spec.HostMntNS {
		return fmt.Errorf("refusing to run: node process is in the orchestrator's mount namespace (inode %d)", mntIno)
	}
	return nil
}

// privateMounts stops mount propagation to the host first, then gives the
// node its own /run (xtables.lock) and a sysfs that shows its own links.
func privateMounts() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64m"); err != nil {
		return fmt.Errorf("mount tmpfs on /run: %w", err)
	}
	// Best effort: without it /sys/class/net shows the host's links, which
	// only matters to tools that read sysfs.
	_ = unix.Mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	return nil
}

// setupExternal creates the external namespace (router + outside client) and
// the node interface, a veth whose peer lives there: the node's "eth0".
func (e *NodeEnv) setupExternal() error {
	var err error
	e.extNS, err = newNetNS(e.nodeNS)
	if err != nil {
		return fmt.Errorf("external namespace: %w", err)
	}
	e.onClose(func() { e.extNS.Close() })
	ext, err := netlink.NewHandleAt(e.extNS, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle in external namespace: %w", err)
	}
	defer ext.Close()
	if err := linkUp(ext, "lo"); err != nil {
		return fmt.Errorf("external namespace: %w", err)
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: NodeInterface, MTU: 1500},
		PeerName:      "ext0",
		PeerNamespace: netlink.NsFd(e.extNS),
	}
	if err := e.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s (peer ext0 in the external namespace): %w", NodeInterface, err)
	}
	node, err := e.nl.LinkByName(NodeInterface)
	if err != nil {
		return fmt.Errorf("node interface %s: %w", NodeInterface, err)
	}
	if err := e.nl.AddrAdd(node, &netlink.Addr{IPNet: prefixToIPNet(e.Config.NodeIP)}); err != nil {
		return fmt.Errorf("add %s to %s: %w", e.Config.NodeIP, NodeInterface, err)
	}
	if err := e.nl.LinkSetUp(node); err != nil {
		return fmt.Errorf("set %s up: %w", NodeInterface, err)
	}
	peer, err := ext.LinkByName("ext0")
	if err != nil {
		return fmt.Errorf("external namespace: link ext0: %w", err)
	}
	gw := netip.PrefixFrom(e.GatewayIP, e.Config.NodeIP.Bits())
	for _, p := range []netip.Prefix{gw, netip.PrefixFrom(e.Config.ExternalClientIP, 32)} {
		if err := ext.AddrAdd(peer, &netlink.Addr{IPNet: prefixToIPNet(p)}); err != nil {
			return fmt.Errorf("external namespace: add %s to ext0: %w", p, err)
		}
	}
	if err := ext.LinkSetUp(peer); err != nil {
		return fmt.Errorf("external namespace: set ext0 up: %w", err)
	}
	// Node: default route via the external router, like a node's
	// gateway. The router knows nothing beyond the node subnet and
	// ExternalRoutes, so nothing loops and nothing leaves.
	if err := e.nl.RouteReplace(&netlink.Route{
		LinkIndex: node.Attrs().Index,
		Dst:       prefixToIPNet(netip.MustParsePrefix("0.0.0.0/0")),
		Gw:        addrToIP(e.GatewayIP),
		Src:       addrToIP(e.NodeIP),
	}); err != nil {
		return fmt.Errorf("node namespace: default route via %s: %w", e.GatewayIP, err)
	}
	if err := ext.RouteReplace(&netlink.Route{
		Dst:  prefixToIPNet(netip.MustParsePrefix("0.0.0.0/0")),
		Type: unix.RTN_UNREACHABLE,
	}); err != nil {
		return fmt.Errorf("external namespace: unreachable default route: %w", err)
	}
	for _, p := range e.Config.ExternalRoutes {
		if err := ext.RouteReplace(&netlink.Route{
			LinkIndex: peer.Attrs().Index,
			Dst:       prefixToIPNet(p.Masked()),
			Gw:        addrToIP(e.NodeIP),
			Src:       addrToIP(e.Config.ExternalClientIP),
		}); err != nil {
			return fmt.Errorf("external namespace: route %s via %s: %w", p, e.NodeIP, err)
		}
	}
	return nil
}

func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// FlushConntrack flushes the node namespace's conntrack table (never the
// host's: the handle is opened at the node namespace). It kills in-flight
// connections, so callers flush between probe batches only.
func (e *NodeEnv) FlushConntrack() error {
	if err := e.check(); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(e.nodeNS, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("netlink handle in node namespace: %w", err)
	}
	defer h.Close()
	if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return fmt.Errorf("flush conntrack in node namespace: %w", err)
	}
	return nil
}

// Do runs fn on a thread locked into namespace ns (one of this node's:
// NodeNS, ExternalNS, or a pod's via PodNetwork.Do) and moves the thread
// back afterwards. Sockets created in fn stay in ns and may be used from any
// goroutine afterwards.
func (e *NodeEnv) Do(ns netns.NsHandle, fn func() error) error {
	if err := e.check(); err != nil {
		return err
	}
	if !ns.IsOpen() || ns == 0 {
		return errors.New("netns: Do on a closed namespace handle")
	}
	return doIn(ns, e.nodeNS, fn)
}

// check refuses a NodeEnv that is not this node process's own (a zero
// NodeEnv in the orchestrator would otherwise act on the host).
func (e *NodeEnv) check() error {
	if e == nil || currentNode != e {
		return errNotNode
	}
	return nil
}

// ExternalNS returns the external namespace's handle (owned by the NodeEnv).
func (e *NodeEnv) ExternalNS() netns.NsHandle { return e.extNS }

// NodeNS returns the node namespace's handle (owned by the NodeEnv).
func (e *NodeEnv) NodeNS() netns.NsHandle { return e.nodeNS }

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func addrToIP(a netip.Addr) net.IP { return a.AsSlice() }

// currentNode is the NodeEnv of this process, nil in the orchestrator.
var currentNode *NodeEnv

func setCurrentNode(e *NodeEnv) { currentNode = e }
