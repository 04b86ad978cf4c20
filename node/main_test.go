package node

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/reports"
)

func TestMain(m *testing.M) {
	// Node processes are this test binary re-executed (see package netns).
	if netns.Init() {
		return
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (sudo make deps)", tool)
		}
	}
}

// runTestNode runs a mode node on in, within timeout, and returns its
// mode result; a node that failed fails the test.
func runTestNode(t *testing.T, in Input, timeout time.Duration) *reports.ModeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	in.Version, in.OutDir = ProtocolVersion, t.TempDir()
	var out Result
	if err := netns.RunNode(ctx, netns.NodeOptions{Name: MainName}, in, &out); err != nil {
		t.Fatalf("node: %v", err)
	}
	mr := out.Mode
	if mr == nil || mr.Error != "" {
		t.Fatalf("mode result %+v", mr)
	}
	return mr
}
