package vm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The guest's root file system is an initramfs: a newc cpio archive the
// kernel unpacks into a tmpfs. It holds a static busybox (the shell and
// the small tools /init needs), the kernel modules the proxiers use, the
// host's iptables, nft and ipset binaries with their shared libraries, the
// kpsim binary and /init. A second, small cpio with the run's input is
// appended per run (the kernel unpacks concatenated archives in order).

// vmModules are the modules loaded in the guest, with their dependencies
// resolved from the modules' own .modinfo (the Debian package ships no
// modules.dep; depmod runs at install time). Optional ones may be missing
// from a kernel.
var vmModules = []vmModule{
	// Output disk.
	{name: "virtio_pci"}, {name: "virtio_blk"},
	// Links.
	{name: "veth"}, {name: "dummy", args: "numdummies=0"},
	{name: "br_netfilter", optional: true},
	// Conntrack and NAT.
	{name: "nf_conntrack"}, {name: "nf_nat"}, {name: "nf_conntrack_netlink"},
	// iptables (legacy) and the matches and targets kube-proxy writes.
	{name: "ip_tables"}, {name: "iptable_nat"}, {name: "iptable_filter"}, {name: "iptable_mangle"}, {name: "iptable_raw"},
	{name: "ip6_tables"}, {name: "ip6table_nat"}, {name: "ip6table_filter"}, {name: "ip6table_mangle"}, {name: "ip6table_raw"},
	{name: "xt_comment"}, {name: "xt_mark"}, {name: "xt_conntrack"}, {name: "xt_statistic"}, {name: "xt_addrtype"},
	{name: "xt_multiport"}, {name: "xt_MASQUERADE"}, {name: "xt_set"}, {name: "xt_physdev", optional: true},
	{name: "xt_tcpudp"}, {name: "xt_nat"}, {name: "xt_REDIRECT"}, {name: "ipt_REJECT"}, {name: "ip6t_REJECT"}, {name: "xt_recent"}, {name: "xt_limit"},
	{name: "xt_state"}, {name: "xt_CT"}, {name: "xt_NFLOG", optional: true}, {name: "xt_ipvs", optional: true},
	// nftables (nftables mode, and iptables-nft through nft_compat).
	{name: "nf_tables"}, {name: "nft_compat"}, {name: "nft_ct"}, {name: "nft_nat"}, {name: "nft_masq"},
	{name: "nft_chain_nat"}, {name: "nft_redir"}, {name: "nft_fib_inet"}, {name: "nft_fib_ipv4"}, {name: "nft_fib_ipv6"},
	{name: "nft_numgen"}, {name: "nft_hash"}, {name: "nft_limit"}, {name: "nft_reject_inet"}, {name: "nft_reject_ipv4"},
	{name: "nft_reject_ipv6"}, {name: "nft_objref", optional: true}, {name: "nft_log", optional: true},
	// ipset.
	{name: "ip_set"}, {name: "ip_set_hash_ip"}, {name: "ip_set_hash_ipport"}, {name: "ip_set_hash_ipportip"},
	{name: "ip_set_hash_ipportnet"}, {name: "ip_set_hash_net"}, {name: "ip_set_hash_netport", optional: true},
	{name: "ip_set_bitmap_port"},
	// IPVS and its schedulers.
	{name: "ip_vs"}, {name: "ip_vs_rr"}, {name: "ip_vs_wrr"}, {name: "ip_vs_sh"}, {name: "ip_vs_lc"},
	{name: "ip_vs_wlc", optional: true}, {name: "ip_vs_sed", optional: true}, {name: "ip_vs_nq", optional: true},
	{name: "ip_vs_mh", optional: true},
}

type vmModule struct {
	name     string
	args     string
	optional bool
}

