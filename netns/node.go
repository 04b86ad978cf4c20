package netns

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// NodeConfig describes the node a node process becomes.
type NodeConfig struct {
	// RunID names this run; defaults to a random "kpsim-xxxxxxxx". Anything
	// named that outlives the process carries it.
	RunID string `json:"runID,omitempty"`
	// NodeIP is the node's address and subnet on its interface
	// (kpsim-node0). Default 172.18.0.2/24. The first other address of the
	// subnet is the external router (the peer in the external namespace).
	NodeIP netip.Prefix `json:"nodeIP,omitzero"`
	// ExternalClientIP is the address of the external client, outside the
	// cluster and pod CIDRs. Default 203.0.113.10 (TEST-NET-3).
	ExternalClientIP netip.Addr `json:"externalClientIP,omitzero"`
	// ExternalRoutes are the prefixes the external router sends to the node,
	// as a cloud load balancer would (LoadBalancer IPs, external IPs). The
	// node IP is always reachable; everything else is unreachable.
	ExternalRoutes []netip.Prefix `json:"externalRoutes,omitempty"`
	// Sysctls are extra sysctls set in the node namespace after the
	// defaults, keyed by path below /proc/sys (e.g. "net/ipv4/ip_forward").
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// GOMAXPROCS of the node process; default 32.
	GOMAXPROCS int `json:"gomaxprocs,omitempty"`
}

// Defaults of NodeConfig.
var (
	DefaultNodeIP           = netip.MustParsePrefix("172.18.0.2/24")
	DefaultExternalClientIP = netip.MustParseAddr("203.0.113.10")
)

// NodeInterface is the name of the node's interface in the node namespace.
const NodeInterface = "kpsim-node0"

func (c NodeConfig) withDefaults() NodeConfig {
	if c.RunID == "" {
		c.RunID = NewRunID()
	}
	if !c.NodeIP.IsValid() {
		c.NodeIP = DefaultNodeIP
	}
	if !c.ExternalClientIP.IsValid() {
		c.ExternalClientIP = DefaultExternalClientIP
	}
	return c
}

func (c NodeConfig) validate() error {
	var errs []error
	if !c.NodeIP.Addr().Is4() {
		errs = append(errs, fmt.Errorf("nodeIP %s: only IPv4 is supported", c.NodeIP))
	}
	if c.NodeIP.Bits() > 30 {
		errs = append(errs, fmt.Errorf("nodeIP %s: the subnet needs room for the external router (at most /30)", c.NodeIP))
	}
	if !c.ExternalClientIP.Is4() {
		errs = append(errs, fmt.Errorf("externalClientIP %s: only IPv4 is supported", c.ExternalClientIP))
	}
	if c.NodeIP.Contains(c.ExternalClientIP) {
		errs = append(errs, fmt.Errorf("externalClientIP %s is inside the node subnet %s", c.ExternalClientIP, c.NodeIP))
	}
	for i, p := range c.ExternalRoutes {
		if !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("externalRoutes[%d] %s: only IPv4 is supported", i, p))
		}
	}
	return errors.Join(errs...)
}

// gatewayIP is the external router's address: the first address of the
// node subnet that is not the node's.
func (c NodeConfig) gatewayIP() netip.Addr {
	gw := c.NodeIP.Masked().Addr().Next()
	if gw == c.NodeIP.Addr() {
		gw = gw.Next()
	}
	return gw
}

// NewRunID returns a fresh run id: "kpsim-" and 8 random hex digits.
func NewRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "kpsim-" + hex.EncodeToString(b[:])
}

// NodeOptions configure StartNode.
type NodeOptions struct {
	// Name of the node main registered with RegisterNodeMain.
	Name string
	// Config of the node.
	Config NodeConfig
	// Stdout and Stderr of the node process; default os.Stderr for both
	// (stdout of the orchestrator may be a report).
	Stdout, Stderr io.Writer
	// Binary is the program the node runs: another build of this one (a
	// kpsim variant, built against other kube-proxy code) that registers
	// the same node mains. Default: this binary.
	Binary string
}

