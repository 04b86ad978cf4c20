package netns

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const restartsNodeMain = "test-child-restarts"

func init() {
	RegisterNodeMain(restartsNodeMain, runRestartsNode)
	RegisterChildMain("test-idle-child", func(context.Context, *NodeEnv, []io.ReadWriteCloser) error { return nil })
}

// collect runs the garbage collector and gives finalizers time to run.
func collect() {
	for range 3 {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
	}
}

// runRestartsNode starts and ends a child five times, as restarts of
// kube-proxy's process do, collecting garbage between, then checks that
// the node's own descriptors still work: the external namespace's handle,
// and the output pipes of programs it runs.
func runRestartsNode(ctx context.Context, env *NodeEnv) error {
	for i := range 5 {
		c, err := env.StartChild("test-idle-child", ChildOptions{})
		if err != nil {
			return fmt.Errorf("child %d: %w", i, err)
		}
		if err := c.Close(); err != nil {
			return fmt.Errorf("child %d: %w", i, err)
		}
		collect()
	}
	if _, err := unix.FcntlInt(uintptr(env.ExternalNS()), unix.F_GETFD, 0); err != nil {
		return fmt.Errorf("the external namespace's handle after 5 children: %w", err)
	}
	for i := range 20 {
		out, err := exec.CommandContext(ctx, "echo", "ok").Output()
		if err != nil || string(out) != "ok\n" {
			return fmt.Errorf("program run %d after 5 children: %q, %v", i, out, err)
		}
		collect()
	}
	return env.SetResult("done")
}

// TestPrivilegedChildRestartsKeepFDs: starting children must not leave
// behind anything that closes the node's descriptors later. Each child
// once got a new *os.File on the external namespace's handle, whose
// finalizer closed the handle when the garbage collector took it, and then
// whatever reused its number: in CI the lifecycle scenario's listing
// replay failed reading nft's output with "bad file descriptor" after
// kube-proxy's process had been restarted.
func TestPrivilegedChildRestartsKeepFDs(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out string
	if err := RunNode(ctx, NodeOptions{Name: restartsNodeMain}, nil, &out); err != nil {
		t.Fatal(err)
	}
}
