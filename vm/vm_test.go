package vm

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kpsim/kpsim/netns"
)

// readCPIO parses a newc archive (test helper): name -> mode and data.
func readCPIO(t *testing.T, b []byte) map[string]cpioEntryData {
	t.Helper()
	out := map[string]cpioEntryData{}
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad cpio header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, rmaj, rmin, nameSize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		off += 110 + nameSize
		align()
		data := b[off : off+size]
		off += size
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = cpioEntryData{Mode: uint32(mode), Data: string(data), Rdev: fmt.Sprintf("%d:%d", rmaj, rmin)}
	}
}

type cpioEntryData struct {
	Mode uint32
	Data string
	Rdev string
}

func TestRootfsBuilderCPIO(t *testing.T) {
	host := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(host, []byte("hello, file"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	b := newRootfsBuilder(&buf)
	b.bytes("/a/b/c.txt", []byte("abc"), 0o644)
	b.bytes("/a/b/c.txt", []byte("second write loses"), 0o644)
	b.symlink("/bin", "usr/bin")
	b.charDev("/dev/console", 0o600, 5, 1)
	if err := b.file("/usr/bin/f", host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	dir := cpioEntryData{Mode: cpioDir | 0o755, Rdev: "0:0"}
	want := map[string]cpioEntryData{
		"a":           dir,
		"a/b":         dir,
		"a/b/c.txt":   {Mode: cpioRegular | 0o644, Data: "abc", Rdev: "0:0"},
		"bin":         {Mode: cpioSymlink | 0o777, Data: "usr/bin", Rdev: "0:0"},
		"dev":         dir,
		"dev/console": {Mode: cpioCharDev | 0o600, Rdev: "5:1"},
		"usr":         dir,
		"usr/bin":     dir,
		"usr/bin/f":   {Mode: cpioRegular | 0o755, Data: "hello, file", Rdev: "0:0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("archive (-want +got):\n%s", diff)
	}
}

func TestGuestPath(t *testing.T) {
	for in, want := range map[string]string{
		"/lib/x86_64-linux-gnu/libc.so.6": "/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib64/ld-linux-x86-64.so.2":     "/usr/lib64/ld-linux-x86-64.so.2",
		"/sbin/insmod":                    "/usr/sbin/insmod",
		"/bin":                            "/usr/bin",
		"/usr/sbin/nft":                   "/usr/sbin/nft",
		"/library/x":                      "/library/x",
		"/kpsim/kpsim":                    "/kpsim/kpsim",
	} {
		if got := guestPath(in); got != want {
			t.Errorf("guestPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGuestNodeSpec(t *testing.T) {
	cfg, err := netns.NodeConfig{RunID: "kpsim-0000abcd"}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := guestNodeSpec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// What /init's sed does with the guest's own namespace inodes.
	filled := strings.NewReplacer("@KPSIM_HOST_NETNS@", "4026531840", "@KPSIM_HOST_MNTNS@", "4026531841").Replace(spec)
	// The fields netns's node spec carries, as the node decodes them.
	type nodeSpec struct {
		Config    netns.NodeConfig `json:"config"`
		HostNetNS uint64           `json:"hostNetNS"`
		HostMntNS uint64           `json:"hostMntNS"`
		ParentPID int              `json:"parentPID"`
	}
	var got nodeSpec
	if err := json.Unmarshal([]byte(filled), &got); err != nil {
		t.Fatalf("filled spec %s: %v", filled, err)
	}
	want := nodeSpec{Config: cfg, HostNetNS: 4026531840, HostMntNS: 4026531841, ParentPID: 1}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netns.NodeConfig) bool { return fmt.Sprint(a) == fmt.Sprint(b) })); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

func TestReadOutputDisk(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"./exit": "0\n", "./output.jsonl": `{"type":"result"}` + "\n"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(t.TempDir(), "out.img")
	// The rest of the disk is zeros, as in a fresh sparse file.
	if err := os.WriteFile(disk, append(buf.Bytes(), make([]byte, 64<<10)...), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readOutputDisk(disk)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"exit": []byte("0\n"), "output.jsonl": []byte(`{"type":"result"}` + "\n")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestVMToolsMessage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := vmTools()
	if err == nil || !strings.Contains(err.Error(), vmToolsInstall) {
		t.Fatalf("vmTools with an empty PATH: %v; want the install command", err)
	}
}

func TestFindKernelMissing(t *testing.T) {
	_, err := FindKernel(t.TempDir())
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("FindKernel in an empty dir: %v, want ErrNotExist", err)
	}
}

// With a cached kernel, every module must come after its dependencies and
// all required modules must be there.
func TestResolveModulesCachedKernel(t *testing.T) {
	k, err := FindKernel(DefaultKernelCacheDir())
	if err != nil {
		t.Skipf("no cached kernel (run the privileged VM test once to fetch it): %v", err)
	}
	order, err := resolveModules(k.ModulesDir, vmModules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range order {
		if _, dup := pos[m.name]; dup {
			t.Errorf("module %s twice", m.name)
		}
		pos[m.name] = i
	}
	for _, m := range order {
		deps, err := moduleDepends(filepath.Join(k.ModulesDir, m.rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps {
			if p, ok := pos[d]; ok && p > pos[m.name] {
				t.Errorf("%s loads before its dependency %s", m.name, d)
			}
		}
	}
	for _, m := range vmModules {
		if _, ok := pos[modName(m.name)]; !ok && !m.optional {
			t.Errorf("required module %s missing", m.name)
		}
	}
	if a := order[pos["dummy"]].args; a != "numdummies=0" {
		t.Errorf("dummy args = %q", a)
	}
}

func TestQEMUArgs(t *testing.T) {
	k := &Kernel{Vmlinuz: "/k/vmlinuz"}
	for _, tc := range []struct {
		name               string
		m                  machine
		accel, cpu, append string
	}{
		{"tcg default", machine{accel: "tcg", memMiB: 1024, cpus: 2}, "tcg", DefaultTCGCPU, guestKernelArgs},
		{"tcg options", machine{accel: "tcg", cpu: "qemu64", tcgOpts: "tb-size=512", kargs: "init_on_alloc=0", memMiB: 1024, cpus: 2}, "tcg,tb-size=512", "qemu64", guestKernelArgs + " init_on_alloc=0"},
		{"kvm takes the host's CPU", machine{accel: "kvm", cpu: "qemu64", tcgOpts: "tb-size=512", memMiB: 256, cpus: 1}, "kvm", "host", guestKernelArgs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := qemuArgs(k, "/w/initrd.img", "", tc.m)
			got := map[string]string{}
			for i := 0; i+1 < len(args); i++ {
				if strings.HasPrefix(args[i], "-") {
					got[args[i]] = args[i+1]
				}
			}
			want := map[string]string{"-accel": tc.accel, "-cpu": tc.cpu, "-append": tc.append}
			for flag, v := range want {
				if got[flag] != v {
					t.Errorf("%s %q, want %q (args %q)", flag, got[flag], v, args)
				}
			}
			if tc.m.accelArg() != tc.accel || tc.m.cpuArg() != tc.cpu {
				t.Errorf("accelArg, cpuArg = %q, %q; want %q, %q", tc.m.accelArg(), tc.m.cpuArg(), tc.accel, tc.cpu)
			}
		})
	}
	// Program starts in the guest cost 3-4x more with address space
	// randomisation under TCG (guestKernelArgs).
	if !strings.Contains(guestKernelArgs, "norandmaps") {
		t.Errorf("guest kernel args %q lack norandmaps", guestKernelArgs)
	}
}

// The clock check reads the guest's uptime from /init's markers and the
// host's arrival times of the same markers.
func TestClockCheck(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	c := &vmConsole{marks: map[string]time.Time{}}
	c.marks["node-start"], c.marks["node-exit"] = t0, t0.Add(200*time.Second)
	c.args = map[string][]string{"node-start": {"6.50"}, "node-exit": {"0", "208.50"}}
	got := clockCheck(c.marks, c.args)
	if got == nil || got.GuestSeconds != 202 || got.HostSeconds != 200 || math.Abs(got.Ratio()-1.01) > 1e-9 {
		t.Errorf("clock check %+v, want 202 guest s over 200 host s (1.01)", got)
	}
	delete(c.args, "node-exit")
	if got := clockCheck(c.marks, c.args); got != nil {
		t.Errorf("clock check without the exit marker's uptime: %+v", got)
	}
}

// A guest kernel that reports a CPU stuck for minutes is hung: qemu is
// killed with that report rather than waited for; shorter lockups are
// left alone.
func TestHungGuestKilled(t *testing.T) {
	c := &vmConsole{marks: map[string]time.Time{}}
	c.checkHung("[  120.750766] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [exe:338]")
	select {
	case <-c.hungCh():
		t.Fatal("a 26 s lockup stopped the VM")
	default:
	}
	script := `echo "[  116.5] rcu: INFO: rcu_preempt self-detected stall on CPU"
echo "[  232.7] watchdog: BUG: soft lockup - CPU#0 stuck for 130s! [exe:338]"
exec sleep 60`
	start := time.Now()
	_, err := runQEMU(context.Background(), "/bin/sh", []string{"-c", script}, c, "", func(*os.Process) {})
	if err == nil || !strings.Contains(err.Error(), "the guest kernel hung") || !strings.Contains(err.Error(), "stuck for 130s") {
		t.Errorf("err %v, want the hang reported with its line", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v: the hung guest was waited for", d)
	}
}
