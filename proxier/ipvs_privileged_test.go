package proxier

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/toolexec"
	"github.com/kpsim/kpsim/vm"
)

const ipvsNodeMain = "proxier-ipvs-test"

func init() {
	// Registered here so the file is self-contained; TestMain (main_test.go)
	// calls netns.Init after package init.
	netns.RegisterNodeMain(ipvsNodeMain, runIPVSNode)
}

// ipvsInput drives runIPVSNode.
type ipvsInput struct {
	Backend string `json:"backend"`
	// Probes per ClusterIP (0: no probes).
	Probes int `json:"probes"`
}

// ipvsOutput is what runIPVSNode reports.
type ipvsOutput struct {
	// Skip says why the guest cannot run IPVS mode (the test skips).
	Skip  string `json:"skip,omitempty"`
	Tools Tools  `json:"tools"`
	// FirstSync is the first sync; FirstSyncCalls its kernel calls by kind.
	FirstSync      Sync                     `json:"firstSync"`
	FirstSyncCalls map[string]KernelCallSum `json:"firstSyncCalls"`
	// AllCalls are all kernel calls by kind, from Start to the read.
	AllCalls    map[string]KernelCallSum `json:"allCalls"`
	CallMethods map[string]int           `json:"callMethods"`
	Counts      map[string]int           `json:"counts"`
	Services    []rules.IPVSService      `json:"services"`
	Listing     string                   `json:"listing"`
	IPSetSave   string                   `json:"ipsetSave"`
	Syncs       []Sync                   `json:"syncs"`
	Totals      Totals                   `json:"totals"`
	Probes      []netns.ProbeResult      `json:"probes"`
	Endpoints   map[netip.Addr][]netip.Addr
}

// runIPVSNode runs in the (guest) node process: the IPVS proxier on the
// test objects, its dataplane after the first sync, then probes.
func runIPVSNode(ctx context.Context, env *netns.NodeEnv) error {
	quietKlog()
	var in ipvsInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	// IPVS mode's filter rules jump to REJECT (KUBE-IPVS-FILTER,
	// KUBE-PROXY-FIREWALL): iptables-restore fails every sync without the
	// target, which the guest cannot load unless its initramfs has it.
	if targets, err := os.ReadFile("/proc/net/ip_tables_targets"); err != nil || !strings.Contains("\n"+string(targets), "\nREJECT\n") {
		return env.SetResult(ipvsOutput{Skip: fmt.Sprintf("the kernel has no iptables REJECT target (module ipt_REJECT not in the VM's module list, vm/initramfs.go vmModules); IPVS mode's iptables-restore fails every sync without it (/proc/net/ip_tables_targets: %q, %v)", targets, err)})
	}
	objs, eps := testObjects(env.NodeIP)
	client := fake.NewClientset(objs...)
	p, err := startTestProxier(ctx, env, proxierInput{Mode: ModeIPVS, Backend: in.Backend}, client)
	if err != nil {
		return err
	}
	out := ipvsOutput{Tools: p.Tools(), Endpoints: eps, CallMethods: map[string]int{}}
	// The first sync, as recorded (every IPVS sync counts as full); its
	// calls are those before it ended.
	out.FirstSync = p.Syncs()[0]
	out.FirstSyncCalls = SumKernelCalls(p.KernelCalls(), time.Time{}, out.FirstSync.End)
	d, err := rules.ReadIPVS(ctx, &toolexec.Exec{}, in.Backend)
	if err != nil {
		return err
	}
	version, _, _ := strings.Cut(string(d.ProcIPVS), "\n")
	out.Counts, out.Services = d.Counts(), d.Services
	out.Listing, out.IPSetSave = string(rules.FormatIPVSAdm(version, d.Services)), string(d.IPSetSave)
	calls := p.KernelCalls()
	out.AllCalls = SumKernelCalls(calls, time.Time{}, time.Time{})
	for _, c := range calls {
		out.CallMethods[c.Method]++
	}

	if in.Probes > 0 {
		if out.Probes, err = probeTestServices(ctx, env, eps, in.Probes); err != nil {
			return err
		}
	}
	out.Syncs, out.Totals = p.Syncs(), p.Totals()
	return env.SetResult(out)
}