// vmHostTools are copied from the host with their libraries when present.
var vmHostTools = []string{
	"iptables", "iptables-save", "iptables-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore",
	"iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore",
	"ip6tables-legacy", "ip6tables-legacy-save", "ip6tables-legacy-restore",
	"iptables-nft", "iptables-nft-save", "iptables-nft-restore",
	"ip6tables-nft", "ip6tables-nft-save", "ip6tables-nft-restore",
	"nft", "ipset", "conntrack",
}

// Paths inside the guest.
const (
	guestKpsim    = "/kpsim/kpsim"
	guestRunDir   = "/kpsim/run" // the per-run cpio
	guestModList  = "/kpsim/modules.list"
	guestLibPath  = "/usr/lib/x86_64-linux-gnu:/usr/lib64:/usr/lib"
	guestInitPath = "/init"
)

// initramfsSpec is what goes into the base initramfs.
type initramfsSpec struct {
	Kernel  *Kernel
	Busybox string // host path of a static busybox
	Kpsim   string // host path of the binary the guest runs as the node
	// Tools are host commands to copy (missing ones are skipped and
	// listed in initramfsInfo.MissingTools).
	Tools []string
	// Modules to load in the guest.
	Modules []vmModule
	// Init is the /init script.
	Init string
}

type initramfsInfo struct {
	Bytes        int64
	Modules      []string // load order
	MissingTools []string
	Files        int
}

// buildInitramfs writes the gzip-compressed base initramfs to w.
func buildInitramfs(w io.Writer, spec initramfsSpec) (initramfsInfo, error) {
	var info initramfsInfo
	cw := &countWriter{w: w}
	zw, err := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	if err != nil {
		return info, err
	}
	b := newRootfsBuilder(zw)

	for _, d := range []string{"/dev", "/proc", "/sys", "/tmp", "/run", "/out", "/etc", "/kpsim", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/var/run"} {
		b.mkdirAll(d)
	}
	// Merged /usr: every host path is mapped below /usr (guestPath).
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		b.symlink("/"+l, "usr/"+l)
	}
	// The kernel opens /dev/console for /init before devtmpfs is mounted.
	b.charDev("/dev/console", 0o600, 5, 1)
	b.charDev("/dev/null", 0o666, 1, 3)

	// busybox and its applets.
	if err := b.file("/usr/bin/busybox", spec.Busybox, 0o755); err != nil {
		return info, err
	}
	applets, err := exec.Command(spec.Busybox, "--list-full").Output()
	if err != nil {
		return info, fmt.Errorf("%s --list-full: %w", spec.Busybox, err)
	}
	for _, a := range strings.Fields(string(applets)) {
		p := guestPath("/" + a)
		if p == "/usr/bin/busybox" || p == guestInitPath {
			continue
		}
		b.symlink(p, "/usr/bin/busybox")
	}

	// Host tools, their libraries and the xtables extensions they dlopen.
	var elfs []string
	for _, t := range spec.Tools {
		hp, err := exec.LookPath(t)
		if err != nil {
			info.MissingTools = append(info.MissingTools, t)
			continue
		}
		real, err := filepath.EvalSymlinks(hp)
		if err != nil {
			info.MissingTools = append(info.MissingTools, t)
			continue
		}
		if err := b.file(guestPath(real), real, 0o755); err != nil {
			return info, err
		}
		// Multi-call binaries (xtables-*-multi) dispatch on argv[0]: the
		// link keeps the tool's name.
		if gp := guestPath("/usr/sbin/" + t); gp != guestPath(real) {
			b.symlink(gp, guestPath(real))
		}
		elfs = append(elfs, real)
	}
	for _, dir := range libDirs {
		exts, _ := filepath.Glob(filepath.Join(dir, "xtables", "*.so"))
		for _, e := range exts {
			real, err := filepath.EvalSymlinks(e)
			if err != nil {
				continue
			}
			if err := b.file(guestPath(e), real, 0o755); err != nil {
				return info, err
			}
			elfs = append(elfs, real)
		}
	}
	if err := b.file(guestKpsim, spec.Kpsim, 0o755); err != nil {
		return info, err
	}
	elfs = append(elfs, spec.Kpsim)
	// The nft timer (proxier.ExecTimerName) goes beside kpsim, where the
	// node looks for it; static, so it brings no libraries.
	if timer := filepath.Join(filepath.Dir(spec.Kpsim), "kpsim-exectimer"); fileExists(timer) {
		if err := b.file(path.Join(path.Dir(guestKpsim), "kpsim-exectimer"), timer, 0o755); err != nil {
			return info, err
		}
	}
	libs, err := sharedLibraries(elfs)
	if err != nil {
		return info, err
	}
	for _, l := range libs {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return info, fmt.Errorf("library %s: %w", l, err)
		}
		if err := b.file(guestPath(l), real, 0o755); err != nil {
			return info, err
		}
	}
	for _, f := range []string{"/etc/protocols", "/etc/services", "/etc/ld.so.cache", "/etc/nsswitch.conf"} {
		if fileExists(f) {
			if err := b.file(f, f, 0o644); err != nil {
				return info, err
			}
		}
	}
	b.bytes("/etc/passwd", []byte("root:x:0:0:root:/:/bin/sh\n"), 0o644)
	b.bytes("/etc/group", []byte("root:x:0:\n"), 0o644)

	// Kernel modules, in load order.
	order, err := resolveModules(spec.Kernel.ModulesDir, spec.Modules)
	if err != nil {
		return info, err
	}
	var list strings.Builder
	for _, m := range order {
		gp := path.Join("/usr/lib/modules", spec.Kernel.Version, m.rel)
		if err := b.file(gp, filepath.Join(spec.Kernel.ModulesDir, m.rel), 0o644); err != nil {
			return info, err
		}
		fmt.Fprintf(&list, "%s %s\n", gp, m.args)
		info.Modules = append(info.Modules, m.name)
	}
	b.bytes(guestModList, []byte(list.String()), 0o644)
	b.bytes(guestInitPath, []byte(spec.Init), 0o755)

	if err := b.close(); err != nil {
		return info, err
	}
	if err := zw.Close(); err != nil {
		return info, fmt.Errorf("compress initramfs: %w", err)
	}
	info.Bytes = cw.n
	info.Files = b.w.files
	return info, b.err
}

