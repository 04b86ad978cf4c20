package vm

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpsim/kpsim/netns"
)

// The cost of one program start in the guest, which dominates IPVS mode
// there (kube-proxy runs one ipset program per call). A measurement, not a
// check: it runs only when KPSIM_VM_PROGSTART lists the qemu machines to
// try, separated by ';', each a comma-separated list of cpu=MODEL,
// tb=MiB, tcg=OPT+OPT (more -accel tcg options), kargs=A+B (more guest
// kernel arguments), smp=N, fill=N (the set the adds go to holds N
// entries first, as kube-proxy's sets do as a sync goes on) and
// env=V1+V2 (also time the programs in these variants of
// progStartVariants). For
// example, as root:
//
//	KPSIM_VM_PROGSTART='cpu=max,env=norandom+bindnow;cpu=Nehalem;cpu=max,tb=256' \
//	  go test ./vm -run TestPrivilegedVMProgramStart -v -timeout 60m
//
// KPSIM_VM_PROGSTART_RUNS sets the runs per program (default 200).

const vmProgStartNodeMain = "test-vm-progstart"

func init() {
	netns.RegisterNodeMain(vmProgStartNodeMain, runVMProgStartNode)
}

type progStartInput struct {
	Runs     int        `json:"runs"`
	Commands [][]string `json:"commands"`
	// Variants are the names of progStartVariants to time the commands
	// in besides the node's own environment.
	Variants []string `json:"variants"`
	// Facts are guest files to report (the clocksource, the kernel's
	// command line), read once before the runs.
	Facts []string `json:"facts"`
	// Fill is how many entries the timed set holds before the runs.
	Fill int `json:"fill"`
}

type progStartOutput struct {
	Timings []progStartTiming `json:"timings"`
	Facts   map[string]string `json:"facts"`
}

type progStartTiming struct {
	Variant string   `json:"variant"`
	Command []string `json:"command"`
	// Median, Min, Max and P90 milliseconds per run (fork, exec, exit,
	// wait, as kube-proxy's os/exec pays them).
	Median, Min, Max, P90 float64
	// LDStats is ld.so's own account of one run (LD_DEBUG=statistics),
	// for dynamic programs.
	LDStats string `json:"ldStats,omitempty"`
}

// progStartVariant is an environment to run the programs in; setup runs
// before and its result undoes it.
type progStartVariant struct {
	name  string
	env   func([]string) []string
	setup func() (func(), error)
}

func withoutEnv(key string) func([]string) []string {
	return func(env []string) []string {
		var out []string
		for _, kv := range env {
			if !strings.HasPrefix(kv, key+"=") {
				out = append(out, kv)
			}
		}
		return out
	}
}

// progStartVariants are the environments besides the node's own.
func progStartVariants() map[string]progStartVariant {
	same := func(e []string) []string { return e }
	noLDLP := withoutEnv("LD_LIBRARY_PATH")
	bindNow := func(e []string) []string { return append(e, "LD_BIND_NOW=1") }
	hideCache := func() (func(), error) {
		if err := os.Rename("/etc/ld.so.cache", "/etc/ld.so.cache.hidden"); err != nil {
			return nil, err
		}
		return func() { _ = os.Rename("/etc/ld.so.cache.hidden", "/etc/ld.so.cache") }, nil
	}
	// Without address space randomisation every process maps ld.so and
	// the libraries at the same addresses, so TCG can reuse the code it
	// translated for the previous process (its lookup key is the virtual
	// address too). The guest boots with norandmaps (guestKernelArgs),
	// so this is already the node's own environment.
	noRandom := func() (func(), error) {
		const p = "/proc/sys/kernel/randomize_va_space"
		old, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
			return nil, err
		}
		return func() { _ = os.WriteFile(p, old, 0o644) }, nil
	}
	return map[string]progStartVariant{
		"noldlp":   {name: "LD_LIBRARY_PATH unset (ld.so.cache)", env: noLDLP},
		"nocache":  {name: "LD_LIBRARY_PATH unset, no ld.so.cache", env: noLDLP, setup: hideCache},
		"bindnow":  {name: "LD_BIND_NOW=1", env: bindNow},
		"norandom": {name: "randomize_va_space=0", env: same, setup: noRandom},
	}
}

func runVMProgStartNode(ctx context.Context, env *netns.NodeEnv) error {
	var in progStartInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	var out []progStartTiming
	facts := map[string]string{}
	for _, f := range in.Facts {
		b, err := os.ReadFile(f)
		if err != nil {
			facts[f] = err.Error()
			continue
		}
		facts[f] = strings.TrimSpace(string(b))
	}
	if in.Fill > 0 {
		if err := fillProgStartSet(ctx, in.Fill); err != nil {
			return err
		}
	}
	variants := []progStartVariant{{name: "as the node runs them", env: func(e []string) []string { return e }}}
	for _, name := range in.Variants {
		v, ok := progStartVariants()[name]
		if !ok {
			return fmt.Errorf("unknown variant %q", name)
		}
		variants = append(variants, v)
	}
	for _, v := range variants {
		undo := func() {}
		if v.setup != nil {
			u, err := v.setup()
			if err != nil {
				return fmt.Errorf("variant %s: %w", v.name, err)
			}
			undo = u
		}
		for _, c := range in.Commands {
			r := progStartTiming{Variant: v.name, Command: c}
			ms := make([]float64, 0, in.Runs)
			for range in.Runs {
				cmd := exec.CommandContext(ctx, c[0], c[1:]...)
				cmd.Env = v.env(os.Environ())
				start := time.Now()
				if b, err := cmd.CombinedOutput(); err != nil {
					undo()
					return fmt.Errorf("variant %s: %v: %w: %s", v.name, c, err, b)
				}
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			sort.Float64s(ms)
			r.Median, r.Min, r.Max, r.P90 = ms[len(ms)/2], ms[0], ms[len(ms)-1], ms[len(ms)*9/10]
			cmd := exec.CommandContext(ctx, c[0], c[1:]...)
			cmd.Env = append(v.env(os.Environ()), "LD_DEBUG=statistics")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if cmd.Run() == nil {
				r.LDStats = stderr.String()
			}
			out = append(out, r)
		}
		undo()
	}
	return env.SetResult(progStartOutput{Timings: out, Facts: facts})
}

// progStartSet is the set the timed ipset programs use.
const progStartSet = "kpsim-progstart"

// fillProgStartSet creates progStartSet with n entries, in one ipset
// restore.
func fillProgStartSet(ctx context.Context, n int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "create %s hash:ip,port -exist\n", progStartSet)
	for i := range n {
		fmt.Fprintf(&b, "add %s 10.%d.%d.%d,tcp:80 -exist\n", progStartSet, 100+i>>16, i>>8&0xff, i&0xff)
	}
	cmd := exec.CommandContext(ctx, "ipset", "restore")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fill %s with %d entries: %w: %s", progStartSet, n, err, out)
	}
	return nil
}