// requireIPVSVM skips unless a VM node can run here (root, qemu,
// busybox-static, the Debian kernel package), saying why.
func requireIPVSVM(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the guest node's setup is the same as on a host)")
	}
	for _, b := range []string{"qemu-system-x86_64", "busybox", "ipset", "iptables-legacy-save"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("the IPVS VM test needs %s: %v", b, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := vm.EnsureKernel(ctx, ""); err != nil {
		t.Skipf("no kernel for the VM: %v", err)
	}
}

// TestPrivilegedIPVS runs the upstream IPVS proxier (legacy iptables
// backend) in a VM node on 3 Services x 3 endpoints, checks the IPVS
// table, the ipsets and the kernel call record, and probes every ClusterIP
// from a client pod: IPVS rr gives every endpoint exactly count/M
// connections (each probe is a new connection from its own source port).
func TestPrivilegedIPVS(t *testing.T) {
	requireIPVSVM(t)
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var console, stderr bytes.Buffer
	n, err := vm.Start(ctx, vm.Options{Name: ipvsNodeMain, Console: &console, Stderr: &stderr, Stdout: &stderr})
	if err != nil {
		if strings.Contains(err.Error(), "VM runner") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Kill(); _, _ = n.Wait() })
	const probes = 3 * testEndpoints * 4 // a multiple of the endpoint count
	if err := n.Send(ipvsInput{Backend: BackendLegacy, Probes: probes}); err != nil {
		t.Fatal(err)
	}
	res, err := n.Wait()
	if err != nil {
		t.Fatalf("VM node: %v\nnode stderr:\n%s", err, lastLines(stderr.String(), 40))
	}
	var out ipvsOutput
	if err := res.Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Skip != "" {
		t.Skip(out.Skip)
	}
	vm := res.VM
	t.Logf("VM: accel=%s (%s) kernel=%s boot %.2fs total %.2fs", vm.Accel, vm.AccelNote, vm.KernelVersion, vm.BootSeconds, vm.TotalSeconds)
	t.Logf("tools: %+v", out.Tools)
	t.Logf("first sync: %v (merged %d)", out.FirstSync.Duration, out.FirstSync.Merged)
	for _, k := range []string{KernelKindIPVS, KernelKindIPSet, KernelKindIPTables} {
		f, a := out.FirstSyncCalls[k], out.AllCalls[k]
		t.Logf("kernel calls %-8s first sync: %3d calls %v; from Start: %3d calls %v, %d errors", k, f.Calls, f.Duration, a.Calls, a.Duration, a.Errors)
	}
	t.Logf("methods: %v", sortedCounts(out.CallMethods))
	t.Logf("counts: %v", sortedCounts(out.Counts))
	t.Logf("syncs: %d, %.3fs in kube-proxy's histogram", out.Totals.SyncCount, out.Totals.SyncSeconds)

	checkIPVSDataplane(t, out)
	checkRoundRobin(t, out, probes)
	if t.Failed() {
		t.Logf("ipvsadm -Ln:\n%s\nipset save:\n%s", out.Listing, out.IPSetSave)
		t.Logf("console tail:\n%s", lastLines(console.String(), 40))
	}
}

