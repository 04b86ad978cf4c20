package vm

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kpsim/kpsim/netns"
)

// Options configure Start.
type Options struct {
	// Name of the node main registered with netns.RegisterNodeMain (in
	// the binary the guest runs, Kpsim).
	Name string
	// Config of the node.
	Config netns.NodeConfig
	// MemoryMiB of the guest; default 1024.
	MemoryMiB int
	// CPUs of the guest; default 2.
	CPUs int
	// KernelCacheDir holds the Debian kernel package; default
	// DefaultKernelCacheDir(). The kernel is downloaded there if missing.
	KernelCacheDir string
	// Accel is "kvm", "tcg" or "" (KVM when a probe boot works, else TCG).
	Accel string
	// CPU is qemu's -cpu model under TCG; default DefaultTCGCPU. Under
	// KVM the guest gets the host's CPU ("host").
	CPU string
	// TCGOptions are appended to -accel tcg (for example
	// "tb-size=512,thread=single"); empty leaves qemu's defaults.
	TCGOptions string
	// ExtraKernelArgs are appended to the guest kernel's command line
	// (guestKernelArgs), for measurements of what a boot option costs.
	ExtraKernelArgs string
	// Kpsim is the binary the guest runs as the node; default this
	// executable. Dynamically linked binaries get their libraries copied.
	Kpsim string
	// Stdout and Stderr receive the node's stdout and stderr once the VM
	// has ended; default os.Stderr for both.
	Stdout, Stderr io.Writer
	// Console, if set, receives the guest's serial console live (kernel
	// messages, /init's markers and the node's stderr).
	Console io.Writer
	// OutputDiskMiB is the size of the (sparse) output disk; default 1024.
	OutputDiskMiB int
	// KeepWorkDir keeps the work directory for debugging.
	KeepWorkDir bool
	// OutputDir, if set, receives the files the node wrote under
	// GuestFilesDir in the guest (dumps, saved state), once the VM ended.
	OutputDir string
}

// GuestFilesDir is where a node in a VM writes files meant for the host
// (Options.OutputDir).
const GuestFilesDir = "/out/files"

// Info describes how a VM node ran.
type Info struct {
	// Accel is the accelerator used: "kvm" or "tcg" (software
	// emulation, timings 10-35x slower than the host).
	Accel string `json:"accel"`
	// AccelNote says why KVM was not used, when it was not.
	AccelNote string `json:"accelNote,omitempty"`
	// QEMUAccel and QEMUCPU are the -accel and -cpu arguments qemu ran
	// with (program starts in the guest depend on both under TCG).
	QEMUAccel string `json:"qemuAccel,omitempty"`
	QEMUCPU   string `json:"qemuCPU,omitempty"`
	// KernelArgs is the guest kernel's command line (norandmaps: see
	// guestKernelArgs).
	KernelArgs     string `json:"kernelArgs,omitempty"`
	KernelPackage  string `json:"kernelPackage"`
	KernelVersion  string `json:"kernelVersion"`
	KernelDebBytes int64  `json:"kernelDebBytes"`
	// InitramfsBytes is the size of the compressed base initramfs.
	InitramfsBytes int64    `json:"initramfsBytes"`
	Modules        []string `json:"modules"`
	// MissingTools are host tools that were not found and so are not in
	// the guest.
	MissingTools []string `json:"missingTools,omitempty"`
	// PrepareSeconds: kernel lookup, initramfs build and accelerator
	// probe, before qemu starts.
	PrepareSeconds float64 `json:"prepareSeconds"`
	// KernelSeconds: qemu start to /init; ModulesSeconds: qemu start to
	// modules loaded; BootSeconds: qemu start to node start;
	// TotalSeconds: qemu start to qemu exit.
	KernelSeconds  float64 `json:"kernelSeconds"`
	ModulesSeconds float64 `json:"modulesSeconds"`
	BootSeconds    float64 `json:"bootSeconds"`
	TotalSeconds   float64 `json:"totalSeconds"`
	// Clock compares the guest's clock with the host's over the node's
	// life; nil when a marker is missing.
	Clock *ClockCheck `json:"clock,omitempty"`
	// NodeExitCode is the node process's exit code in the guest (-1 if it
	// never ran).
	NodeExitCode int    `json:"nodeExitCode"`
	WorkDir      string `json:"workDir"`
}

