package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ProbeSpec describes a burst of probes to one service address.
type ProbeSpec struct {
	// From is where the probes start.
	From ClientKind `json:"from"`
	// Target is the address probed: ClusterIP:port, node IP:NodePort, a
	// LoadBalancer IP or a pod IP.
	Target netip.AddrPort `json:"target"`
	// Protocol: tcp, udp or sctp.
	Protocol Protocol `json:"protocol"`
	// Count of connections (TCP/SCTP) or request/reply exchanges (UDP),
	// each on a new socket with its own source port.
	Count int `json:"count"`
	// Concurrency is how many probes are in flight; default 8.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate caps new connections per second; 0 means as fast as possible.
	Rate float64 `json:"rate,omitempty"`
	// Timeout per connection; default 2 s.
	Timeout time.Duration `json:"timeout,omitempty"`
	// ConntrackBatch caps the probes' entries in the node namespace's
	// conntrack table: before a batch that would take the connections
	// made since the last flush (by every probe, to any target) past it,
	// the table is flushed. Flushes fall between batches, never mid-batch,
	// since a flush kills connections in flight. 0 means the node's
	// default, min(20,000, nf_conntrack_max/2); negative never flushes
	// (the probe still counts). Keeps live entries below nf_conntrack_max
	// however many Services and steps are probed, and stops a reused
	// source port from hitting an old entry (and its old endpoint).
	ConntrackBatch int `json:"conntrackBatch,omitempty"`
}

// FailureKind classifies a failed probe.
type FailureKind string

// Failure kinds.
const (
	FailTimeout     FailureKind = "timeout"
	FailRefused     FailureKind = "refused"
	FailReset       FailureKind = "reset"
	FailUnreachable FailureKind = "unreachable"
	FailBadReply    FailureKind = "bad-reply"
	FailError       FailureKind = "error"
)

// EndpointTally counts the probes one endpoint answered.
type EndpointTally struct {
	Count int `json:"count"`
	// Sources counts the source addresses the endpoint saw.
	Sources map[netip.Addr]int `json:"sources"`
}

// ProbeResult is the outcome of Probe.
type ProbeResult struct {
	Spec ProbeSpec `json:"spec"`
	// Client is the probes' own address.
	Client netip.Addr `json:"client"`
	Sent   int        `json:"sent"`
	OK     int        `json:"ok"`
	// Failures by kind, and the first error message of each kind.
	Failures      map[FailureKind]int    `json:"failures,omitempty"`
	FailureSample map[FailureKind]string `json:"failureSample,omitempty"`
	// Endpoints that answered, by the address and port that received the
	// probe (after DNAT).
	Endpoints map[netip.AddrPort]*EndpointTally `json:"endpoints"`
	// SourcePreserved counts replies whose source (as the pod saw it) was
	// the probing socket's own address and port: no masquerade.
	SourcePreserved int `json:"sourcePreserved"`
	// Duration is the wall time of the whole probe, conntrack flushes
	// included; ConnectionsPerSecond is Sent/Duration.
	Duration             time.Duration `json:"duration"`
	ConnectionsPerSecond float64       `json:"connectionsPerSecond"`
	ConntrackFlushes     int           `json:"conntrackFlushes"`
}

// Probe source ports: assigned by probe index so every probe of a batch has
// its own; a batch is never larger than the range.
const (
	probePortMin   = 20000
	probePortCount = 40000
)

