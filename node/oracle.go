package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
	"github.com/kpsim/kpsim/toolexec"
)

// The after-churn oracle: the dataplane a proxier reached through a run's
// churn must equal what a fresh proxier of the same mode builds from the
// final API state in one full sync. The main node saves that state; a
// second node process (a clean network namespace) builds from it.

// apiState is the API objects kube-proxy watches, as JSON.
type apiState struct {
	Nodes          []corev1.Node               `json:"nodes"`
	ServiceCIDRs   []networkingv1.ServiceCIDR  `json:"serviceCIDRs"`
	Services       []corev1.Service            `json:"services"`
	EndpointSlices []discoveryv1.EndpointSlice `json:"endpointSlices"`
}

// FinalStatePath is where a mode's node saves the API state it ended
// with, for the oracle.
func FinalStatePath(dir, mode string) string { return filepath.Join(dir, mode+".final-api-state.json") }

// saveAPIState lists what the API holds now and writes it for the oracle.
func saveAPIState(ctx context.Context, c kubernetes.Interface, path string) error {
	var st apiState
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	cidrs, err := c.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	slices, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	st.Nodes, st.ServiceCIDRs, st.Services, st.EndpointSlices = nodes.Items, cidrs.Items, svcs.Items, slices.Items
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// runOracle builds a fresh proxier from the saved API state, waits
// for its first sync and saves its dataplane as <mode>.oracle.*.
func (n *node) runOracle(ctx context.Context, data []byte) error {
	n.oracle = true // no faults: the oracle is the reference
	var st apiState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("decoding the final API state: %w", err)
	}
	var objs []runtime.Object
	for i := range st.Nodes {
		objs = append(objs, &st.Nodes[i])
	}
	for i := range st.ServiceCIDRs {
		objs = append(objs, &st.ServiceCIDRs[i])
	}
	for i := range st.Services {
		objs = append(objs, &st.Services[i])
	}
	for i := range st.EndpointSlices {
		objs = append(objs, &st.EndpointSlices[i])
	}
	client := fake.NewSimpleClientset(objs...)
	if err := n.startProxier(ctx, client); err != nil {
		return err
	}
	if _, err := n.waitSynced(ctx, n.longSyncTimeout()); err != nil {
		return err
	}
	// nftables mode queues no sync for the ServiceCIDRs, and only a full
	// sync writes the rule dropping traffic to unallocated ClusterIPs: a
	// kube-proxy whose first sync began before it was handed them lacks
	// that rule until its hourly full sync. That race of upstream's
	// startup is reported where the run met it; the oracle stands for a
	// fresh proxier that has them, so a process that lost it is replaced
	// (a first sync is full), up to three times; after that the
	// comparison shows the difference.
	final := len(n.s.Spec.Steps)
	for try := 1; try <= 3 && n.s.ModeAt(*n.ms, final).Mode == scenarios.ModeNFTables; try++ {
		if lacks, err := n.lacksUnallocatedDrop(ctx); err != nil || !lacks {
			break
		}
		klog.Background().Info("oracle: kube-proxy's first sync began before it was handed the ServiceCIDRs (its table lacks the rule dropping traffic to unallocated ClusterIPs); starting a new kube-proxy process", "try", try)
		if _, err := n.stopKubeProxy(ctx, final, true, "", nil, time.Minute); err != nil {
			return err
		}
		if err := n.startProxier(ctx, client); err != nil {
			return err
		}
		if _, err := n.waitSynced(ctx, n.longSyncTimeout()); err != nil {
			return err
		}
	}
	n.synced = true
	counts, err := n.readDataplane(ctx, "oracle")
	n.res.Rules = counts
	return err
}

// runRepeat times one more first sync of the mode entry: a fresh proxier
// at the scenario's initial API state, the state the run's first sync
// met. No fake pods (a sync does not need them) and no faults.
func (n *node) runRepeat(ctx context.Context) error {
	n.oracle = true // no faults
	var err error
	if n.cluster, err = sim.New(n.s); err != nil {
		return fmt.Errorf("building the fake cluster: %w", err)
	}
	if err := n.startProxierAt(ctx, n.cluster.Clientset, 0); err != nil {
		return err
	}
	_, err = n.waitSynced(ctx, n.longSyncTimeout())
	return err
}

// lacksUnallocatedDrop says whether kube-proxy was handed ServiceCIDRs
// and its table has no rule dropping traffic to unallocated ClusterIPs
// (upstream's comment names it). A failed read is left to the dumps.
func (n *node) lacksUnallocatedDrop(ctx context.Context) (bool, error) {
	if len(n.proxier.Inputs().ServiceCIDRs) == 0 {
		return false, nil
	}
	out, err := n.tools.Run(ctx, toolexec.Command("nft", "list", "chain", "ip", "kube-proxy", "cluster-ips-check"))
	if err != nil {
		return false, err
	}
	return !strings.Contains(string(out), "Drop traffic to unallocated ClusterIPs"), nil
}