// ClockCheck is the node's life, from its start to its exit, as the
// guest's clock measured it (/proc/uptime in /init's markers) and as the
// host saw those markers arrive on the console. Every timing taken in the
// guest rests on its clocksource; a ratio off 1 by more than the console's
// latency says they are scaled by as much.
type ClockCheck struct {
	GuestSeconds float64 `json:"guestSeconds"`
	HostSeconds  float64 `json:"hostSeconds"`
}

// Ratio is guest seconds per host second.
func (c ClockCheck) Ratio() float64 {
	if c.HostSeconds <= 0 {
		return 0
	}
	return c.GuestSeconds / c.HostSeconds
}

// clockCheck compares the guest's uptime at the node-start and node-exit
// markers with the host's arrival times of those markers.
func clockCheck(marks map[string]time.Time, args map[string][]string) *ClockCheck {
	uptime := func(m string) (float64, bool) {
		a := args[m]
		if len(a) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(a[len(a)-1], 64)
		return v, err == nil
	}
	u0, ok0 := uptime("node-start")
	u1, ok1 := uptime("node-exit")
	t0, okt0 := marks["node-start"]
	t1, okt1 := marks["node-exit"]
	if !ok0 || !ok1 || !okt0 || !okt1 || !t1.After(t0) {
		return nil
	}
	return &ClockCheck{GuestSeconds: u1 - u0, HostSeconds: t1.Sub(t0).Seconds()}
}

// Result is a node result plus how the VM ran.
type Result struct {
	netns.NodeResult
	VM Info
}