// Probe sends spec.Count probes and attributes every reply. It returns an
// error only when the probe could not run at all; failed connections are
// counted in the result.
func (pn *PodNetwork) Probe(ctx context.Context, spec ProbeSpec) (ProbeResult, error) {
	if spec.Concurrency <= 0 {
		spec.Concurrency = 8
	}
	if spec.Timeout <= 0 {
		spec.Timeout = 2 * time.Second
	}
	if spec.ConntrackBatch == 0 {
		spec.ConntrackBatch = pn.conntrackDefault()
	}
	res := ProbeResult{
		Spec:          spec,
		Failures:      map[FailureKind]int{},
		FailureSample: map[FailureKind]string{},
		Endpoints:     map[netip.AddrPort]*EndpointTally{},
	}
	if err := spec.validate(); err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	if spec.Protocol == SCTP && !pn.sctp {
		return res, fmt.Errorf("probe %s: this kernel has no SCTP sockets", spec.Target)
	}
	client, err := pn.Client(spec.From)
	if err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	res.Client = client.IP
	batch := probePortCount
	if spec.ConntrackBatch > 0 {
		batch = min(spec.ConntrackBatch, probePortCount)
	}
	// Source ports continue where the last probe stopped, so a new probe
	// does not collide with conntrack entries of the previous one (the
	// kernel would then remap the source port).
	portBase := int(pn.portCursor.Add(uint64(spec.Count)) - uint64(spec.Count))
	var mu sync.Mutex
	start := time.Now()
	for lo := 0; lo < spec.Count; lo += batch {
		hi := min(lo+batch, spec.Count)
		flushed, err := pn.conntrackReserve(hi-lo, spec.ConntrackBatch)
		if err != nil {
			return res, fmt.Errorf("probe %s: %w", spec.Target, err)
		}
		if flushed {
			res.ConntrackFlushes++
		}
		var next atomic.Int64
		next.Store(int64(lo))
		var wg sync.WaitGroup
		var werr error
		for range min(spec.Concurrency, hi-lo) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := newTally()
				err := pn.probeWorker(ctx, client, spec, start, portBase, &next, hi, local)
				mu.Lock()
				defer mu.Unlock()
				local.mergeInto(&res)
				if err != nil && werr == nil {
					werr = err
				}
			}()
		}
		wg.Wait()
		if werr != nil {
			return res, fmt.Errorf("probe %s from %s: %w", spec.Target, spec.From, werr)
		}
		if err := ctx.Err(); err != nil {
			break
		}
	}
	res.Duration = time.Since(start)
	if res.Duration > 0 {
		res.ConnectionsPerSecond = float64(res.Sent) / res.Duration.Seconds()
	}
	return res, ctx.Err()
}

// conntrackDefaultMax is the most a probe batch may hold when
// nf_conntrack_max cannot be read.
const conntrackDefaultMax = 20000

// conntrackDefault is ProbeSpec.ConntrackBatch's default:
// min(20,000, nf_conntrack_max/2), nf_conntrack_max as this kernel has
// it (a VM's guest sizes it from its memory: 8,192 at 1 GiB). Half, since
// the table is shared with the end-to-end latency probes and any other
// namespace. It is read at the first probe, when kube-proxy has loaded
// nf_conntrack.
func (pn *PodNetwork) conntrackDefault() int {
	pn.ctMu.Lock()
	defer pn.ctMu.Unlock()
	if pn.ctBatch == 0 {
		pn.ctBatch = conntrackDefaultMax
		if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max"); err == nil {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 1 {
				pn.ctBatch = min(conntrackDefaultMax, v/2)
			}
		}
	}
	return pn.ctBatch
}

// conntrackReserve accounts for n new connections before they are made,
// and flushes the node namespace's conntrack table first when they would
// take the connections since the last flush past limit (limit < 0: never).
func (pn *PodNetwork) conntrackReserve(n, limit int) (flushed bool, err error) {
	pn.ctMu.Lock()
	defer pn.ctMu.Unlock()
	if limit > 0 && pn.ctSince > 0 && pn.ctSince+n > limit {
		if err := pn.env.FlushConntrack(); err != nil {
			return false, err
		}
		pn.ctSince, flushed = 0, true
	}
	pn.ctSince += n
	return flushed, nil
}

// flushConntrack flushes the node namespace's conntrack table now, and
// starts the count of connections since the last flush again.
func (pn *PodNetwork) flushConntrack() error {
	pn.ctMu.Lock()
	defer pn.ctMu.Unlock()
	if err := pn.env.FlushConntrack(); err != nil {
		return err
	}
	pn.ctSince = 0
	return nil
}

