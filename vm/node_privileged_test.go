package vm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kpsim/kpsim/netns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

const vmProbeNodeMain = "test-vm-probe"

func init() {
	// Registered here (not in TestMain) so this file stays self-contained;
	// package init runs before TestMain calls Init.
	netns.RegisterNodeMain(vmProbeNodeMain, runVMProbeNode)
}

// vmProbeInput asks the guest node for one IPVS virtual server with one
// real server.
type vmProbeInput struct {
	VIP      string `json:"vip"`
	Port     uint16 `json:"port"`
	Real     string `json:"real"`
	RealPort uint16 `json:"realPort"`
}

type vmProbeOutput struct {
	Uname string `json:"uname"`
	// IPVS is /proc/net/ip_vs after the service and destination were
	// added through generic netlink.
	IPVS string `json:"ipvs"`
	// Dummy is the type of kube-ipvs0 as read back ("dummy").
	Dummy string `json:"dummy"`
	// NodeInterface exists and has the node IP.
	NodeAddrs []string `json:"nodeAddrs"`
}

func runVMProbeNode(ctx context.Context, env *netns.NodeEnv) error {
	var in vmProbeInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	var out vmProbeOutput
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	out.Uname = string(bytes.TrimRight(u.Release[:], "\x00"))

	// The whole process is in the node namespace (unshare before exec),
	// so netlink sockets opened here act there.
	if err := ipvsAddService(net.ParseIP(in.VIP), in.Port, "rr"); err != nil {
		return fmt.Errorf("add IPVS service: %w", err)
	}
	if err := ipvsAddDest(net.ParseIP(in.VIP), in.Port, net.ParseIP(in.Real), in.RealPort); err != nil {
		return fmt.Errorf("add IPVS destination: %w", err)
	}
	b, err := os.ReadFile("/proc/net/ip_vs")
	if err != nil {
		return err
	}
	out.IPVS = string(b)

	h, err := netlink.NewHandleAt(env.NodeNS(), unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kube-ipvs0"}}); err != nil {
		return fmt.Errorf("create dummy kube-ipvs0: %w", err)
	}
	l, err := h.LinkByName("kube-ipvs0")
	if err != nil {
		return err
	}
	out.Dummy = l.Type()
	node, err := h.LinkByName(env.NodeInterface)
	if err != nil {
		return err
	}
	addrs, err := h.AddrList(node, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		out.NodeAddrs = append(out.NodeAddrs, a.IPNet.String())
	}
	return env.SetResult(out)
}

// A minimal IPVS generic netlink client (include/uapi/linux/ip_vs.h), so
// the test needs neither ipvsadm nor another module.
const (
	ipvsCmdNewService = 1
	ipvsCmdNewDest    = 5
	ipvsAttrService   = 1
	ipvsAttrDest      = 2
	ipvsSvcAF         = 1
	ipvsSvcProtocol   = 2
	ipvsSvcAddr       = 3
	ipvsSvcPort       = 4
	ipvsSvcSched      = 6
	ipvsSvcFlags      = 7
	ipvsSvcTimeout    = 8
	ipvsSvcNetmask    = 9
	ipvsDestAddr      = 1
	ipvsDestPort      = 2
	ipvsDestFwd       = 3
	ipvsDestWeight    = 4
	ipvsDestUThresh   = 5
	ipvsDestLThresh   = 6
)

func ipvsRequest(cmd uint8, attrs ...*nl.RtAttr) error {
	fam, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		return fmt.Errorf("generic netlink family IPVS (ip_vs loaded?): %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_ACK)
	req.AddData(&nl.Genlmsg{Command: cmd, Version: 1})
	for _, a := range attrs {
		req.AddData(a)
	}
	_, err = req.Execute(unix.NETLINK_GENERIC, 0)
	return err
}

func be16(v uint16) []byte {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, v)
	return b
}

func ipvsServiceAttr(vip net.IP, port uint16, full bool, sched string) *nl.RtAttr {
	svc := nl.NewRtAttr(ipvsAttrService|unix.NLA_F_NESTED, nil)
	svc.AddRtAttr(ipvsSvcAF, nl.Uint16Attr(unix.AF_INET))
	svc.AddRtAttr(ipvsSvcProtocol, nl.Uint16Attr(unix.IPPROTO_TCP))
	svc.AddRtAttr(ipvsSvcAddr, vip.To4())
	svc.AddRtAttr(ipvsSvcPort, be16(port))
	if full {
		svc.AddRtAttr(ipvsSvcSched, nl.ZeroTerminated(sched))
		svc.AddRtAttr(ipvsSvcFlags, make([]byte, 8)) // flags, mask
		svc.AddRtAttr(ipvsSvcTimeout, nl.Uint32Attr(0))
		svc.AddRtAttr(ipvsSvcNetmask, nl.Uint32Attr(0xffffffff))
	}
	return svc
}

