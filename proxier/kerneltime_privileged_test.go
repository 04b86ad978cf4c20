package proxier

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
)

const kernelTimeNodeMain = "proxier-kerneltime-test"

func init() { netns.RegisterNodeMain(kernelTimeNodeMain, runKernelTimeNode) }

// kernelTimeOutput is what runKernelTimeNode reports.
type kernelTimeOutput struct {
	Begin  time.Time    `json:"begin"`
	Calls  []KernelCall `json:"calls"`
	Syncs  []Sync       `json:"syncs"`
	Totals Totals       `json:"totals"`
}

// runKernelTimeNode starts the proxier, makes one change and reports the
// kernel calls with the syncs once every sync kube-proxy counted has both
// its Sync record and the program run that ends it: a RestoreAll in
// iptables mode, an nft transaction in nftables mode.
func runKernelTimeNode(ctx context.Context, env *netns.NodeEnv) error {
	quietKlog()
	var in proxierInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	objs, eps := testObjects(env.NodeIP)
	client := fake.NewClientset(objs...)
	begin := time.Now()
	p, err := startTestProxier(ctx, env, in, client)
	if err != nil {
		return err
	}
	ip0 := testClusterIP(0)
	slice := testSlice(0, append(eps[ip0], testEndpoint(0, testEndpoints)))
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return err
	}
	out := kernelTimeOutput{Begin: begin}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// Upstream v1.37.1 ends every sync it counts with exactly one
	// RestoreAll (unless EnsureChain/EnsureRule fail first, which would
	// show as a recorded error), or in nftables mode with one nft
	// transaction: wait until both sides agree.
	ender := "RestoreAll"
	if in.Mode == ModeNFTables {
		ender = NFTTransaction
	}
	if err := wait.PollUntilContextCancel(wctx, pollInterval, true, func(context.Context) (bool, error) {
		out.Calls, out.Syncs, out.Totals = p.KernelCalls(), p.Syncs(), p.Totals()
		var merged uint64
		for _, s := range out.Syncs {
			merged += uint64(s.Merged)
		}
		restores := uint64(0)
		for _, c := range out.Calls {
			if c.Method == ender {
				restores++
			}
		}
		return out.Totals.SyncCount >= 2 && merged == out.Totals.SyncCount && restores == out.Totals.SyncCount, nil
	}); err != nil {
		return fmt.Errorf("waiting for 2 syncs with one %s each (last: %d calls, %d sync records, %+v): %w",
			ender, len(out.Calls), len(out.Syncs), out.Totals, err)
	}
	return env.SetResult(out)
}

// TestPrivilegedKernelCalls checks that the iptables proxier's calls into
// utiliptables are recorded during a live run (legacy backend) and fit in
// kube-proxy's own sync measurements.
func TestPrivilegedKernelCalls(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "iptables-legacy-save", "ip6tables-legacy-restore")
	var out kernelTimeOutput
	runTestNode(t, kernelTimeNodeMain, proxierInput{Mode: ModeIPTables, Backend: BackendLegacy}, &out)

	if len(out.Calls) == 0 || out.Calls[0].Method != "Present" {
		t.Fatalf("first call is not Start's Present check: %+v", out.Calls)
	}
	var restores, inSyncs time.Duration
	byMethod := map[string]int{}
	for i, c := range out.Calls {
		byMethod[c.Method]++
		t.Logf("call %d: %s %v bytes=%d err=%q", i, c.Method, c.Duration, c.Bytes, c.Err)
		if c.Err != "" && c.Method != "ChainExists" {
			t.Errorf("call %d %s failed: %s", i, c.Method, c.Err)
		}
		if c.Duration <= 0 || c.Start.Before(out.Begin) {
			t.Errorf("call %d %s: start %v (run began %v), duration %v", i, c.Method, c.Start, out.Begin, c.Duration)
		}
		if i > 0 {
			inSyncs += c.Duration
		}
		if c.Method == "RestoreAll" {
			restores += c.Duration
			if c.Bytes == 0 {
				t.Errorf("call %d: RestoreAll of 0 bytes", i)
			}
		}
	}
	own := time.Duration(out.Totals.SyncSeconds * float64(time.Second))
	if restores <= 0 || restores >= own || inSyncs >= own {
		t.Errorf("RestoreAll total %v, all calls after Present %v, kube-proxy's sync total %v: want 0 < RestoreAll <= all < syncs", restores, inSyncs, own)
	}
	// Each single (unmerged) sync holds a RestoreAll within its bounds
	// (Start is a lower bound, End an upper bound; 1 ms for the float
	// seconds of kube-proxy's timestamp gauge) that is shorter than it.
	const slack = time.Millisecond
	for i, s := range out.Syncs {
		if s.Merged != 1 {
			continue
		}
		found := false
		for _, c := range out.Calls {
			if c.Method == "RestoreAll" && !c.Start.Before(s.Start.Add(-slack)) &&
				!c.Start.Add(c.Duration).After(s.End.Add(slack)) && c.Duration <= s.Duration {
				found = true
			}
		}
		if !found {
			t.Errorf("sync %d (%v .. %v, %v) holds no RestoreAll", i, s.Start, s.End, s.Duration)
		}
	}
	t.Logf("calls by method %v; %d syncs: RestoreAll %v of %v sync time (%.0f%%), all calls after Present %v",
		byMethod, out.Totals.SyncCount, restores, own, 100*restores.Seconds()/own.Seconds(), inSyncs)
}

