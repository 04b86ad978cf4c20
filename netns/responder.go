package netns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Port is a target port responders listen on (the endpoint's port, after
// DNAT).
type Port struct {
	Protocol Protocol `json:"protocol"`
	Port     uint16   `json:"port"`
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// responders answer on every port of one pod namespace. Sockets are bound to
// the wildcard address, so one socket serves every endpoint address of the
// namespace and reports which one was hit. They are created on a thread
// locked into the pod namespace and then served from ordinary goroutines: a
// socket stays in the namespace it was created in.
type responders struct {
	closers []io.Closer
	wg      sync.WaitGroup
}

// streamLinger bounds how long a responder waits for the prober to close a
// stream connection before it closes it itself.
const streamLinger = 5 * time.Second

func startResponders(ns, back netns.NsHandle, ports []Port, sctp bool) (*responders, error) {
	r := &responders{}
	type listener struct {
		port Port
		tcp  net.Listener
		udp  *net.UDPConn
		sctp *os.File
	}
	var ls []listener
	err := doIn(ns, back, func() error {
		for _, p := range ports {
			addr := fmt.Sprintf("0.0.0.0:%d", p.Port)
			switch p.Protocol {
			case TCP:
				l, err := net.Listen("tcp4", addr)
				if err != nil {
					return fmt.Errorf("listen %s: %w", p, err)
				}
				ls = append(ls, listener{port: p, tcp: l})
			case UDP:
				c, err := listenUDPPktinfo(p.Port)
				if err != nil {
					return fmt.Errorf("listen %s: %w", p, err)
				}
				ls = append(ls, listener{port: p, udp: c})
			case SCTP:
				if !sctp {
					continue // reported once by the PodNetwork
				}
				f, err := listenSCTP(p.Port)
				if err != nil {
					return fmt.Errorf("listen %s: %w", p, err)
				}
				ls = append(ls, listener{port: p, sctp: f})
			}
		}
		return nil
	})
	for _, l := range ls {
		switch {
		case l.tcp != nil:
			r.closers = append(r.closers, l.tcp)
		case l.udp != nil:
			r.closers = append(r.closers, l.udp)
		case l.sctp != nil:
			r.closers = append(r.closers, l.sctp)
		}
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("responders in %s: %w", ns, err)
	}
	for _, l := range ls {
		switch {
		case l.tcp != nil:
			r.goServe(func() { serveTCP(l.tcp) })
		case l.udp != nil:
			// Two readers: one socket serves every address of the namespace.
			r.goServe(func() { serveUDP(l.udp, l.port.Port) })
			r.goServe(func() { serveUDP(l.udp, l.port.Port) })
		case l.sctp != nil:
			r.goServe(func() { serveSCTP(l.sctp) })
		}
	}
	return r, nil
}

func (r *responders) goServe(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// close stops every listener; connections in flight finish on their own.
func (r *responders) close() {
	for _, c := range r.closers {
		c.Close()
	}
	r.wg.Wait()
	r.closers = nil
}

func serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond) // EMFILE and the like: back off
			continue
		}
		go answerStream(c, TCP, c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort())
	}
}

// answerStream writes the reply, then waits for the prober to close (it
// resets with SO_LINGER 0) so the responder never holds TIME_WAIT.
func answerStream(c io.ReadWriteCloser, proto Protocol, local, remote netip.AddrPort) {
	defer c.Close()
	if d, ok := c.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Now().Add(streamLinger))
	}
	buf := appendReply(make([]byte, 0, 96), Reply{Protocol: proto, Endpoint: unmapAP(local), Source: unmapAP(remote)})
	if _, err := c.Write(buf); err != nil {
		return
	}
	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
	}
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// listenUDPPktinfo opens a wildcard UDP socket that reports each datagram's
// destination address (IP_PKTINFO), so replies name and come from the
// endpoint address that was hit: conntrack then reverses the DNAT.
func listenUDPPktinfo(port uint16) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: int(port)})
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		if serr == nil {
			// Bursts from a fast prober; a failure here only costs drops.
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		}
	}); err != nil {
		serr = err
	}
	if serr != nil {
		c.Close()
		return nil, fmt.Errorf("set IP_PKTINFO: %w", serr)
	}
	return c, nil
}

func serveUDP(c *net.UDPConn, port uint16) {
	buf := make([]byte, 512)
	oob := make([]byte, 128)
	out := make([]byte, 0, 128)
	for {
		n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		nonce, ok := parseUDPRequest(buf[:n])
		if !ok {
			continue
		}
		dst, ok := pktinfoDst(oob[:oobn])
		if !ok {
			continue
		}
		out = appendReply(out[:0], Reply{
			Protocol: UDP,
			Endpoint: netip.AddrPortFrom(dst, port),
			Source:   unmapAP(from),
			Nonce:    nonce,
		})
		info := unix.Inet4Pktinfo{Spec_dst: dst.As4()}
		_, _, _ = c.WriteMsgUDPAddrPort(out, unix.PktInfo4(&info), from)
	}
}

// pktinfoDst returns the header destination address from an IP_PKTINFO
// control message.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo {
			// struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
			var a [4]byte
			copy(a[:], m.Data[8:12])
			return netip.AddrFrom4(a), true
		}
	}
	return netip.Addr{}, false
}

// sctpSupported reports whether the kernel has SCTP sockets (this one,
// CONFIG_IP_SCTP unset, does not); it probes in the current namespace,
// which creates nothing that outlives the call.
func sctpSupported() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// listenSCTP opens a one-to-one style SCTP listener (Go's net has no SCTP);
// the fd is non-blocking so the runtime poller serves it.
func listenSCTP(port uint16) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("sctp socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen: %w", err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("sctp-listener-%d", port)), nil
}

func serveSCTP(l *os.File) {
	rc, err := l.SyscallConn()
	if err != nil {
		return
	}
	for {
		var nfd int
		var sa unix.Sockaddr
		var aerr error
		err := rc.Read(func(fd uintptr) bool {
			nfd, sa, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			return !errors.Is(aerr, unix.EAGAIN)
		})
		if err != nil {
			return // listener closed
		}
		if aerr != nil {
			if errors.Is(aerr, unix.EINTR) || errors.Is(aerr, unix.ECONNABORTED) {
				continue
			}
			time.Sleep(time.Millisecond)
			continue
		}
		local, _ := unix.Getsockname(nfd)
		c := os.NewFile(uintptr(nfd), "sctp-conn")
		go answerStream(c, SCTP, sockaddrAP(local), sockaddrAP(sa))
	}
}

func sockaddrAP(sa unix.Sockaddr) netip.AddrPort {
	if s, ok := sa.(*unix.SockaddrInet4); ok {
		return netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port))
	}
	return netip.AddrPort{}
}