func ipvsAddService(vip net.IP, port uint16, sched string) error {
	return ipvsRequest(ipvsCmdNewService, ipvsServiceAttr(vip, port, true, sched))
}

func ipvsAddDest(vip net.IP, port uint16, real net.IP, realPort uint16) error {
	dst := nl.NewRtAttr(ipvsAttrDest|unix.NLA_F_NESTED, nil)
	dst.AddRtAttr(ipvsDestAddr, real.To4())
	dst.AddRtAttr(ipvsDestPort, be16(realPort))
	dst.AddRtAttr(ipvsDestFwd, nl.Uint32Attr(0)) // masquerade
	dst.AddRtAttr(ipvsDestWeight, nl.Uint32Attr(1))
	dst.AddRtAttr(ipvsDestUThresh, nl.Uint32Attr(0))
	dst.AddRtAttr(ipvsDestLThresh, nl.Uint32Attr(0))
	return ipvsRequest(ipvsCmdNewDest, ipvsServiceAttr(vip, port, false, ""), dst)
}

// requireVM skips unless a VM node can run here, saying why; it may
// download the kernel package (apt-get download, never installed).
func requireVM(t *testing.T) *Kernel {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the guest node's setup is the same as on a host; qemu itself does not)")
	}
	if _, _, err := vmTools(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k, err := EnsureKernel(ctx, "")
	if err != nil {
		t.Skipf("no kernel for the VM: %v", err)
	}
	return k
}

func TestPrivilegedVMNodeIPVS(t *testing.T) {
	k := requireVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var console, stderr bytes.Buffer
	n, err := Start(ctx, Options{Name: vmProbeNodeMain, Console: &console, Stderr: &stderr, Stdout: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Kill(); _, _ = n.Wait() })
	workDir := n.Info().WorkDir
	if !strings.HasPrefix(workDir, os.TempDir()+"/"+netns.Prefix) {
		t.Errorf("work dir %s is not $TMPDIR/kpsim-*", workDir)
	}
	// While the run lives, its work dir is not a leftover.
	if left, err := netns.Leftovers(n.RunID()); err != nil || len(left) != 0 {
		t.Errorf("netns.Leftovers(%s) of a live VM = %v, %v; want none", n.RunID(), left, err)
	}
	in := vmProbeInput{VIP: "10.96.0.1", Port: 80, Real: "10.244.0.1", RealPort: 8080}
	if err := n.Send(in); err != nil {
		t.Fatal(err)
	}
	res, err := n.Wait()
	if err != nil {
		t.Fatalf("VM node: %v\nnode stderr:\n%s", err, stderr.String())
	}
	if err := n.Send(in); err == nil {
		t.Error("Send after boot: want an error")
	}
	var out vmProbeOutput
	if err := res.Decode(&out); err != nil {
		t.Fatal(err)
	}
	vm := res.VM
	t.Logf("VM: accel=%s (%s) kernel=%s deb=%.1f MB initramfs=%.1f MB modules=%d missing tools=%v",
		vm.Accel, vm.AccelNote, vm.KernelVersion, float64(vm.KernelDebBytes)/1e6, float64(vm.InitramfsBytes)/1e6, len(vm.Modules), vm.MissingTools)
	t.Logf("VM times: prepare %.2fs, qemu->init %.2fs, ->modules %.2fs, ->node start %.2fs, total %.2fs",
		vm.PrepareSeconds, vm.KernelSeconds, vm.ModulesSeconds, vm.BootSeconds, vm.TotalSeconds)

	if out.Uname != k.Version || vm.KernelVersion != k.Version {
		t.Errorf("uname -r in the guest = %q, Info.KernelVersion = %q; want %q", out.Uname, vm.KernelVersion, k.Version)
	}
	if vm.Accel != "kvm" && vm.Accel != "tcg" {
		t.Errorf("accel = %q, want kvm or tcg", vm.Accel)
	}
	// 10.96.0.1:80 -> 0A600001:0050, 10.244.0.1:8080 -> 0AF40001:1F90.
	for _, want := range []string{"TCP  0A600001:0050 rr", "-> 0AF40001:1F90"} {
		if !strings.Contains(out.IPVS, want) {
			t.Errorf("/proc/net/ip_vs lacks %q:\n%s", want, out.IPVS)
		}
	}
	if out.Dummy != "dummy" {
		t.Errorf("kube-ipvs0 type = %q, want dummy", out.Dummy)
	}
	if want := netns.DefaultNodeIP.String(); len(out.NodeAddrs) != 1 || out.NodeAddrs[0] != want {
		t.Errorf("node addresses = %v, want [%s]", out.NodeAddrs, want)
	}
	if vm.BootSeconds <= 0 || vm.TotalSeconds < vm.BootSeconds {
		t.Errorf("boot %.2fs, total %.2fs: want 0 < boot <= total", vm.BootSeconds, vm.TotalSeconds)
	}
	var kinds []string
	for ev := range n.Events() {
		kinds = append(kinds, ev.Kind)
	}
	if diff := cmp.Diff([]string{netns.EventNodeReady}, kinds); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if vm.NodeExitCode != 0 {
		t.Errorf("guest node exit code = %d", vm.NodeExitCode)
	}
	if _, err := os.Stat(workDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s still there after Wait: %v", workDir, err)
	}
	if t.Failed() {
		t.Logf("console:\n%s", console.String())
	}
}