func (s ProbeSpec) validate() error {
	var errs []error
	if !s.Target.Addr().Unmap().Is4() || s.Target.Port() == 0 {
		errs = append(errs, fmt.Errorf("target %s: want an IPv4 address and a port", s.Target))
	}
	if !s.Protocol.valid() {
		errs = append(errs, fmt.Errorf("protocol %q: want tcp, udp or sctp", s.Protocol))
	}
	if s.Count < 0 {
		errs = append(errs, fmt.Errorf("count %d: must not be negative", s.Count))
	}
	if s.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate %g: must not be negative", s.Rate))
	}
	return errors.Join(errs...)
}

// probeWorker runs probes on a thread locked into the client's namespace
// until the batch is done. Sockets are created per probe, so they must be
// created there.
func (pn *PodNetwork) probeWorker(ctx context.Context, c Client, spec ProbeSpec, start time.Time, portBase int, next *atomic.Int64, hi int, t *tally) error {
	runtime.LockOSThread()
	if err := netns.Set(c.ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns into the %s client namespace: %w", c.Kind, err)
	}
	defer func() {
		if err := netns.Set(pn.env.nodeNS); err != nil {
			return // stay locked: the runtime discards the thread
		}
		runtime.UnlockOSThread()
	}()
	target := unix.SockaddrInet4{Addr: spec.Target.Addr().Unmap().As4(), Port: int(spec.Target.Port())}
	p := prober{proto: spec.Protocol, bind: c.bind.As4(), target: &target, timeout: spec.Timeout}
	for {
		i := int(next.Add(1) - 1)
		if i >= hi || ctx.Err() != nil {
			return nil
		}
		if spec.Rate > 0 {
			due := start.Add(time.Duration(float64(i) / spec.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		port := uint16(probePortMin + (portBase+i)%probePortCount)
		nonce := strconv.FormatInt(int64(i), 36)
		r, local, kind, err := p.once(port, nonce)
		t.sent++
		if err != nil {
			t.fail(kind, err)
			continue
		}
		if r.Protocol != spec.Protocol || (spec.Protocol == UDP && r.Nonce != nonce) {
			t.fail(FailBadReply, fmt.Errorf("reply %q does not match probe %s/%s", r.String(), spec.Protocol, nonce))
			continue
		}
		t.ok(r, local)
	}
}

// prober runs one probe with raw non-blocking sockets and poll: the calling
// thread is locked into the client namespace, and every blocking call
// retries on EINTR (the Go runtime's preemption signals cause it).
type prober struct {
	proto   Protocol
	bind    [4]byte
	target  *unix.SockaddrInet4
	timeout time.Duration
}

func (p *prober) once(port uint16, nonce string) (Reply, netip.AddrPort, FailureKind, error) {
	deadline := time.Now().Add(p.timeout)
	typ, proto := unix.SOCK_STREAM, 0
	switch p.proto {
	case UDP:
		typ = unix.SOCK_DGRAM
	case SCTP:
		proto = unix.IPPROTO_SCTP
	}
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return Reply{}, netip.AddrPort{}, FailError, fmt.Errorf("socket: %w", err)
	}
	defer closeReset(fd, typ == unix.SOCK_STREAM)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: p.bind, Port: int(port)}); err != nil {
		// Port taken (by the node's own sockets): let the kernel pick.
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: p.bind}); err != nil {
			return Reply{}, netip.AddrPort{}, FailError, fmt.Errorf("bind %v: %w", netip.AddrFrom4(p.bind), err)
		}
	}
	err = unix.Connect(fd, p.target)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) && !errors.Is(err, unix.EINTR) {
		return Reply{}, netip.AddrPort{}, classify(err), fmt.Errorf("connect: %w", err)
	}
	if typ == unix.SOCK_STREAM {
		if err := waitFD(fd, unix.POLLOUT, deadline); err != nil {
			return Reply{}, netip.AddrPort{}, classify(err), fmt.Errorf("connect: %w", err)
		}
		if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
			if err == nil {
				err = unix.Errno(soerr)
			}
			return Reply{}, netip.AddrPort{}, classify(err), fmt.Errorf("connect: %w", err)
		}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return Reply{}, netip.AddrPort{}, FailError, fmt.Errorf("getsockname: %w", err)
	}
	local := sockaddrAP(sa)
	if typ == unix.SOCK_DGRAM {
		var req [64]byte
		if err := retryEINTR(func() error { _, err := unix.Write(fd, appendUDPRequest(req[:0], nonce)); return err }); err != nil {
			return Reply{}, local, classify(err), fmt.Errorf("send: %w", err)
		}
	}
	var buf [256]byte
	n := 0
	for {
		if err := waitFD(fd, unix.POLLIN, deadline); err != nil {
			return Reply{}, local, classify(err), fmt.Errorf("read reply: %w", err)
		}
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return Reply{}, local, classify(err), fmt.Errorf("read reply: %w", err)
		}
		n += m
		if m == 0 || buf[n-1] == '\n' || n == len(buf) || typ == unix.SOCK_DGRAM {
			break
		}
	}
	r, err := ParseReply(buf[:n])
	if err != nil {
		return Reply{}, local, FailBadReply, err
	}
	return r, local, "", nil
}

