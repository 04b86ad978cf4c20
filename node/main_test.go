package node

import (
	"os"
	"os/exec"
	"testing"

	"github.com/kpsim/kpsim/netns"
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