// Node is the orchestrator's handle on a node running in a VM. It has the
// shape of NodeProcess with one difference: the guest has no live channel
// to the host, so Send buffers the input and the VM boots only when the
// input is complete, at the first call of CloseInput, Wait, WaitEvent or
// Events; events arrive live over the VM's console (and any the console
// missed when the VM has ended).
type Node struct {
	name   string
	config netns.NodeConfig
	opts   Options
	ctx    context.Context

	qemu    string
	kernel  *Kernel
	workDir string
	initrd  string
	info    Info
	prepAt  time.Time

	inMu     sync.Mutex
	input    bytes.Buffer
	sealed   bool // the VM booted (or was killed): no more input
	bootOnce sync.Once

	events chan netns.Event
	queue  *netns.EventQueue
	done   chan struct{}
	result *Result

	procMu sync.Mutex
	proc   *os.Process

	// exitCode of the node in the guest, -1 until known; written by the
	// run goroutine only.
	exitCode int
}

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Start prepares a VM that runs the node main registered under
// opts.Name: it finds (or downloads) the kernel, builds the initramfs in a
// work directory $TMPDIR/<run id>-vm and picks the accelerator. The VM
// boots once the input is complete (see Node). Cancelling ctx kills it.
// The VM has no network device; nothing on the host changes.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	start := time.Now()
	if !netns.NodeMainRegistered(opts.Name) {
		return nil, fmt.Errorf("start VM node: node main %q is not registered (netns.RegisterNodeMain)", opts.Name)
	}
	if !nodeNameRE.MatchString(opts.Name) {
		return nil, fmt.Errorf("start VM node: node main name %q: only letters, digits, '.', '_' and '-' can pass to the guest", opts.Name)
	}
	cfg, err := opts.Config.Complete()
	if err != nil {
		return nil, fmt.Errorf("start VM node %q: %w", opts.Name, err)
	}
	if !nodeNameRE.MatchString(cfg.RunID) {
		return nil, fmt.Errorf("start VM node %q: run id %q: only letters, digits, '.', '_' and '-' can pass to the guest", opts.Name, cfg.RunID)
	}
	if opts.MemoryMiB <= 0 {
		opts.MemoryMiB = 1024
	}
	if opts.CPUs <= 0 {
		opts.CPUs = 2
	}
	if opts.OutputDiskMiB <= 0 {
		opts.OutputDiskMiB = 1024
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stderr
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	switch opts.Accel {
	case "", "kvm", "tcg":
	default:
		return nil, fmt.Errorf("start VM node %q: accel %q: want kvm, tcg or empty (auto)", opts.Name, opts.Accel)
	}
	qemu, busybox, err := vmTools()
	if err != nil {
		return nil, fmt.Errorf("start VM node %q: %w", opts.Name, err)
	}
	kpsim := opts.Kpsim
	if kpsim == "" {
		if kpsim, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("start VM node %q: find this executable: %w", opts.Name, err)
		}
	}
	kernel, err := EnsureKernel(ctx, opts.KernelCacheDir)
	if err != nil {
		return nil, fmt.Errorf("start VM node %q: %w", opts.Name, err)
	}

	workDir, err := makeVMWorkDir(cfg.RunID)
	if err != nil {
		return nil, fmt.Errorf("start VM node %q: %w", opts.Name, err)
	}
	defer func() {
		if err != nil && !opts.KeepWorkDir {
			os.RemoveAll(workDir)
		}
	}()
	n := &Node{
		name: opts.Name, config: cfg, opts: opts, ctx: ctx,
		qemu: qemu, kernel: kernel, workDir: workDir,
		initrd: filepath.Join(workDir, "initrd.img"),
		events: make(chan netns.Event),
		queue:  netns.NewEventQueue(),
		done:   make(chan struct{}),

		exitCode: -1,
	}
	n.info = Info{
		KernelPackage: kernel.Package, KernelVersion: kernel.Version, KernelDebBytes: kernel.DebBytes,
		NodeExitCode: -1, WorkDir: workDir,
	}
	f, err := os.Create(n.initrd)
	if err != nil {
		return nil, fmt.Errorf("start VM node %q: %w", opts.Name, err)
	}
	ii, err := buildInitramfs(f, initramfsSpec{
		Kernel: kernel, Busybox: busybox, Kpsim: kpsim,
		Tools: vmHostTools, Modules: vmModules, Init: vmInitScript,
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("start VM node %q: build initramfs: %w", opts.Name, err)
	}
	n.info.InitramfsBytes = ii.Bytes
	n.info.Modules = ii.Modules
	n.info.MissingTools = ii.MissingTools

	n.info.Accel, n.info.AccelNote = opts.Accel, ""
	if opts.Accel == "" {
		n.info.Accel, n.info.AccelNote = probeAccel(ctx, qemu, kernel, busybox, workDir)
	}
	n.info.QEMUAccel, n.info.QEMUCPU, n.info.KernelArgs = n.machine().accelArg(), n.machine().cpuArg(), n.machine().kernelArgs()
	n.info.PrepareSeconds = time.Since(start).Seconds()
	go n.pump()
	return n, nil
}

// makeVMWorkDir creates $TMPDIR/<runID>-vm (or a suffixed name if a VM of
// the run already has it) with this process as owner, so Cleanup skips it
// while the run lives.
func makeVMWorkDir(runID string) (string, error) {
	dir := filepath.Join(os.TempDir(), runID+"-vm")
	if err := os.Mkdir(dir, 0o700); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("VM work dir: %w", err)
		}
		if dir, err = os.MkdirTemp(os.TempDir(), runID+"-vm-*"); err != nil {
			return "", fmt.Errorf("VM work dir: %w", err)
		}
	}
	if err := writeOwner(dir, os.Getpid()); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

func writeOwner(dir string, pid int) error {
	if err := os.WriteFile(filepath.Join(dir, netns.OwnerFile), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("VM work dir: %w", err)
	}
	return nil
}

// Info returns what is known about the VM so far (complete after Wait).
func (n *Node) Info() Info {
	select {
	case <-n.done:
		return n.result.VM
	default:
		return n.info
	}
}

// RunID returns the run id of the node.
func (n *Node) RunID() string { return n.config.RunID }