// TestPrivilegedNFTRunsTimed runs the nftables proxier with its nft runs
// through kpsim-exectimer: every sync kube-proxy counts holds the nft runs
// it made, a transaction among them (and reads of its sets and maps in a
// full sync), and the timed runs fit in kube-proxy's own measurement of
// the sync.
func TestPrivilegedNFTRunsTimed(t *testing.T) {
	requireRoot(t, "nft")
	timer := buildExecTimer(t)
	var out kernelTimeOutput
	runTestNode(t, kernelTimeNodeMain, proxierInput{Mode: ModeNFTables, ExecTimer: timer}, &out)

	byMethod := map[string]int{}
	for i, c := range out.Calls {
		byMethod[c.Method]++
		t.Logf("run %d: %s %q %v cpu %v err=%q", i, c.Method, c.Args, c.Duration, c.CPU, c.Err)
		if c.Duration <= 0 || c.Start.Before(out.Begin) {
			t.Errorf("run %d %s: start %v (run began %v), duration %v", i, c.Method, c.Start, out.Begin, c.Duration)
		}
	}
	// knftables.New runs --version and --check once per Interface.
	if byMethod[NFTOther] == 0 || byMethod[NFTCheck] == 0 {
		t.Errorf("runs by method %v: want knftables' --version and --check at start", byMethod)
	}
	const slack = time.Millisecond
	for i, s := range out.Syncs {
		if s.Merged != 1 {
			continue
		}
		parts := SumKernelParts(out.Calls, s.Start.Add(-slack), s.End.Add(slack))
		tx, list := parts[PartNFTTransaction], parts[PartNFTList]
		var timed time.Duration
		for _, p := range parts {
			timed += p.Duration
		}
		t.Logf("sync %d: %v; list %d runs %v, transaction %d runs %v, rest %v", i, s.Duration, list.Calls, list.Duration, tx.Calls, tx.Duration, s.Duration-timed)
		// v1.37.1's syncProxyRules ends in one transaction. With
		// NFTablesNetlink (beta, on by default) it lists chains and sets
		// over netlink, in process and not seen here; a full sync also
		// reads every set and map it keeps with nft (readOrReset).
		if tx.Calls < 1 {
			t.Errorf("sync %d: no nft transaction", i)
		}
		if s.Full && list.Calls < 1 {
			t.Errorf("sync %d is full but ran no nft list", i)
		}
		if timed <= 0 || timed > s.Duration {
			t.Errorf("sync %d: timed nft runs %v against kube-proxy's %v; want 0 < timed <= sync", i, timed, s.Duration)
		}
	}
}
