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
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A node's child process is this binary re-executed by the node process,
// without new namespaces: it inherits the node's network and mount
// namespaces (so its private /run), gets the external namespace by file
// descriptor, and talks to the node over pairs of pipes, one connection
// each. It dies with the node (Pdeathsig), and whatever namespaces it
// holds go with it. The dataplane (fake pods, prober) and kube-proxy run
// this way, apart from the node process that drives them.
const (
	envChild     = "KPSIM_NETNS_CHILD"
	envChildSpec = "KPSIM_NETNS_CHILD_SPEC"
	// childArgv0Prefix + name is a child's argv[0].
	childArgv0Prefix = "kpsim-"
	// ExtraFiles of a child: the external namespace at fd 3, then for
	// connection i a read end (the node's writes) at 4+2i and a write end
	// at 5+2i.
	childExtNSFD = 3
)

// ChildMain is the body of a node's child process. env is a view of the
// node (its namespaces and addresses; no orchestrator pipes); conns are
// the connections to the node, in StartChild's order. Returning ends the
// process.
type ChildMain func(ctx context.Context, env *NodeEnv, conns []io.ReadWriteCloser) error

var (
	childMu       sync.Mutex
	childRegistry = map[string]ChildMain{}
)

// RegisterChildMain registers fn under name for StartChild, as
// RegisterNodeMain does for nodes (and with the same rules).
func RegisterChildMain(name string, fn ChildMain) {
	childMu.Lock()
	defer childMu.Unlock()
	if name == "" || fn == nil {
		panic("netns: RegisterChildMain with an empty name or nil function")
	}
	if _, dup := childRegistry[name]; dup {
		panic(fmt.Sprintf("netns: child main %q registered twice", name))
	}
	childRegistry[name] = fn
}

// childSpec is what the node hands a child in envChildSpec.
type childSpec struct {
	Config NodeConfig `json:"config"`
	NodeIP netip.Addr `json:"nodeIP"`
	// NodeNetNS is the node namespace's inode: the child refuses to touch
	// anything unless it is there.
	NodeNetNS uint64 `json:"nodeNetNS"`
	Conns     int    `json:"conns"`
	// GOMAXPROCS for the child; 0: Go's default.
	GOMAXPROCS int `json:"gomaxprocs,omitempty"`
}

// ChildOptions configure StartChild.
type ChildOptions struct {
	// Conns is how many connections to open to the child.
	Conns int
	// GOMAXPROCS for the child; 0: Go's default.
	GOMAXPROCS int
}

// Child is a running child process of the node.
type Child struct {
	name  string
	cmd   *exec.Cmd
	conns []io.ReadWriteCloser

	exited  chan struct{}
	waitErr error
}

