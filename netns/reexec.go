package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The node process is this binary re-executed (EnvNodeName,
// EnvNodeConfig in wire.go).
const (
	// Pipes between orchestrator and node: ExtraFiles[0] and [1].
	nodeInputFD  = 3
	nodeOutputFD = 4
	// defaultGOMAXPROCS: the prober and responders make blocking socket
	// calls; many Ps keep them from starving each other on 2 cores.
	defaultGOMAXPROCS = 32
)

// NodeMain is the body of a node process. It runs after the node namespace
// is set up; its error (if any) is reported to the orchestrator.
type NodeMain func(ctx context.Context, env *NodeEnv) error

var (
	registryMu sync.Mutex
	registry   = map[string]NodeMain{}
)

// RegisterNodeMain registers fn under name so StartNode(name) can run it in a
// node process. Call it from init() or from main/TestMain before Init: the
// node process is a fresh copy of the binary and must find the same
// registrations. It panics on a duplicate or empty name (a programming error).
func RegisterNodeMain(name string, fn NodeMain) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if name == "" || fn == nil {
		panic("netns: RegisterNodeMain with an empty name or nil function")
	}
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("netns: node main %q registered twice", name))
	}
	registry[name] = fn
}

func lookupNodeMain(name string) (NodeMain, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	fn, ok := registry[name]
	return fn, ok
}

// Init must be the first thing main (and TestMain) calls. In the
// orchestrator it returns false at once. In a node process it sets up the
// node, runs the registered main, writes the result and exits; in a
// node's child process (StartChild) it runs the child's main and exits:
// in both it never returns.
func Init() bool {
	if child := os.Getenv(envChild); child != "" {
		os.Exit(runChild(child))
	}
	name := os.Getenv(EnvNodeName)
	if name == "" {
		return false
	}
	os.Exit(runNode(name))
	return true // unreachable
}

// runNode is the node process's whole life; it returns the exit code.
func runNode(name string) int {
	rawSpec := os.Getenv(EnvNodeConfig)
	os.Unsetenv(EnvNodeName)
	os.Unsetenv(EnvNodeConfig)
	syscall.CloseOnExec(nodeInputFD)
	syscall.CloseOnExec(nodeOutputFD)
	in := os.NewFile(nodeInputFD, "kpsim-node-input")
	outFile := os.NewFile(nodeOutputFD, "kpsim-node-output")
	out := &msgWriter{w: bufio.NewWriter(outFile)}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "kpsim node %q: %v\n", name, err)
		out.write(WireMsg{Type: "result", Time: time.Now(), Error: err.Error()})
		return 1
	}

	var spec nodeSpec
	if err := json.Unmarshal([]byte(rawSpec), &spec); err != nil {
		return fail(fmt.Errorf("decode %s: %w", EnvNodeConfig, err))
	}
	fn, ok := lookupNodeMain(name)
	if !ok {
		return fail(fmt.Errorf("node main %q is not registered in this binary", name))
	}
	procs := spec.Config.GOMAXPROCS
	if procs <= 0 {
		procs = defaultGOMAXPROCS
	}
	runtime.GOMAXPROCS(procs)

	start := time.Now()
	env, err := setupNode(spec)
	if err != nil {
		return fail(fmt.Errorf("set up node: %w", err))
	}
	defer env.close()
	env.in = json.NewDecoder(in)
	env.inRaw = in
	env.out = out
	if err := env.Emit(EventNodeReady, nodeReady{
		NodeIP:        env.NodeIP.String(),
		NodeInterface: env.NodeInterface,
		SetupSeconds:  time.Since(start).Seconds(),
	}); err != nil {
		return fail(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	runErr := fn(ctx, env)
	msg := WireMsg{Type: "result", Time: time.Now(), Data: env.result}
	if runErr != nil {
		msg.Error = runErr.Error()
	}
	if err := out.write(msg); err != nil {
		fmt.Fprintf(os.Stderr, "kpsim node %q: write result: %v\n", name, err)
		return 1
	}
	if runErr != nil {
		return 1
	}
	return 0
}

// EventNodeReady is emitted by the framework once the node namespace is set
// up, before the node main runs.
const EventNodeReady = "node-ready"

type nodeReady struct {
	NodeIP        string  `json:"nodeIP"`
	NodeInterface string  `json:"nodeInterface"`
	SetupSeconds  float64 `json:"setupSeconds"`
}

// msgWriter serialises JSON lines from many goroutines; every line is
// flushed at once so the orchestrator sees progress live.
type msgWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (m *msgWriter) write(msg WireMsg) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", msg.Type, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write %s message: %w", msg.Type, err)
	}
	if err := m.w.Flush(); err != nil {
		return fmt.Errorf("write %s message: %w", msg.Type, err)
	}
	return nil
}

// Emit sends a progress event to the orchestrator. data is encoded as JSON.
func (e *NodeEnv) Emit(kind string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode event %q: %w", kind, err)
	}
	m := WireMsg{Type: "event", Kind: kind, Time: time.Now(), Data: raw}
	if os.Getenv(ConsoleEventsEnv) == "1" {
		// In a VM the output reaches the host only when the VM ends; the
		// console (the node's stderr) is live, so events go there too.
		if line, err := json.Marshal(m); err == nil {
			fmt.Fprintf(os.Stderr, "%s%s\n", ConsoleEventMarker, line)
		}
	}
	return e.out.write(m)
}

// SetResult records the result sent to the orchestrator when the node main
// returns; the last call wins.
func (e *NodeEnv) SetResult(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode node result: %w", err)
	}
	e.result = raw
	return nil
}

// Recv decodes the next JSON value the orchestrator sent with
// NodeProcess.Send. It returns io.EOF once the orchestrator closed the input.
func (e *NodeEnv) Recv(v any) error {
	if err := e.in.Decode(v); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return fmt.Errorf("decode node input: %w", err)
	}
	return nil
}

// RunID returns the run id this node belongs to.
func (e *NodeEnv) RunID() string { return e.Config.RunID }
