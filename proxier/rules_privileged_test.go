package proxier

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/toolexec"
)

// -capture-rules rewrites rules/testdata/kube-proxy-* (the parsers'
// testdata, in package rules) from a live run.
var captureRules = flag.Bool("capture-rules", false, "rewrite rules/testdata/kube-proxy-* from the rules of live proxiers (privileged)")

const rulesNodeMain = "proxier-rules-test"

func init() { netns.RegisterNodeMain(rulesNodeMain, runRulesNode) }

// rulesOutput is what runRulesNode reports: the raw dumps (the host side
// parses them again with the pure parsers) and the counts the node saw.
type rulesOutput struct {
	IPv4, IPv6     []byte
	NFT, NFTJSON   []byte
	Counts         map[string]int
	IPTables       *rules.IPTablesDump
	NFTables       *rules.NFTablesDump
	Normalized     string
	SavedDumpFiles []string
}

// rulesExtraServices is the number of ClusterIP Services svc5... with 2
// endpoints each (listed in reverse order in their slice), enough for Go's
// map order to show in the dispatch chains.
const rulesExtraServices = 30

// rulesObjects is testObjects (3 ClusterIP Services x 3 endpoints) plus a
// NodePort Service svc3 with 2 endpoints, a Service svc4 without endpoints
// and rulesExtraServices more.
func rulesObjects(nodeIP netip.Addr) []runtime.Object {
	objs, _ := testObjects(nodeIP)
	np := testClusterIP(3)
	objs = append(objs, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "svc3", Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeNodePort, ClusterIP: np.String(), ClusterIPs: []string{np.String()},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports: []v1.ServicePort{{Name: "http", Port: testPort, NodePort: 30080,
				TargetPort: intstr.FromInt32(testTargetPort), Protocol: v1.ProtocolTCP}},
		},
	}, testSlice(3, []netip.Addr{testEndpoint(3, 0), testEndpoint(3, 1)}))
	none := testClusterIP(4)
	objs = append(objs, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "svc4", Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: none.String(), ClusterIPs: []string{none.String()},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports:      []v1.ServicePort{{Name: "http", Port: testPort, TargetPort: intstr.FromInt32(testTargetPort), Protocol: v1.ProtocolTCP}},
		},
	})
	for i := 5; i < 5+rulesExtraServices; i++ {
		ip := testClusterIP(i)
		objs = append(objs, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc%d", i), Namespace: "default"},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeClusterIP, ClusterIP: ip.String(), ClusterIPs: []string{ip.String()},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				Ports:      []v1.ServicePort{{Name: "http", Port: testPort, TargetPort: intstr.FromInt32(testTargetPort), Protocol: v1.ProtocolTCP}},
			},
		}, testSlice(i, []netip.Addr{testEndpoint(i, 1), testEndpoint(i, 0)}))
	}
	return objs
}

// runRulesNode runs in the node process: a proxier, its first sync, then
// the dataplane readers.
func runRulesNode(ctx context.Context, env *netns.NodeEnv) error {
	quietKlog()
	var in proxierInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	_, err := startTestProxier(ctx, env, in, fake.NewClientset(rulesObjects(env.NodeIP)...))
	if err != nil {
		return err
	}
	var out rulesOutput
	var d rules.Dump
	if in.Mode == ModeIPTables {
		ipt, err := rules.ReadIPTables(ctx, &toolexec.Exec{}, in.Backend)
		if err != nil {
			return err
		}
		out.IPv4, out.IPv6, out.IPTables, d = ipt.IPv4, ipt.IPv6, ipt, ipt
	} else {
		nft, err := rules.ReadNFTables(ctx, &toolexec.Exec{})
		if err != nil {
			return err
		}
		out.NFT, out.NFTJSON, out.NFTables, d = nft.Text, nft.JSON, nft, nft
	}
	out.Counts, out.Normalized = d.Counts(), d.Normalize()
	dir := "/run/kpsim-rules-dumps"
	if err := rules.SaveDumps(dir, "node", d); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		out.SavedDumpFiles = append(out.SavedDumpFiles, e.Name())
	}
	return env.SetResult(out)
}

func runRulesTest(t *testing.T, in proxierInput) rulesOutput {
	t.Helper()
	var out rulesOutput
	runTestNode(t, rulesNodeMain, in, &out)
	return out
}

func TestPrivilegedRules(t *testing.T) {
	cases := []struct {
		name     string
		in       proxierInput
		binaries []string
	}{
		{name: "iptables-legacy", in: proxierInput{Mode: ModeIPTables, Backend: BackendLegacy},
			binaries: []string{"iptables-legacy-restore", "iptables-legacy-save", "ip6tables-legacy-restore", "ip6tables-legacy-save"}},
		{name: "iptables-nft", in: proxierInput{Mode: ModeIPTables, Backend: BackendNFT},
			binaries: []string{"iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore", "ip6tables-nft-save"}},
		{name: "nftables", in: proxierInput{Mode: ModeNFTables}, binaries: []string{"nft"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireRoot(t, tc.binaries...)
			a := runRulesTest(t, tc.in)
			b := runRulesTest(t, tc.in)
			if d := rules.DiffNormalized(a.Normalized, b.Normalized); d != "" {
				t.Errorf("two fresh proxiers with the same API state differ after normalization (-first +second):\n%s", d)
			}
			t.Logf("counts: %v; saved %v", a.Counts, a.SavedDumpFiles)
			// Not asserted (it is chance), but it shows what Normalize is for.
			t.Logf("raw dumps of the two proxiers identical (comment lines aside): %v",
				uncommented(a.IPv4) == uncommented(b.IPv4) && uncommented(a.NFT) == uncommented(b.NFT))
			// Raw, JSON (nftables) and normalized dumps, counts.json, and
			// for nftables the state learned from traffic, apart.
			want := 4
			if tc.in.Mode == ModeNFTables {
				want = 5
			}
			if len(a.SavedDumpFiles) != want {
				t.Errorf("saved %v, want %d files", a.SavedDumpFiles, want)
			}
			switch tc.in.Mode {
			case ModeIPTables:
				checkIPTablesRules(t, tc.in.Backend, a)
			case ModeNFTables:
				checkNFTablesRules(t, a)
			}
		})
	}
}

