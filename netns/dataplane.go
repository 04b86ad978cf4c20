package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/rpc"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The dataplane process holds a node's fake pods (their namespaces, veths
// and responders) and runs its prober, so that the node process measures
// the proxier under test and not the packets it answers and sends. It is
// this binary re-executed by the node process, without new namespaces: it
// inherits the node's network and mount namespaces, gets the external
// namespace by file descriptor, and answers net/rpc calls on two pipes.
// It exits when the node process closes its end (or dies: Pdeathsig), and
// its pod namespaces go with it.
const (
	envDataplane   = "KPSIM_NETNS_DATAPLANE"
	dataplaneArgv0 = "kpsim-dataplane"
	// ExtraFiles of the dataplane process: fd 3 carries calls from the
	// node, fd 4 replies, fd 5 is the external namespace.
	dataplaneCallsFD   = 3
	dataplaneRepliesFD = 4
	dataplaneExtNSFD   = 5
)

// dataplaneSpec is what the node hands the dataplane process in
// envDataplane.
type dataplaneSpec struct {
	Config NodeConfig `json:"config"`
	NodeIP netip.Addr `json:"nodeIP"`
	// NodeNetNS is the node namespace's inode: the dataplane refuses to
	// touch anything unless it is there.
	NodeNetNS uint64 `json:"nodeNetNS"`
}

// Dataplane is a node's fake pods and prober in a process of their own
// (see StartDataplane). Its methods are PodNetwork's, called across the
// process boundary. Safe for concurrent use.
type Dataplane struct {
	cmd    *exec.Cmd
	client *rpc.Client
	sctp   bool

	exited  chan struct{}
	waitErr error
	closed  sync.Once
}

// DataplaneUsage is the dataplane process's own resource use, from
// getrusage(2) inside it.
type DataplaneUsage struct {
	CPUSeconds  float64
	MaxRSSBytes int64
}

// StartDataplane starts the node's dataplane process and creates its pod
// network (see NewPodNetwork for cfg). Close ends it.
func (e *NodeEnv) StartDataplane(cfg PodNetworkConfig) (*Dataplane, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	nodeIno, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(dataplaneSpec{Config: e.Config, NodeIP: e.NodeIP, NodeNetNS: nodeIno})
	if err != nil {
		return nil, err
	}
	callsR, callsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	repliesR, repliesW, err := os.Pipe()
	if err != nil {
		callsR.Close()
		callsW.Close()
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	ext := os.NewFile(uintptr(e.extNS), "kpsim-external-ns")
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{dataplaneArgv0, e.Config.RunID, strconv.Itoa(os.Getpid())},
		Env:        append(os.Environ(), envDataplane+"="+string(spec)),
		Stdout:     os.Stderr,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{callsR, repliesW, ext},
		// No Cloneflags: the node's namespaces are the dataplane's.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	d := &Dataplane{cmd: cmd, exited: make(chan struct{})}
	// Pdeathsig fires when the forking thread exits: fork from one that
	// stays locked until the child is gone (as StartNode does).
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(d.exited)
			return
		}
		started <- nil
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	err = <-started
	callsR.Close()
	repliesW.Close()
	// ext is e.extNS's descriptor: the child has its copy; e keeps its own.
	if err != nil {
		callsW.Close()
		repliesR.Close()
		return nil, fmt.Errorf("start the dataplane process: %w", err)
	}
	d.client = rpc.NewClient(pipeConn{r: repliesR, w: callsW})
	var reply SetupReply
	if err := d.call(context.Background(), "Dataplane.Setup", cfg, &reply); err != nil {
		d.Close()
		return nil, err
	}
	d.sctp = reply.SCTP
	return d, nil
}

// Pid is the dataplane process's pid.
func (d *Dataplane) Pid() int { return d.cmd.Process.Pid }

// SCTPSupported: see PodNetwork.SCTPSupported.
func (d *Dataplane) SCTPSupported() bool { return d.sctp }

// AddEndpoints: see PodNetwork.AddEndpoints.
func (d *Dataplane) AddEndpoints(addrs []netip.Addr) error {
	return d.call(context.Background(), "Dataplane.AddEndpoints", addrs, &struct{}{})
}

// Probe: see PodNetwork.Probe. When ctx ends first it returns ctx's error
// at once; the probe itself ends within its connections' timeouts.
func (d *Dataplane) Probe(ctx context.Context, spec ProbeSpec) (ProbeResult, error) {
	var r ProbeResult
	err := d.call(ctx, "Dataplane.Probe", spec, &r)
	return r, err
}

// Usage is the dataplane process's CPU time and peak RSS so far.
func (d *Dataplane) Usage() (DataplaneUsage, error) {
	var u DataplaneUsage
	err := d.call(context.Background(), "Dataplane.Usage", struct{}{}, &u)
	return u, err
}