func checkIPVSDataplane(t *testing.T, out ipvsOutput) {
	t.Helper()
	// Every Service has a virtual server on its ClusterIP:port with its
	// endpoints as real servers. IPVS mode also binds the node IP for
	// NodePorts and none here: ClusterIP Services only.
	if got := out.Counts["ipvs/virtualServers"]; got != testServices {
		t.Errorf("ipvs/virtualServers = %d, want %d", got, testServices)
	}
	if got := out.Counts["ipvs/realServers"]; got != testServices*testEndpoints {
		t.Errorf("ipvs/realServers = %d, want %d", got, testServices*testEndpoints)
	}
	for i := range testServices {
		vip := netip.AddrPortFrom(testClusterIP(i), testPort)
		var svc *rules.IPVSService
		for j := range out.Services {
			if out.Services[j].Protocol == "TCP" && out.Services[j].Address == vip {
				svc = &out.Services[j]
			}
		}
		if svc == nil {
			t.Errorf("no virtual server TCP %s", vip)
			continue
		}
		if svc.Scheduler != "rr" {
			t.Errorf("%s: scheduler %q, want rr (kube-proxy's default)", vip, svc.Scheduler)
		}
		var got, want []string
		for _, d := range svc.Dests {
			got = append(got, fmt.Sprintf("%s %s %d", d.Address, d.Forward, d.Weight))
		}
		for _, ep := range out.Endpoints[testClusterIP(i)] {
			want = append(want, fmt.Sprintf("%s Masq 1", netip.AddrPortFrom(ep, testTargetPort)))
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: real servers %v, want %v", vip, got, want)
		}
	}
	// KUBE-CLUSTER-IP holds every ClusterIP,tcp:port and KUBE-IPVS-IPS
	// every address bound to kube-ipvs0; KUBE-LOOP-BACK (hairpin) only
	// endpoints on this node, and the fixture's endpoints have no node.
	for set, want := range map[string]int{"KUBE-CLUSTER-IP": testServices, "KUBE-IPVS-IPS": testServices, "KUBE-LOOP-BACK": 0} {
		if got := out.Counts["ipset/set/"+set]; got != want {
			t.Errorf("%s members = %d, want %d", set, got, want)
		}
	}
	if got, want := out.Counts["ipset/members"], 2*testServices; got != want {
		t.Errorf("ipset/members = %d, want %d", got, want)
	}
	if out.Counts["iptables/nat"] == 0 {
		t.Errorf("no iptables nat rules in IPVS mode: %v", out.Counts)
	}
	for _, m := range []string{"ipvs.AddVirtualServer", "ipvs.AddRealServer", "ipset.AddEntry", "RestoreAll"} {
		if out.CallMethods[m] == 0 {
			t.Errorf("no %s call recorded: %v", m, out.CallMethods)
		}
	}
	if out.AllCalls[KernelKindIPVS].Calls == 0 || out.AllCalls[KernelKindIPSet].Calls == 0 {
		t.Errorf("kernel calls by kind %v: want ipvs and ipset calls", out.AllCalls)
	}
	if out.Totals.SyncCount == 0 || out.FirstSync.Duration <= 0 || !out.FirstSync.Full {
		t.Errorf("no sync recorded: %+v", out.Totals)
	}
}

func checkRoundRobin(t *testing.T, out ipvsOutput, probes int) {
	t.Helper()
	if len(out.Probes) != testServices {
		t.Fatalf("%d probe results, want %d", len(out.Probes), testServices)
	}
	for i, r := range out.Probes {
		eps := out.Endpoints[testClusterIP(i)]
		if r.OK != probes {
			t.Errorf("%s: %d/%d connections answered; failures %v %v", r.Spec.Target, r.OK, probes, r.Failures, r.FailureSample)
		}
		want := probes / len(eps)
		var tally []string
		for _, ep := range eps {
			got := 0
			if c := r.Endpoints[netip.AddrPortFrom(ep, testTargetPort)]; c != nil {
				got = c.Count
			}
			tally = append(tally, fmt.Sprintf("%s=%d", ep, got))
			if got != want {
				t.Errorf("%s: endpoint %s got %d connections, want exactly %d (rr over %d)", r.Spec.Target, ep, got, want, len(eps))
			}
		}
		if len(r.Endpoints) != len(eps) {
			t.Errorf("%s: answered by %d addresses, want %d: %v", r.Spec.Target, len(r.Endpoints), len(eps), r.Endpoints)
		}
		t.Logf("%s: %s (%d probes, %.0f conn/s)", r.Spec.Target, strings.Join(tally, " "), r.Sent, r.ConnectionsPerSecond)
	}
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