// Send encodes v as JSON and buffers it as the node's input (netns.NodeEnv.Recv).
// It fails once the VM has booted.
func (n *Node) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("VM node %q: encode input: %w", n.name, err)
	}
	n.inMu.Lock()
	defer n.inMu.Unlock()
	if n.sealed {
		return fmt.Errorf("VM node %q: send input: the VM has booted (its input is complete at boot)", n.name)
	}
	n.input.Write(append(b, '\n'))
	return nil
}

// seal ends the input and returns it.
func (n *Node) seal() []byte {
	n.inMu.Lock()
	defer n.inMu.Unlock()
	n.sealed = true
	return append([]byte(nil), n.input.Bytes()...)
}

// CloseInput completes the input and boots the VM.
func (n *Node) CloseInput() error {
	n.boot()
	return nil
}

// Events boots the VM and returns the node's events, in order; they arrive
// once the VM has ended, and the channel closes after the last one.
func (n *Node) Events() <-chan netns.Event {
	n.boot()
	return n.events
}

// WaitEvent boots the VM and reads events until one of the given kind.
func (n *Node) WaitEvent(ctx context.Context, kind string) (netns.Event, error) {
	ch := n.Events()
	for {
		select {
		case <-ctx.Done():
			return netns.Event{}, fmt.Errorf("VM node %q: waiting for event %q: %w", n.name, kind, ctx.Err())
		case ev, ok := <-ch:
			if !ok {
				<-n.done
				return netns.Event{}, fmt.Errorf("VM node %q ended before event %q: %v", n.name, kind, n.result.Err)
			}
			if ev.Kind == kind {
				return ev, nil
			}
		}
	}
}

// Kill stops the VM (SIGKILL to qemu). Killing an ended VM is not an
// error; killing one that has not booted ends it without booting.
func (n *Node) Kill() error {
	n.bootOnce.Do(func() {
		n.seal()
		n.finish(nil, errors.New("killed before boot"))
	})
	n.procMu.Lock()
	defer n.procMu.Unlock()
	if n.proc == nil {
		return nil
	}
	if err := n.proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill VM node %q (qemu pid %d): %w", n.name, n.proc.Pid, err)
	}
	return nil
}

// Wait boots the VM if needed, waits for it to end and returns the node's
// result. The error is the node main's error or why there is no result,
// with the tail of the console.
func (n *Node) Wait() (*Result, error) {
	n.boot()
	<-n.done
	return n.result, n.result.Err
}

// Done is closed when the VM has ended.
func (n *Node) Done() <-chan struct{} { return n.done }

func (n *Node) boot() {
	n.bootOnce.Do(func() { go n.run(n.seal()) })
}

// pump delivers queued events to the events channel in order.
func (n *Node) pump() {
	defer close(n.events)
	for {
		ev, ok := n.queue.Pop()
		if !ok {
			return
		}
		n.events <- ev
	}
}

// run boots the VM, waits for it and collects the output.
func (n *Node) run(input []byte) {
	c := &vmConsole{w: n.opts.Console, marks: map[string]time.Time{}, events: n.queue.Push}
	state, output, err := n.runQEMU(c, input)
	n.result = &Result{NodeResult: netns.NodeResult{ProcessState: state}}
	if err == nil {
		err = n.collect(output, c)
	}
	n.finish(c, err)
}

// finish records the result once (c is nil if the VM never started).
func (n *Node) finish(c *vmConsole, err error) {
	res := n.result
	if res == nil {
		res = &Result{}
		n.result = res
	}
	res.VM = n.info
	res.VM.NodeExitCode = n.exitCode
	if c != nil {
		c.mu.Lock()
		if t0, ok := c.marks["qemu-start"]; ok {
			sec := func(m string) float64 {
				if t, ok := c.marks[m]; ok {
					return t.Sub(t0).Seconds()
				}
				return 0
			}
			res.VM.KernelSeconds = sec("init")
			res.VM.ModulesSeconds = sec("modules")
			res.VM.BootSeconds = sec("node-start")
			res.VM.TotalSeconds = sec("qemu-exit")
		}
		res.VM.Clock = clockCheck(c.marks, c.args)
		c.mu.Unlock()
	}
	if err != nil && res.Err == nil {
		res.Err = fmt.Errorf("VM node %q: %w", n.name, err)
		if c != nil {
			res.Err = fmt.Errorf("%w\nconsole tail:\n%s", res.Err, c.tail())
		}
	}
	n.queue.Close()
	if !n.opts.KeepWorkDir {
		os.RemoveAll(n.workDir)
	}
	close(n.done)
}

