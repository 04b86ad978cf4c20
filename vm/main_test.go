package vm

import (
	"os"
	"testing"

	"github.com/kpsim/kpsim/netns"
)

// TestMain lets this test binary be the guest's node process: the guest
// runs the same binary, and netns.Init runs the node main registered in
// node_privileged_test.go there.
func TestMain(m *testing.M) {
	if netns.Init() {
		return // never reached: Init exits in a node process
	}
	os.Exit(m.Run())
}