// libDirs are searched for shared libraries (DT_NEEDED), in this order.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// guestPath maps a host path into the guest's merged-/usr layout.
func guestPath(p string) string {
	p = path.Clean(p)
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return "/usr" + p
		}
	}
	return p
}

// sharedLibraries returns the interpreters and libraries (transitively) the
// given ELF files need, as host paths; static files need none. It reads
// the files' dynamic sections instead of running ldd.
func sharedLibraries(files []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	queue := append([]string(nil), files...)
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		ef, err := elf.Open(f)
		if err != nil {
			return nil, fmt.Errorf("read ELF %s: %w", f, err)
		}
		interp, dynamic, err := elfInterp(f)
		if err != nil {
			ef.Close()
			return nil, err
		}
		if dynamic && !seen[interp] {
			seen[interp] = true
			out = append(out, interp)
		}
		needed, err := ef.ImportedLibraries()
		ef.Close()
		if err != nil {
			return nil, fmt.Errorf("read dynamic section of %s: %w", f, err)
		}
		for _, n := range needed {
			lib := ""
			for _, d := range libDirs {
				if p := filepath.Join(d, n); fileExists(p) {
					lib = p
					break
				}
			}
			if lib == "" {
				return nil, fmt.Errorf("%s needs %s, not found in %s", f, n, strings.Join(libDirs, ", "))
			}
			if !seen[lib] {
				seen[lib] = true
				out = append(out, lib)
				queue = append(queue, lib)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

type resolvedModule struct {
	name, rel, args string
}

// resolveModules orders the wanted modules and their dependencies so each
// comes after what it depends on. Dependencies are read from each module's
// .modinfo section ("depends=a,b"), which is what depmod reads too.
func resolveModules(modulesDir string, want []vmModule) ([]resolvedModule, error) {
	index := map[string]string{} // module name (with _) -> relative path
	root := filepath.Join(modulesDir, "kernel")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			rel, _ := filepath.Rel(modulesDir, p)
			index[modName(filepath.Base(p))] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules in %s: %w", modulesDir, err)
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modulesDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(path.Base(l))] = true
		}
	}

	var order []resolvedModule
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, args string, chain []string) error
	visit = func(name, args string, chain []string) error {
		switch state[name] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("module dependency cycle: %s", strings.Join(append(chain, name), " -> "))
		}
		rel, ok := index[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("module %s (needed by %s) not found in %s: %w", name, strings.Join(chain, " -> "), modulesDir, os.ErrNotExist)
		}
		state[name] = 1
		deps, err := moduleDepends(filepath.Join(modulesDir, rel))
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, "", append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, resolvedModule{name: name, rel: rel, args: args})
		return nil
	}
	for _, m := range want {
		err := visit(modName(m.name), m.args, nil)
		if err != nil && !(m.optional && errors.Is(err, os.ErrNotExist)) {
			return nil, err
		}
	}
	return order, nil
}