// runQEMU writes the per-run initrd part and the output disk, runs qemu to
// the end and returns the path of the output disk.
func (n *Node) runQEMU(c *vmConsole, input []byte) (*os.ProcessState, string, error) {
	if err := n.ctx.Err(); err != nil {
		return nil, "", err
	}
	if err := n.appendRunCPIO(input); err != nil {
		return nil, "", err
	}
	disk := filepath.Join(n.workDir, "output.img")
	if err := createSparse(disk, int64(n.opts.OutputDiskMiB)<<20); err != nil {
		return nil, "", err
	}
	args := qemuArgs(n.kernel, n.initrd, disk, n.machine())
	state, err := runQEMU(n.ctx, n.qemu, args, c, n.workDir, func(p *os.Process) {
		n.procMu.Lock()
		n.proc = p
		n.procMu.Unlock()
	})
	return state, disk, err
}

// appendRunCPIO appends the per-run cpio (env, spec, input) to the initrd,
// 4-byte aligned as the kernel wants for an uncompressed archive.
func (n *Node) appendRunCPIO(input []byte) error {
	spec, err := guestNodeSpec(n.config)
	if err != nil {
		return err
	}
	env := fmt.Sprintf("KPSIM_NODE_NAME='%s'\nKPSIM_RUN_ID='%s'\n", n.name, n.config.RunID)

	f, err := os.OpenFile(n.initrd, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	if pad := (512 - fi.Size()%512) % 512; pad > 0 {
		if _, err := f.Write(make([]byte, pad)); err != nil {
			return fmt.Errorf("initrd: %w", err)
		}
	}
	b := newRootfsBuilder(f)
	b.bytes(guestRunDir+"/env", []byte(env), 0o644)
	b.bytes(guestRunDir+"/spec.json", []byte(spec), 0o644)
	b.bytes(guestRunDir+"/input", input, 0o644)
	if err := b.close(); err != nil {
		return fmt.Errorf("initrd: per-run cpio: %w", err)
	}
	return f.Close()
}

// guestNodeSpec is the node spec for the guest with placeholders for the
// "host" namespace inodes, which only the guest's /init knows: its initial
// namespaces, which the node must have left (by unshare) before it runs.
func guestNodeSpec(cfg netns.NodeConfig) (string, error) {
	raw, err := netns.EncodeNodeSpec(cfg, 1)
	if err != nil {
		return "", err
	}
	spec := string(raw)
	for _, kv := range [][2]string{{`"hostNetNS":0`, `"hostNetNS":@KPSIM_HOST_NETNS@`}, {`"hostMntNS":0`, `"hostMntNS":@KPSIM_HOST_MNTNS@`}} {
		if strings.Count(spec, kv[0]) != 1 {
			return "", fmt.Errorf("encode node spec: %s not found once in %s", kv[0], spec)
		}
		spec = strings.Replace(spec, kv[0], kv[1], 1)
	}
	return spec, nil
}

func createSparse(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("output disk: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("output disk: %w", err)
	}
	return f.Close()
}

// machine is what qemu emulates.
type machine struct {
	accel   string // "kvm" or "tcg"
	cpu     string // -cpu under TCG; "" is DefaultTCGCPU
	tcgOpts string // appended to -accel tcg
	kargs   string // appended to guestKernelArgs
	memMiB  int
	cpus    int
}

func (n *Node) machine() machine {
	return machine{accel: n.info.Accel, cpu: n.opts.CPU, tcgOpts: n.opts.TCGOptions, kargs: n.opts.ExtraKernelArgs, memMiB: n.opts.MemoryMiB, cpus: n.opts.CPUs}
}

// DefaultTCGCPU is the CPU model under software emulation. Models
// without AVX (qemu64, Nehalem), a translation cache of 256 or 1024 MiB
// instead of qemu 7.2's default, and thread=single measured the same per
// program start, within the noise; -smp 1 doubled it (see guestKernelArgs
// for the command).
const DefaultTCGCPU = "max"

// guestKernelArgs is the guest kernel's command line.
//
// norandmaps turns address space randomisation off in the guest. Under
// TCG (qemu 7.2) translated code is looked up by virtual address too, so
// with randomisation every new process maps ld.so and its libraries at new
// addresses and has all their code translated again; without it a program
// reuses what the previous run translated. Measured here (median of 200
// runs from a Go process in the guest, -cpu max -smp 2), per program
// start: ipset --version 41-50 ms -> 11.5-14 ms, iptables-legacy
// --version 35-43 ms -> 11-13 ms, a static busybox true 5-7 ms either way.
// LD_BIND_NOW, dropping LD_LIBRARY_PATH for the ld.so cache, and the CPU
// model or translation cache size changed nothing beyond the noise:
//
//	KPSIM_VM_PROGSTART='cpu=max,env=norandom+bindnow+noldlp+nocache;cpu=qemu64,env=norandom;cpu=max,tb=256,env=norandom' \
//	  go test ./vm -run TestPrivilegedVMProgramStart -v -timeout 60m
//
// init_on_alloc=0, hardened_usercopy=off and randomize_kstack_offset=off
// turn off hardening that Debian's kernel has on by default: zeroing
// every page and slab object when it is allocated, checks on each copy
// to and from user memory, and a random kernel stack offset per system
// call. Emulated, the zeroing is most of it: a program start allocates
// page tables, its pages and many kernel objects. Medians of 200-300
// runs, in four runs of the test, each machine booted twice or more:
//
//	| guest kernel arguments added | ipset add    | ipset --version | busybox true |
//	| none                         | 14.0-15.4 ms | 9.3-10.9 ms     | 4.1-4.6 ms   |
//	| init_on_alloc=0              | 10.5-12.5 ms | 8.2-9.4 ms      | 3.9-4.3 ms   |
//	| all three                    | 10.4-12.8 ms | 7.8-9.7 ms      | 3.8-4.5 ms   |
//	KPSIM_VM_PROGSTART='cpu=max;cpu=max,kargs=init_on_alloc=0;cpu=max,kargs=init_on_alloc=0+hardened_usercopy=off+randomize_kstack_offset=off' \
//	  KPSIM_VM_PROGSTART_RUNS=300 go test ./vm -run TestPrivilegedVMProgramStart -v
//
// transparent_hugepage=never and idle=poll changed nothing beyond the
// noise.
//
// tsc=reliable is not used. Without it the kernel finds the TSC unstable
// under emulation and keeps time with the emulated HPET, so every clock
// read is a system call and an emulated device access. With it, IPVS's
// 2000x10 first sync took 2 min 35 s where one run without it took 2 min
// 51 s, but the next run without it took 2 min 32 s: no gain beyond the
// noise between runs. And the first scale-test with it hung the guest:
// both vCPUs in soft lockups, "rcu kthread timer wakeup didn't happen",
// "possible timer handling issue", while the host lane ran beside it.
// Every VM result checks the guest's clock against the host's over the
// node's life (Info.Clock): within 0.04% with either clocksource.
//
// The guest is a throwaway test machine with no network, so randomisation
// and the hardening protect nothing there; the programs are unchanged.
const guestKernelArgs = "console=ttyS0 panic=-1 loglevel=4 mitigations=off norandmaps init_on_alloc=0 hardened_usercopy=off randomize_kstack_offset=off rdinit=/init"

func (m machine) cpuArg() string {
	switch {
	case m.accel == "kvm":
		return "host"
	case m.cpu != "":
		return m.cpu
	default:
		return DefaultTCGCPU
	}
}

func (m machine) kernelArgs() string {
	return strings.TrimSpace(guestKernelArgs + " " + m.kargs)
}

func (m machine) accelArg() string {
	if m.accel == "tcg" && m.tcgOpts != "" {
		return "tcg," + m.tcgOpts
	}
	return m.accel
}

// qemuArgs: no network device, no default devices, the console on the
// first serial port (qemu's stdout), the output disk as virtio-blk.
func qemuArgs(k *Kernel, initrd, disk string, m machine) []string {
	args := []string{
		"-nodefaults", "-no-user-config", "-nic", "none",
		"-display", "none", "-monitor", "none", "-serial", "stdio",
		"-no-reboot",
		"-accel", m.accelArg(), "-cpu", m.cpuArg(),
		"-m", strconv.Itoa(m.memMiB), "-smp", strconv.Itoa(m.cpus),
		"-kernel", k.Vmlinuz, "-initrd", initrd,
		"-append", m.kernelArgs(),
	}
	if disk != "" {
		args = append(args, "-drive", "file="+disk+",format=raw,if=virtio,cache=unsafe")
	}
	return args
}

// runQEMU runs qemu to its end, feeding its console to c. qemu dies with
// the thread that started it (Pdeathsig), and the work dir's owner file
// names qemu while it runs.
func runQEMU(ctx context.Context, qemu string, args []string, c *vmConsole, workDir string, started func(*os.Process)) (*os.ProcessState, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("console pipe: %w", err)
	}
	cmd := exec.Command(qemu, args...)
	cmd.Stdout = pw
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	startErr := make(chan error, 1)
	exited := make(chan struct{})
	var waitErr error
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c.mark("qemu-start")
		if err := cmd.Start(); err != nil {
			startErr <- err
			close(exited)
			return
		}
		startErr <- nil
		waitErr = cmd.Wait()
		c.mark("qemu-exit")
		close(exited)
	}()
	err = <-startErr
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start %s: %w", qemu, err)
	}
	started(cmd.Process)
	if workDir != "" {
		// The owner is qemu while it runs, then this process again.
		_ = writeOwner(workDir, cmd.Process.Pid)
		defer func() { _ = writeOwner(workDir, os.Getpid()) }()
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		c.read(pr)
	}()
	select {
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		<-readDone
		return cmd.ProcessState, fmt.Errorf("qemu killed: %w", ctx.Err())
	case <-c.hungCh():
		_ = cmd.Process.Kill()
		<-exited
		<-readDone
		c.mu.Lock()
		defer c.mu.Unlock()
		return cmd.ProcessState, fmt.Errorf("the guest kernel hung (%q), so qemu was killed: no timing from this VM can be trusted", c.hungLine)
	case <-exited:
	}
	<-readDone
	if waitErr != nil {
		return cmd.ProcessState, fmt.Errorf("qemu: %w", waitErr)
	}
	return cmd.ProcessState, nil
}