// Close ends the dataplane process and waits for it; its pod namespaces
// go with it.
func (d *Dataplane) Close() error {
	d.closed.Do(func() { d.client.Close() })
	<-d.exited
	return d.waitErr
}

func (d *Dataplane) call(ctx context.Context, method string, args, reply any) error {
	c := d.client.Go(method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-c.Done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.Error == nil {
		return nil
	}
	var se rpc.ServerError
	if errors.As(c.Error, &se) {
		return errors.New(string(se))
	}
	select {
	case <-d.exited:
		return fmt.Errorf("dataplane process: %v (%s)", c.Error, exitStatus(d.waitErr))
	default:
		return fmt.Errorf("dataplane process: %w", c.Error)
	}
}

func exitStatus(err error) string {
	if err == nil {
		return "exited"
	}
	return err.Error()
}

// pipeConn is the two pipes of one side as one connection.
type pipeConn struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (c pipeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c pipeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c pipeConn) Close() error                { return errors.Join(c.w.Close(), c.r.Close()) }

// SetupReply answers Dataplane.Setup.
type SetupReply struct{ SCTP bool }

// DataplaneService is the dataplane process's side of the calls. It is
// exported for net/rpc only.
type DataplaneService struct {
	env *NodeEnv
	mu  sync.Mutex
	pn  *PodNetwork
}

func (s *DataplaneService) pods() (*PodNetwork, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pn == nil {
		return nil, errors.New("dataplane: no pod network (Setup was not called)")
	}
	return s.pn, nil
}

// Setup creates the pod network.
func (s *DataplaneService) Setup(cfg PodNetworkConfig, reply *SetupReply) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pn != nil {
		return errors.New("dataplane: pod network set up twice")
	}
	pn, err := s.env.NewPodNetwork(cfg)
	if err != nil {
		return err
	}
	s.pn = pn
	reply.SCTP = pn.SCTPSupported()
	return nil
}

// AddEndpoints calls PodNetwork.AddEndpoints.
func (s *DataplaneService) AddEndpoints(addrs []netip.Addr, _ *struct{}) error {
	pn, err := s.pods()
	if err != nil {
		return err
	}
	return pn.AddEndpoints(addrs)
}

// Probe calls PodNetwork.Probe.
func (s *DataplaneService) Probe(spec ProbeSpec, reply *ProbeResult) error {
	pn, err := s.pods()
	if err != nil {
		return err
	}
	r, err := pn.Probe(context.Background(), spec)
	*reply = r
	return err
}

// Usage reports getrusage(RUSAGE_SELF).
func (s *DataplaneService) Usage(_ struct{}, reply *DataplaneUsage) error {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	reply.CPUSeconds = timevalSeconds(ru.Utime) + timevalSeconds(ru.Stime)
	reply.MaxRSSBytes = ru.Maxrss * 1024 // kilobytes on Linux
	return nil
}

func timevalSeconds(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// runDataplane is the dataplane process's whole life; it returns the exit
// code.
func runDataplane(rawSpec string) int {
	os.Unsetenv(envDataplane)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "kpsim dataplane: %v\n", err)
		return 1
	}
	var spec dataplaneSpec
	if err := json.Unmarshal([]byte(rawSpec), &spec); err != nil {
		return fail(fmt.Errorf("decode %s: %w", envDataplane, err))
	}
	ino, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return fail(err)
	}
	if ino != spec.NodeNetNS {
		return fail(fmt.Errorf("not in the node's network namespace (inode %d, want %d): refusing to touch anything", ino, spec.NodeNetNS))
	}
	runtime.GOMAXPROCS(defaultGOMAXPROCS)
	for _, fd := range []int{dataplaneCallsFD, dataplaneRepliesFD, dataplaneExtNSFD} {
		syscall.CloseOnExec(fd)
	}
	env := &NodeEnv{
		Config:        spec.Config,
		NodeIP:        spec.NodeIP,
		NodeInterface: NodeInterface,
		GatewayIP:     spec.Config.gatewayIP(),
		extNS:         netns.NsHandle(dataplaneExtNSFD),
	}
	if env.nodeNS, err = netns.GetFromPath("/proc/self/ns/net"); err != nil {
		return fail(fmt.Errorf("open node namespace: %w", err))
	}
	if env.nl, err = netlink.NewHandleAt(env.nodeNS, unix.NETLINK_ROUTE); err != nil {
		return fail(fmt.Errorf("netlink handle in node namespace: %w", err))
	}
	setCurrentNode(env)

	srv := rpc.NewServer()
	if err := srv.RegisterName("Dataplane", &DataplaneService{env: env}); err != nil {
		return fail(err)
	}
	// Returns when the node closes its end or exits.
	srv.ServeConn(pipeConn{
		r: os.NewFile(dataplaneCallsFD, "kpsim-dataplane-calls"),
		w: os.NewFile(dataplaneRepliesFD, "kpsim-dataplane-replies"),
	})
	return 0
}