func TestPrivilegedVMProgramStart(t *testing.T) {
	spec := os.Getenv("KPSIM_VM_PROGSTART")
	if spec == "" {
		t.Skip("a measurement: set KPSIM_VM_PROGSTART (see the comment above) to run it")
	}
	requireVM(t)
	runs := 200
	if s := os.Getenv("KPSIM_VM_PROGSTART_RUNS"); s != "" {
		var err error
		if runs, err = strconv.Atoi(s); err != nil {
			t.Fatalf("KPSIM_VM_PROGSTART_RUNS: %v", err)
		}
	}
	cmds := [][]string{
		{"ipset", "--version"},
		// What kube-proxy's IPVS mode runs: one add per entry (the create
		// comes first so that the add has its set).
		{"ipset", "create", progStartSet, "hash:ip,port", "-exist"},
		{"ipset", "add", progStartSet, "10.0.0.1,tcp:80", "-exist"},
		{"iptables-legacy", "--version"},
		{"/usr/bin/busybox", "true"},
	}
	var table []string
	for _, m := range strings.Split(spec, ";") {
		var stderr bytes.Buffer
		opts := Options{Name: vmProgStartNodeMain, Accel: "tcg", CPUs: 2, Stdout: &stderr, Stderr: &stderr}
		in := progStartInput{Runs: runs, Commands: cmds, Facts: []string{
			"/proc/cmdline",
			"/sys/devices/system/clocksource/clocksource0/current_clocksource",
			"/sys/devices/system/clocksource/clocksource0/available_clocksource",
		}}
		for _, kv := range strings.Split(m, ",") {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "cpu":
				opts.CPU = strings.ReplaceAll(v, "+", ",")
			case "tb":
				opts.TCGOptions = strings.TrimPrefix(opts.TCGOptions+",tb-size="+v, ",")
			case "tcg":
				opts.TCGOptions = strings.TrimPrefix(opts.TCGOptions+","+strings.ReplaceAll(v, "+", ","), ",")
			case "kargs":
				opts.ExtraKernelArgs = strings.ReplaceAll(v, "+", " ")
			case "smp":
				opts.CPUs, err = strconv.Atoi(v)
			case "fill":
				in.Fill, err = strconv.Atoi(v)
			case "env":
				in.Variants = strings.Split(v, "+")
			default:
				err = fmt.Errorf("unknown key %q", k)
			}
			if err != nil {
				t.Fatalf("KPSIM_VM_PROGSTART %q: %v", m, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		n, err := Start(ctx, opts)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := n.Send(in); err != nil {
			t.Fatal(err)
		}
		res, err := n.Wait()
		cancel()
		if err != nil {
			t.Fatalf("machine %q: %v\n%s", m, err, stderr.String())
		}
		var po progStartOutput
		if err := res.Decode(&po); err != nil {
			t.Fatal(err)
		}
		out := po.Timings
		if c := res.VM.Clock; c != nil {
			t.Logf("machine %q: clock: the node's life %.3f s on the guest's clock, %.3f s on the host's (%+.2f%%)", m, c.GuestSeconds, c.HostSeconds, 100*(c.Ratio()-1))
		}
		for _, f := range slices.Sorted(maps.Keys(po.Facts)) {
			t.Logf("machine %q: %s: %s", m, f, po.Facts[f])
		}
		t.Logf("machine %q: -accel %s -cpu %s -smp %d -append %q, boot %.1fs, total %.1fs", m, res.VM.QEMUAccel, res.VM.QEMUCPU, opts.CPUs, res.VM.KernelArgs, res.VM.BootSeconds, res.VM.TotalSeconds)
		for _, r := range out {
			line := fmt.Sprintf("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f |", m, r.Variant, strings.Join(r.Command, " "), r.Median, r.Min, r.P90, r.Max)
			table = append(table, line)
			t.Log(line)
			if r.LDStats != "" && strings.HasPrefix(r.Variant, "as the node") {
				t.Logf("ld.so statistics, %s:\n%s", strings.Join(r.Command, " "), r.LDStats)
			}
		}
	}
	t.Logf("per program start in the guest, ms, %d runs each:\n| machine | environment | program | median | min | p90 | max |\n|---|---|---|---|---|---|---|\n%s", runs, strings.Join(table, "\n"))
}