// collect reads the output disk and fills the result.
func (n *Node) collect(disk string, c *vmConsole) error {
	files, err := readOutputDisk(disk)
	if err != nil {
		return err
	}
	if rc, ok := files["exit"]; ok {
		if v, err := strconv.Atoi(strings.TrimSpace(string(rc))); err == nil {
			n.exitCode = v
		}
	}
	n.copyTo(n.opts.Stdout, files["stdout"])
	n.copyTo(n.opts.Stderr, files["stderr"])
	if err := n.saveFiles(files); err != nil {
		return err
	}
	res := n.result
	var result *netns.WireMsg
	var badLine error
	sc := bufio.NewScanner(bytes.NewReader(files["output.jsonl"]))
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	// The first c.live events already came over the console.
	c.mu.Lock()
	skip := c.live
	c.mu.Unlock()
	for sc.Scan() {
		var m netns.WireMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			badLine = fmt.Errorf("bad output line: %w", err)
			continue
		}
		if m.Type == "result" {
			result = &m
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		n.queue.Push(m.Event())
	}
	switch {
	case result != nil:
		res.Data = result.Data
		if result.Error != "" {
			res.Err = fmt.Errorf("VM node %q: %s", n.name, result.Error)
		}
		return nil
	case badLine != nil:
		return badLine
	case !c.has("output-written"):
		return errors.New("the guest wrote no output")
	default:
		return fmt.Errorf("ended without a result (guest exit code %d)", n.exitCode)
	}
}

