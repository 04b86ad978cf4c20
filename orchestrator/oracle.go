package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
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

func finalStatePath(dir, mode string) string { return filepath.Join(dir, mode+".final-api-state.json") }

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
	if err := n.waitSynced(ctx, n.longSyncTimeout()); err != nil {
		return err
	}
	n.synced = true
	counts, err := n.readDataplane(ctx, "oracle")
	n.res.Rules = counts
	return err
}

// unreachableChains, per normalized dump kind, drops the chains no packet
// can reach and returns them.
var unreachableChains = map[string]func(string) (string, []string){
	"iptables": rules.ReachableIPTables,
	"nft":      rules.StaleNFTChains,
}

// compareOracle diffs the main node's final normalized dataplane with the
// oracle's.
func compareOracle(dir string, m scenarios.ModeSpec) reports.Oracle {
	// The normalized dumps a mode leaves: IPVS mode also writes iptables
	// rules, compared like iptables mode's.
	kinds := []string{"iptables"}
	switch m.Mode {
	case scenarios.ModeNFTables:
		kinds = []string{"nft"}
	case scenarios.ModeIPVS:
		kinds = []string{"ipvs", "iptables"}
	}
	o := reports.Oracle{Checked: true}
	var diffs []string
	for _, kind := range kinds {
		end, fresh := m.Name+".end."+kind+".normalized.gz", m.Name+".oracle."+kind+".normalized.gz"
		o.Files = append(o.Files, end, fresh)
		got, err := readGzip(filepath.Join(dir, end))
		if err != nil {
			return reports.Oracle{Error: err.Error(), Files: o.Files}
		}
		want, err := readGzip(filepath.Join(dir, fresh))
		if err != nil {
			return reports.Oracle{Error: err.Error(), Files: o.Files}
		}
		// Compare what packets can reach: iptables chains nothing jumps
		// to (left by partial syncs) and nftables chains kube-proxy
		// flushed and deletes a second later are reported, not compared.
		// Those unreachable in the fresh dataplane too (iptables'
		// canaries) are by design; the leftovers are the rest.
		if prune := unreachableChains[kind]; prune != nil {
			var left, inFresh []string
			got, left = prune(got)
			want, inFresh = prune(want)
			for _, c := range left {
				if !slices.Contains(inFresh, c) {
					o.Unreachable++
					if len(o.UnreachableSample) < 5 {
						o.UnreachableSample = append(o.UnreachableSample, c)
					}
				}
			}
			o.UnreachableInFresh = len(inFresh)
		}
		if kind == "ipvs" {
			// IPVS mode keeps removed real servers at weight 0 until
			// their connections drain (graceful termination): they take
			// no new connections, so they are reported, not compared.
			var drained int
			got, drained = withoutWeightZero(got)
			want, _ = withoutWeightZero(want)
			o.Draining = drained
		}
		if d := rules.DiffNormalized(want, got); d != "" {
			diffs = append(diffs, kind+":\n"+d)
		}
		o.Lines += strings.Count(got, "\n")
	}
	o.Diff = strings.Join(diffs, "\n")
	o.Equal = o.Diff == ""
	return o
}

// withoutWeightZero drops the weight-0 real servers ("  -> addr Masq 0")
// from a normalized IPVS dump and counts them.
func withoutWeightZero(dump string) (string, int) {
	lines := strings.Split(dump, "\n")
	out := lines[:0]
	n := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if strings.HasPrefix(strings.TrimSpace(l), "->") && len(f) > 0 && f[len(f)-1] == "0" {
			n++
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n"), n
}

func readGzip(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	b, err := io.ReadAll(zr)
	return string(b), err
}

// runOracleMode starts the oracle node for one mode and compares.
func runOracleMode(ctx context.Context, stderr io.Writer, s *scenarios.Scenario, file string, data []byte, m scenarios.ModeSpec, runID, dir string, vm bool) reports.Oracle {
	state, err := os.ReadFile(finalStatePath(dir, m.Name))
	if err != nil {
		return reports.Oracle{Error: "the run saved no final API state: " + err.Error()}
	}
	in := nodeInput{ScenarioFile: file, ScenarioYAML: data, Mode: m.Name, OutDir: dir, OracleState: state}
	if vm {
		in.OutDir = netns.GuestFilesDir
	}
	fmt.Fprintf(stderr, "%s: oracle: a fresh proxier from the final API state\n", m.Name)
	mr := startNode(ctx, stderr, s, in, m, runID, dir, m.Name+".oracle.node.log", vm)
	if mr.Error != "" {
		return reports.Oracle{Error: "the oracle's proxier failed: " + mr.Error}
	}
	return compareOracle(dir, m)
}