// A node main that fails must fail the VM with its error; the VM ends
// normally.
// A guest program that is not a node (here /bin/true as the "kpsim"
// binary) leaves no result: the error says so and shows the console.
func TestPrivilegedVMNoResult(t *testing.T) {
	requireVM(t)
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n, err := Start(ctx, Options{Name: vmProbeNodeMain, Kpsim: "/bin/true", Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.Wait()
	if err == nil {
		t.Fatal("Wait: want an error, the guest wrote no result")
	}
	for _, want := range []string{"ended without a result", "console tail", vmMarker + "node-exit 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if res.VM.Accel != "tcg" || res.VM.AccelNote != "" {
		t.Errorf("accel = %q (%q), want tcg as asked", res.VM.Accel, res.VM.AccelNote)
	}
}

func TestPrivilegedVMNodeError(t *testing.T) {
	requireVM(t)
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n, err := Start(ctx, Options{Name: vmProbeNodeMain, Stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	// No input: Recv returns io.EOF, which the node main returns.
	_, err = n.Wait()
	if err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("Wait error = %v, want the node main's EOF", err)
	}
}

// EnsureKernel from an empty cache downloads and unpacks the package, and a
// second call finds it without apt. Opt in with KPSIM_TEST_KERNEL_FETCH=1
// (it downloads about 27 MB).
func TestPrivilegedVMEnsureKernelFresh(t *testing.T) {
	if os.Getenv("KPSIM_TEST_KERNEL_FETCH") != "1" {
		t.Skip("downloads the kernel package; set KPSIM_TEST_KERNEL_FETCH=1")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skipf("needs apt-get: %v", err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k, err := EnsureKernel(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Package, "linux-image-") || k.DebBytes == 0 || !strings.HasSuffix(k.Vmlinuz, "vmlinuz-"+k.Version) {
		t.Errorf("kernel = %+v", k)
	}
	t.Setenv("PATH", t.TempDir()) // no apt: must come from the cache
	k2, err := EnsureKernel(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if *k2 != *k {
		t.Errorf("second EnsureKernel = %+v, want %+v", k2, k)
	}
	t.Logf("kernel %s: .deb %.1f MB", k.Version, float64(k.DebBytes)/1e6)
}

// markerWriter closes seen when a console line starts with the marker.
type markerWriter struct {
	marker string
	seen   chan struct{}
	once   sync.Once
}

func (w *markerWriter) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), w.marker) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Killing a booting VM ends qemu, and its work dir goes away.
func TestPrivilegedVMKill(t *testing.T) {
	requireVM(t)
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := &markerWriter{marker: vmMarker + "init", seen: make(chan struct{})}
	n, err := Start(ctx, Options{Name: vmProbeNodeMain, Console: w, Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	workDir := n.Info().WorkDir
	if err := n.CloseInput(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
	case <-n.Done():
		t.Fatalf("VM ended before /init ran: %v", n.Info())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	res, err := n.Wait()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Wait after Kill: %v, want killed", err)
	}
	if res.ProcessState != nil && res.ProcessState.Success() {
		t.Errorf("qemu exited successfully after Kill")
	}
	if _, err := os.Stat(workDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s still there: %v", workDir, err)
	}
}