func checkIPTablesRules(t *testing.T, backend string, out rulesOutput) {
	t.Helper()
	v4, err := rules.ParseIPTablesSave(out.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	nat := v4.Tables["nat"]
	// svc0-2: 3 endpoints each, svc3: 2, svc4: none (no chain, a REJECT in
	// filter KUBE-SERVICES instead).
	want := rules.IPTablesTable{SVC: 4 + rulesExtraServices, SEP: 11 + 2*rulesExtraServices, EXT: 1}
	if nat.SVC != want.SVC || nat.SEP != want.SEP || nat.EXT != want.EXT || nat.FW != 0 || nat.SVL != 0 {
		t.Errorf("nat chains: svc %d sep %d ext %d fw %d svl %d, want svc %d sep %d ext %d fw 0 svl 0",
			nat.SVC, nat.SEP, nat.EXT, nat.FW, nat.SVL, want.SVC, want.SEP, want.EXT)
	}
	// A KUBE-SVC chain has one rule per endpoint plus the masquerade rule
	// for off-cluster sources.
	for name, n := range nat.ChainRules {
		if len(name) > 9 && name[:9] == "KUBE-SEP-" && n != 2 {
			t.Errorf("%s has %d rules, want 2 (masquerade hairpin, DNAT)", name, n)
		}
	}
	if got := nat.ChainRules["KUBE-SERVICES"]; got != want.SVC+1 {
		t.Errorf("nat KUBE-SERVICES has %d rules, want %d (services with endpoints) + 1 (to KUBE-NODEPORTS)", got, want.SVC)
	}
	if got := v4.Tables["filter"].ChainRules["KUBE-SERVICES"]; got != 1 {
		t.Errorf("filter KUBE-SERVICES has %d rules, want 1 (REJECT for svc4)", got)
	}
	flat := v4.Counts()
	for k, v := range out.Counts {
		if len(k) > 9 && k[:9] == "iptables/" && flat[k[9:]] != v {
			t.Errorf("%s: node counted %d, rules.ParseIPTablesSave %d", k, v, flat[k[9:]])
		}
	}
	if *captureRules {
		writeTestdata(t, "kube-proxy-iptables-"+backend+".save", out.IPv4)
	}
}

func checkNFTablesRules(t *testing.T, out rulesOutput) {
	t.Helper()
	c, err := rules.ParseNFTJSON(out.NFTJSON)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmpCounts(out.Counts, c.Flat()); d != "" {
		t.Errorf("node counts vs rules.ParseNFTJSON: %s", d)
	}
	for _, tab := range c.Tables {
		if tab.Name != "kube-proxy" {
			continue
		}
		// Service port chains are "service-<hash>-<ns>/<name>/<proto>/<port>";
		// v1.37 has no per-endpoint chains: each service chain DNATs
		// through an anonymous numgen map with one entry per endpoint.
		svc := 0
		for name := range tab.ChainRules {
			if strings.HasPrefix(name, "service-") && strings.Contains(name, "/") {
				svc++
			}
		}
		if tab.Family == "ip" && svc != 4+rulesExtraServices {
			t.Errorf("ip kube-proxy: %d service chains, want %d", svc, 4+rulesExtraServices)
		}
		if tab.Family == "ip" {
			// cluster-ips holds every ClusterIP; service-ips maps each
			// ClusterIP . proto . port with endpoints to its chain.
			if got := tab.Elements["cluster-ips"]; got != 5+rulesExtraServices {
				t.Errorf("ip kube-proxy cluster-ips has %d elements, want %d", got, 5+rulesExtraServices)
			}
			if got := tab.Elements["service-ips"]; got != 4+rulesExtraServices {
				t.Errorf("ip kube-proxy service-ips has %d elements, want %d", got, 4+rulesExtraServices)
			}
		}
	}
	if eps := len(nftEndpointEntry.FindAll(out.NFT, -1)); eps != 11+2*rulesExtraServices {
		t.Errorf("nft list ruleset has %d endpoint entries in numgen maps, want %d", eps, 11+2*rulesExtraServices)
	}
	if *captureRules {
		writeTestdata(t, "kube-proxy-nft.json", out.NFTJSON)
		writeTestdata(t, "kube-proxy-nft.txt", out.NFT)
	}
}

// nftEndpointEntry is one endpoint of a numgen DNAT map in nft list ruleset
// text: "0 : 10.244.0.10 . 8080".
var nftEndpointEntry = regexp.MustCompile(`\d+ : 10\.244\.\d+\.\d+ \. 8080`)

func uncommented(b []byte) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func cmpCounts(a, b map[string]int) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%v != %v", a, b)
	}
	for k, v := range a {
		if b[k] != v {
			return fmt.Sprintf("%v != %v", a, b)
		}
	}
	return ""
}

// writeTestdata writes the parsers' testdata, which lives with package
// rules.
func writeTestdata(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("rules", "testdata", name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