// saveFiles copies the guest's files/ entries into OutputDir, refusing
// names that would leave it.
func (n *Node) saveFiles(files map[string][]byte) error {
	if n.opts.OutputDir == "" {
		return nil
	}
	prefix := strings.TrimPrefix(GuestFilesDir, "/out/") + "/"
	for name, data := range files {
		rel, ok := strings.CutPrefix(name, prefix)
		if !ok || rel == "" {
			continue
		}
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("guest output file %q escapes the output directory", name)
		}
		dst := filepath.Join(n.opts.OutputDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) copyTo(w io.Writer, b []byte) {
	if w != nil && len(b) > 0 {
		_, _ = w.Write(b)
	}
}

// readOutputDisk reads the tar stream /init wrote at the start of the disk.
func readOutputDisk(disk string) (map[string][]byte, error) {
	f, err := os.Open(disk)
	if err != nil {
		return nil, fmt.Errorf("output disk: %w", err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("output disk: read tar: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("output disk: %s: %w", h.Name, err)
		}
		files[path.Clean(h.Name)] = b
	}
	return files, nil
}

// vmConsole reads the guest console: it keeps the last lines for error
// messages and timestamps the "kpsim-vm: " markers of /init.
type vmConsole struct {
	w     io.Writer
	mu    sync.Mutex
	lines []string
	marks map[string]time.Time
	// args are the first arrival's words after each marker's name.
	args map[string][]string
	// events receives the node's events as the console shows them, live;
	// live counts them.
	events func(netns.Event)
	live   int
	// hung is closed, once, when the guest kernel reports a CPU stuck
	// for guestHungSeconds or more; hungLine is that report.
	hung     chan struct{}
	hungLine string
}

// guestHungSeconds is how long the guest kernel may report a CPU stuck in
// a soft lockup before the VM is stopped as hung: its timers no longer
// fire, so the node's own timeouts would never end the run. A long kernel
// operation under emulation (a 64,000-rule table replace) takes seconds,
// not minutes.
const guestHungSeconds = 120

var softLockup = regexp.MustCompile(`soft lockup - CPU#\d+ stuck for (\d+)s!`)

// hungCh is closed when the guest kernel hung (see hung).
func (c *vmConsole) hungCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hungLocked()
}

// hungLocked is hung, made on first use; c.mu is held.
func (c *vmConsole) hungLocked() chan struct{} {
	if c.hung == nil {
		c.hung = make(chan struct{})
	}
	return c.hung
}

// checkHung closes hung when line reports a CPU stuck long enough.
func (c *vmConsole) checkHung(line string) {
	m := softLockup.FindStringSubmatch(line)
	if m == nil {
		return
	}
	if secs, err := strconv.Atoi(m[1]); err != nil || secs < guestHungSeconds {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hungLine == "" {
		c.hungLine = strings.TrimSpace(line)
		close(c.hungLocked())
	}
}

const (
	vmMarker       = "kpsim-vm: "
	vmConsoleLines = 60
)

func (c *vmConsole) mark(name string, args ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.marks[name]; !ok {
		c.marks[name] = time.Now()
		if c.args == nil {
			c.args = map[string][]string{}
		}
		c.args[name] = args
	}
}

func (c *vmConsole) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.marks[name]
	return ok
}

func (c *vmConsole) read(r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if rest, ok := strings.CutPrefix(line, netns.ConsoleEventMarker); ok && c.events != nil {
			var m netns.WireMsg
			if json.Unmarshal([]byte(rest), &m) == nil && m.Type == "event" {
				c.mu.Lock()
				c.live++
				c.mu.Unlock()
				c.events(m.Event())
				continue
			}
		}
		if c.w != nil {
			fmt.Fprintln(c.w, line)
		}
		c.checkHung(line)
		if rest, ok := strings.CutPrefix(line, vmMarker); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				c.mark(f[0], f[1:]...)
			}
		}
		c.mu.Lock()
		c.lines = append(c.lines, line)
		if len(c.lines) > vmConsoleLines {
			c.lines = c.lines[len(c.lines)-vmConsoleLines:]
		}
		c.mu.Unlock()
	}
}

func (c *vmConsole) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}