var errPollTimeout = errors.New("timed out")

// waitFD polls fd for events until deadline, retrying on EINTR.
func waitFD(fd int, events int16, deadline time.Time) error {
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return errPollTimeout
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(pfd, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			continue // deadline check on the next round
		}
		if pfd[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 && pfd[0].Revents&events == 0 {
			if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soerr != 0 {
				return unix.Errno(soerr)
			}
		}
		return nil
	}
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// closeReset closes a probe socket; stream sockets are reset (SO_LINGER 0)
// so neither side keeps TIME_WAIT.
func closeReset(fd int, stream bool) {
	if stream {
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	unix.Close(fd)
}

func classify(err error) FailureKind {
	switch {
	case errors.Is(err, errPollTimeout), errors.Is(err, unix.ETIMEDOUT):
		return FailTimeout
	case errors.Is(err, unix.ECONNREFUSED):
		return FailRefused
	case errors.Is(err, unix.ECONNRESET), errors.Is(err, unix.EPIPE):
		return FailReset
	case errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH):
		return FailUnreachable
	}
	return FailError
}

// tally is one worker's share of a ProbeResult, merged at the end so
// workers never contend on a lock.
type tally struct {
	sent, okN, preserved int
	failures             map[FailureKind]int
	samples              map[FailureKind]string
	endpoints            map[netip.AddrPort]*EndpointTally
}

func newTally() *tally {
	return &tally{failures: map[FailureKind]int{}, samples: map[FailureKind]string{}, endpoints: map[netip.AddrPort]*EndpointTally{}}
}

func (t *tally) fail(k FailureKind, err error) {
	t.failures[k]++
	if _, ok := t.samples[k]; !ok {
		t.samples[k] = err.Error()
	}
}

func (t *tally) ok(r Reply, local netip.AddrPort) {
	t.okN++
	e := t.endpoints[r.Endpoint]
	if e == nil {
		e = &EndpointTally{Sources: map[netip.Addr]int{}}
		t.endpoints[r.Endpoint] = e
	}
	e.Count++
	e.Sources[r.Source.Addr()]++
	if r.Source == local {
		t.preserved++
	}
}

func (t *tally) mergeInto(r *ProbeResult) {
	r.Sent += t.sent
	r.OK += t.okN
	r.SourcePreserved += t.preserved
	for k, v := range t.failures {
		r.Failures[k] += v
	}
	for k, v := range t.samples {
		if _, ok := r.FailureSample[k]; !ok {
			r.FailureSample[k] = v
		}
	}
	for ep, e := range t.endpoints {
		d := r.Endpoints[ep]
		if d == nil {
			d = &EndpointTally{Sources: map[netip.Addr]int{}}
			r.Endpoints[ep] = d
		}
		d.Count += e.Count
		for s, n := range e.Sources {
			d.Sources[s] += n
		}
	}
}