// modName normalises a module or file name: no .ko suffix, '-' as '_'.
func modName(s string) string {
	s = strings.TrimSuffix(s, ".ko")
	return strings.ReplaceAll(s, "-", "_")
}

func moduleDepends(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", file, err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, nil
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("read .modinfo of %s: %w", file, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, modName(d))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// rootfsBuilder adds files to a cpio archive, creating parent directories
// once each.
type rootfsBuilder struct {
	w    *cpioWriter
	dirs map[string]bool
	have map[string]bool
	err  error
}

func newRootfsBuilder(w io.Writer) *rootfsBuilder {
	return &rootfsBuilder{w: newCPIOWriter(w), dirs: map[string]bool{"/": true}, have: map[string]bool{}}
}

func (b *rootfsBuilder) mkdirAll(p string) {
	p = path.Clean(p)
	if b.dirs[p] {
		return
	}
	b.mkdirAll(path.Dir(p))
	b.dirs[p] = true
	b.setErr(b.w.add(cpioEntry{name: p, mode: cpioDir | 0o755}, nil))
}

// claim reports whether p is new; the first entry for a path wins.
func (b *rootfsBuilder) claim(p string) bool {
	if b.have[p] || b.dirs[p] {
		return false
	}
	b.have[p] = true
	b.mkdirAll(path.Dir(p))
	return true
}

func (b *rootfsBuilder) symlink(p, target string) {
	if b.claim(p) {
		b.setErr(b.w.add(cpioEntry{name: p, mode: cpioSymlink | 0o777, size: int64(len(target))}, strings.NewReader(target)))
	}
}

func (b *rootfsBuilder) charDev(p string, perm uint32, major, minor uint32) {
	if b.claim(p) {
		b.setErr(b.w.add(cpioEntry{name: p, mode: cpioCharDev | perm, rdevMajor: major, rdevMinor: minor}, nil))
	}
}

func (b *rootfsBuilder) bytes(p string, data []byte, perm uint32) {
	if b.claim(p) {
		b.setErr(b.w.add(cpioEntry{name: p, mode: cpioRegular | perm, size: int64(len(data))}, bytes.NewReader(data)))
	}
}

func (b *rootfsBuilder) file(p, hostPath string, perm uint32) error {
	if !b.claim(p) {
		return nil
	}
	f, err := os.Open(hostPath)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := b.w.add(cpioEntry{name: p, mode: cpioRegular | perm, size: fi.Size()}, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return fmt.Errorf("initramfs: add %s as %s: %w", hostPath, p, err)
	}
	return nil
}

func (b *rootfsBuilder) setErr(err error) {
	if err != nil && b.err == nil {
		b.err = err
	}
}

func (b *rootfsBuilder) close() error {
	if b.err != nil {
		return b.err
	}
	return b.w.close()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
