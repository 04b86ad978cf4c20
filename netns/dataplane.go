package netns

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"net/rpc"
	"sync"
	"syscall"
)

// The dataplane process holds a node's fake pods (their namespaces, veths
// and responders) and runs its prober, so that the node process measures
// the proxier under test and not the packets it answers and sends. It is a
// child of the node (StartChild) answering net/rpc calls on one
// connection; it exits when the node closes it (or dies), and its pod
// namespaces go with it.
const dataplaneChild = "dataplane"

func init() { RegisterChildMain(dataplaneChild, runDataplane) }

// Dataplane is a node's fake pods and prober in a process of their own
// (see StartDataplane). Its methods are PodNetwork's, called across the
// process boundary. Safe for concurrent use.
type Dataplane struct {
	child  *Child
	client *rpc.Client
	sctp   bool
	closed sync.Once
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
	// The prober and responders make blocking socket calls: many Ps keep
	// them from starving each other on 2 cores.
	child, err := e.StartChild(dataplaneChild, ChildOptions{Conns: 1, GOMAXPROCS: defaultGOMAXPROCS})
	if err != nil {
		return nil, err
	}
	d := &Dataplane{child: child, client: rpc.NewClient(child.Conn(0))}
	var reply SetupReply
	if err := d.call(context.Background(), "Dataplane.Setup", cfg, &reply); err != nil {
		d.Close()
		return nil, err
	}
	d.sctp = reply.SCTP
	return d, nil
}

// Pid is the dataplane process's pid.
func (d *Dataplane) Pid() int { return d.child.Pid() }

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

// DataPath: see PodNetwork.DataPath. When ctx ends first it returns
// ctx's error at once; the round itself ends within its connections'
// timeouts.
func (d *Dataplane) DataPath(ctx context.Context, spec DataPathSpec) (DataPathResult, error) {
	var r DataPathResult
	err := d.call(ctx, "Dataplane.DataPath", spec, &r)
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
	return d.child.Close()
}

func (d *Dataplane) call(ctx context.Context, method string, args, reply any) error {
	return d.child.Call(ctx, d.client, method, args, reply)
}

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

// DataPath calls PodNetwork.DataPath.
func (s *DataplaneService) DataPath(spec DataPathSpec, reply *DataPathResult) error {
	pn, err := s.pods()
	if err != nil {
		return err
	}
	r, err := pn.DataPath(context.Background(), spec)
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

// runDataplane is the dataplane process's main: it serves the node's
// calls until the node closes the connection.
func runDataplane(_ context.Context, env *NodeEnv, conns []io.ReadWriteCloser) error {
	srv := rpc.NewServer()
	if err := srv.RegisterName("Dataplane", &DataplaneService{env: env}); err != nil {
		return err
	}
	srv.ServeConn(conns[0])
	return nil
}
