package proxier

import (
	"flag"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/netns"
)

// Test conventions (as in kube-proxy's proxier_test.go): ClusterIPs in
// 10.96.0.0/12, endpoints in 10.244.0.0/16 (the cluster CIDR), the client
// pod at 10.244.255.254, the node at netns' default 172.18.0.2. All of them
// exist only inside the node process's namespaces.

func TestMain(m *testing.M) {
	quietKlog()
	netns.RegisterNodeMain(proxierNodeMain, runProxierNode)
	if netns.Init() {
		return // never reached: Init exits in a node process
	}
	os.Exit(m.Run())
}

// quietKlog drops the upstream proxiers' klog output so test output stays
// readable.
func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}