// Event is a progress event a node main sent with NodeEnv.Emit.
type Event struct {
	Kind string          `json:"kind"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Decode decodes the event's data into v.
func (e Event) Decode(v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("decode event %q: %w", e.Kind, err)
	}
	return nil
}

// NodeResult is what a node process ended with.
type NodeResult struct {
	// Data is what the node main passed to SetResult (nil if nothing).
	Data json.RawMessage
	// Err is the node main's error, or why the process ended without a
	// result (killed, crashed).
	Err error
	// ProcessState of the exited process.
	ProcessState *os.ProcessState
}

// Decode decodes the result data into v.
func (r *NodeResult) Decode(v any) error {
	if r.Data == nil {
		return errors.New("node result is empty")
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		return fmt.Errorf("decode node result: %w", err)
	}
	return nil
}

// NodeProcess is the orchestrator's handle on a running node process.
type NodeProcess struct {
	name   string
	config NodeConfig
	cmd    *exec.Cmd
	input  *os.File
	inMu   sync.Mutex

	events     chan Event
	queue      *EventQueue
	readerDone chan struct{}
	exited     chan struct{}
	waitErr    error

	mu     sync.Mutex
	result *WireMsg
	readEr error
}

// StartNode starts a node process running the node main registered under
// opts.Name: this binary re-executed in a new network and mount namespace
// that dies with the calling process. Cancelling ctx kills the node.
func StartNode(ctx context.Context, opts NodeOptions) (*NodeProcess, error) {
	if _, ok := lookupNodeMain(opts.Name); !ok {
		return nil, fmt.Errorf("start node: node main %q is not registered (RegisterNodeMain)", opts.Name)
	}
	cfg := opts.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("start node %q: %w", opts.Name, err)
	}
	hostNet, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("start node %q: %w", opts.Name, err)
	}
	hostMnt, err := nsInode("/proc/self/ns/mnt")
	if err != nil {
		return nil, fmt.Errorf("start node %q: %w", opts.Name, err)
	}
	spec, err := json.Marshal(nodeSpec{Config: cfg, HostNetNS: hostNet, HostMntNS: hostMnt, ParentPID: os.Getpid()})
	if err != nil {
		return nil, fmt.Errorf("start node %q: encode config: %w", opts.Name, err)
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start node %q: input pipe: %w", opts.Name, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("start node %q: output pipe: %w", opts.Name, err)
	}
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = os.Stderr
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	binary := opts.Binary
	if binary == "" {
		binary = "/proc/self/exe"
	}
	cmd := &exec.Cmd{
		Path: binary,
		// Cleanup finds nodes by this argv (and never reads environments).
		Args:   []string{NodeArgv0, opts.Name, cfg.RunID, strconv.Itoa(os.Getpid())},
		Env:    append(os.Environ(), EnvNodeName+"="+opts.Name, EnvNodeConfig+"="+string(spec)),
		Stdout: stdout,
		Stderr: stderr,
		// fd 3 and 4 in the node (nodeInputFD, nodeOutputFD).
		ExtraFiles: []*os.File{inR, outW},
		SysProcAttr: &syscall.SysProcAttr{
			// The whole process starts in the new namespaces: no thread
			// of it ever runs in the host's network namespace.
			Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	p := &NodeProcess{
		name:       opts.Name,
		config:     cfg,
		cmd:        cmd,
		input:      inW,
		events:     make(chan Event),
		queue:      NewEventQueue(),
		readerDone: make(chan struct{}),
		exited:     make(chan struct{}),
	}

	err = startLocked(cmd, func(err error) { p.waitErr = err; close(p.exited) })
	// The child holds its own copies now.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start node %q: %w", opts.Name, err)
	}
	go p.read(outR)
	go p.pump()
	go func() {
		select {
		case <-ctx.Done():
			_ = p.Kill()
		case <-p.exited:
		}
	}()
	return p, nil
}

// read turns the node's output lines into events and the result.
func (p *NodeProcess) read(r io.ReadCloser) {
	defer close(p.readerDone)
	defer p.queue.Close()
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var m WireMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			p.mu.Lock()
			p.readEr = fmt.Errorf("node %q: bad output line: %w", p.name, err)
			p.mu.Unlock()
			continue
		}
		switch m.Type {
		case "result":
			p.mu.Lock()
			p.result = &m
			p.mu.Unlock()
		default:
			// Queued without bound: a slow consumer must never block the
			// node's writes (and so the node itself).
			p.queue.Push(m.Event())
		}
	}
	if err := sc.Err(); err != nil {
		p.mu.Lock()
		p.readEr = fmt.Errorf("node %q: read output: %w", p.name, err)
		p.mu.Unlock()
	}
}

// pump delivers queued events to the events channel in order.
func (p *NodeProcess) pump() {
	defer close(p.events)
	for {
		ev, ok := p.queue.Pop()
		if !ok {
			return
		}
		p.events <- ev
	}
}

// Pid returns the node process's pid.
func (p *NodeProcess) Pid() int { return p.cmd.Process.Pid }

// RunID returns the run id of the node.
func (p *NodeProcess) RunID() string { return p.config.RunID }

// Send encodes v as JSON and sends it to the node (NodeEnv.Recv).
func (p *NodeProcess) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("node %q: encode input: %w", p.name, err)
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if _, err := p.input.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("node %q: send input: %w", p.name, err)
	}
	return nil
}

// CloseInput closes the node's input; NodeEnv.Recv then returns io.EOF.
func (p *NodeProcess) CloseInput() error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	return p.input.Close()
}

// Events returns the node's progress events, in order; the channel closes
// when the node's output ends. Unread events are queued, never dropped.
func (p *NodeProcess) Events() <-chan Event { return p.events }

// WaitEvent reads events until one of the given kind arrives.
func (p *NodeProcess) WaitEvent(ctx context.Context, kind string) (Event, error) {
	for {
		select {
		case <-ctx.Done():
			return Event{}, fmt.Errorf("node %q: waiting for event %q: %w", p.name, kind, ctx.Err())
		case ev, ok := <-p.events:
			if !ok {
				res := p.peekResult()
				return Event{}, fmt.Errorf("node %q ended before event %q: %v", p.name, kind, res)
			}
			if ev.Kind == kind {
				return ev, nil
			}
		}
	}
}

func (p *NodeProcess) peekResult() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.result != nil && p.result.Error != "" {
		return p.result.Error
	}
	return "no error reported"
}

// Kill sends SIGKILL to the node process (by pid). Killing an exited node
// is not an error.
func (p *NodeProcess) Kill() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill node %q (pid %d): %w", p.name, p.Pid(), err)
	}
	return nil
}

// Wait waits for the node process to exit and returns its result. The
// returned error is the node main's error or why there is no result.
func (p *NodeProcess) Wait() (*NodeResult, error) {
	<-p.exited
	<-p.readerDone
	p.inMu.Lock()
	p.input.Close()
	p.inMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	res := &NodeResult{ProcessState: p.cmd.ProcessState}
	switch {
	case p.result != nil:
		res.Data = p.result.Data
		if p.result.Error != "" {
			res.Err = fmt.Errorf("node %q (pid %d): %s", p.name, p.Pid(), p.result.Error)
		}
	case p.readEr != nil:
		res.Err = p.readEr
	default:
		res.Err = fmt.Errorf("node %q (pid %d) ended without a result: %v", p.name, p.Pid(), p.waitErr)
	}
	return res, res.Err
}

// Exited is closed when the node process has exited.
func (p *NodeProcess) Exited() <-chan struct{} { return p.exited }

// RunNode starts a node, sends it in, waits for it to end and decodes its
// result into out: the whole life of a node that needs no events. The
// node is killed if ctx ends first.
func RunNode(ctx context.Context, opts NodeOptions, in, out any) error {
	p, err := StartNode(ctx, opts)
	if err != nil {
		return err
	}
	if err := p.Send(in); err != nil {
		_ = p.Kill()
		_, _ = p.Wait()
		return err
	}
	res, err := p.Wait()
	if err != nil {
		return err
	}
	return res.Decode(out)
}

// startLocked starts cmd and reaps it in the background, calling exited
// with Wait's error (or Start's, when it did not start). Pdeathsig fires
// when the *thread* that forked the child exits, so the fork happens on a
// thread that stays locked until the child is gone.
func startLocked(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			exited(err)
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