// StartChild starts the child main registered as name.
func (e *NodeEnv) StartChild(name string, opts ChildOptions) (*Child, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	nodeIno, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(childSpec{Config: e.Config, NodeIP: e.NodeIP, NodeNetNS: nodeIno, Conns: opts.Conns, GOMAXPROCS: opts.GOMAXPROCS})
	if err != nil {
		return nil, err
	}
	c := &Child{name: name, exited: make(chan struct{})}
	ext, err := e.externalNSFile()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	extra := []*os.File{ext}
	var theirs []*os.File
	closeAll := func() {
		for _, f := range theirs {
			f.Close()
		}
		for _, cn := range c.conns {
			cn.Close()
		}
	}
	for range opts.Conns {
		toR, toW, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		fromR, fromW, err := os.Pipe()
		if err != nil {
			toR.Close()
			toW.Close()
			closeAll()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		extra = append(extra, toR, fromW)
		theirs = append(theirs, toR, fromW)
		c.conns = append(c.conns, pipeConn{r: fromR, w: toW})
	}
	c.cmd = &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{childArgv0Prefix + name, e.Config.RunID, strconv.Itoa(os.Getpid())},
		Env:        append(os.Environ(), envChild+"="+name, envChildSpec+"="+string(spec)),
		Stdout:     os.Stderr,
		Stderr:     os.Stderr,
		ExtraFiles: extra,
		// No Cloneflags: the node's namespaces are the child's.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	err = startLocked(c.cmd, func(err error) { c.waitErr = err; close(c.exited) })
	// The child has its copies now; extra[0] is e's, which it keeps.
	for _, f := range theirs {
		f.Close()
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start the %s process: %w", name, err)
	}
	return c, nil
}

// Conn is the node's end of connection i.
func (c *Child) Conn(i int) io.ReadWriteCloser { return c.conns[i] }

// Pid is the child's pid.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Exited is closed when the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Err is how the child ended; call it after Exited is closed.
func (c *Child) Err() error {
	if c.waitErr == nil {
		return nil
	}
	return fmt.Errorf("%s process: %w", c.name, c.waitErr)
}

// Call calls method over client, a connection to the child, and waits for
// the answer or for ctx. The child's error comes back as its message; a
// failed call to a child that has exited says how it ended.
func (c *Child) Call(ctx context.Context, client *rpc.Client, method string, args, reply any) error {
	call := client.Go(method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if call.Error == nil {
		return nil
	}
	var se rpc.ServerError
	if errors.As(call.Error, &se) {
		return errors.New(string(se))
	}
	select {
	case <-c.exited:
		if err := c.Err(); err != nil {
			return fmt.Errorf("%s: %v (%v)", method, call.Error, err)
		}
		return fmt.Errorf("%s: %v (the %s process exited)", method, call.Error, c.name)
	default:
		return fmt.Errorf("%s process: %s: %w", c.name, method, call.Error)
	}
}

// Signal sends sig to the child unless it has exited.
func (c *Child) Signal(sig os.Signal) error {
	select {
	case <-c.exited:
		return nil
	default:
	}
	return c.cmd.Process.Signal(sig)
}

// Close closes the node's ends of the connections (a child serving them
// then exits) and waits for the child.
func (c *Child) Close() error {
	for _, cn := range c.conns {
		cn.Close()
	}
	<-c.exited
	return c.Err()
}

// pipeConn is the two pipes of one side as one connection.
type pipeConn struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (c pipeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c pipeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c pipeConn) Close() error                { return errors.Join(c.w.Close(), c.r.Close()) }

// runChild is a child process's whole life; it returns the exit code.
func runChild(name string) int {
	rawSpec := os.Getenv(envChildSpec)
	os.Unsetenv(envChild)
	os.Unsetenv(envChildSpec)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "kpsim %s: %v\n", name, err)
		return 1
	}
	childMu.Lock()
	fn, ok := childRegistry[name]
	childMu.Unlock()
	if !ok {
		return fail(fmt.Errorf("child main %q is not registered in this binary", name))
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(rawSpec), &spec); err != nil {
		return fail(fmt.Errorf("decode %s: %w", envChildSpec, err))
	}
	ino, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return fail(err)
	}
	if ino != spec.NodeNetNS {
		return fail(fmt.Errorf("not in the node's network namespace (inode %d, want %d): refusing to touch anything", ino, spec.NodeNetNS))
	}
	if spec.GOMAXPROCS > 0 {
		runtime.GOMAXPROCS(spec.GOMAXPROCS)
	}
	syscall.CloseOnExec(childExtNSFD)
	var conns []io.ReadWriteCloser
	for i := range spec.Conns {
		r, w := childExtNSFD+1+2*i, childExtNSFD+2+2*i
		syscall.CloseOnExec(r)
		syscall.CloseOnExec(w)
		conns = append(conns, pipeConn{r: os.NewFile(uintptr(r), "kpsim-conn-in"), w: os.NewFile(uintptr(w), "kpsim-conn-out")})
	}
	env := &NodeEnv{
		Config:        spec.Config,
		NodeIP:        spec.NodeIP,
		NodeInterface: NodeInterface,
		GatewayIP:     spec.Config.gatewayIP(),
		extNS:         netns.NsHandle(childExtNSFD),
	}
	if env.nodeNS, err = netns.GetFromPath("/proc/self/ns/net"); err != nil {
		return fail(fmt.Errorf("open node namespace: %w", err))
	}
	if env.nl, err = netlink.NewHandleAt(env.nodeNS, unix.NETLINK_ROUTE); err != nil {
		return fail(fmt.Errorf("netlink handle in node namespace: %w", err))
	}
	setCurrentNode(env)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := fn(ctx, env, conns); err != nil {
		return fail(err)
	}
	return 0
}
