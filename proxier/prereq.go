package proxier

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Availability says whether this machine can run one proxy mode (with one
// iptables backend), and if not, why and what would fix it.
type Availability struct {
	Mode    string
	Backend string
	OK      bool
	// Reason says what is missing; empty when OK.
	Reason string
	// Fix says how to get it.
	Fix string
	// Evidence says how the answer was obtained, so it can be checked.
	Evidence []string
}

// Host describes the machine's kernel and tools; the zero value is not
// useful, call ProbeHost.
type Host struct {
	// KernelRelease is uname -r.
	KernelRelease string
	// Root is whether the process runs as root (it must, to create
	// network namespaces).
	Root bool

	kernel   kernelConfig
	lookPath func(string) (string, error)
}

// ProbeHost reads the kernel configuration and the tools on PATH. It only
// reads: /proc/config.gz, /sys/module, /lib/modules and PATH.
func ProbeHost() *Host {
	release := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		release = strings.TrimSpace(string(b))
	}
	return &Host{
		KernelRelease: release,
		Root:          os.Geteuid() == 0,
		kernel:        readKernelConfig(release),
		lookPath:      exec.LookPath,
	}
}

// Tools each mode runs, per backend.
var modeTools = map[string][]string{
	"iptables/legacy": {"iptables-legacy-restore", "iptables-legacy-save", "ip6tables-legacy-restore", "ip6tables-legacy-save"},
	"iptables/nft":    {"iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore", "ip6tables-nft-save"},
	"nftables/":       {"nft"},
	"ipvs/legacy":     {"iptables-legacy-restore", "iptables-legacy-save", "ipset"},
	"ipvs/nft":        {"iptables-nft-restore", "iptables-nft-save", "ipset"},
}

// Kernel options each mode needs.
var modeKernel = map[string][]string{
	"iptables/legacy": {"IP_NF_IPTABLES", "IP_NF_NAT", "NETFILTER_XT_MATCH_STATISTIC"},
	"iptables/nft":    {"NF_TABLES", "NFT_COMPAT", "NETFILTER_XT_MATCH_STATISTIC"},
	"nftables/":       {"NF_TABLES", "NF_TABLES_INET", "NFT_NUMGEN"},
	"ipvs/legacy":     {"IP_VS", "IP_VS_RR", "IP_SET", "DUMMY", "IP_NF_IPTABLES"},
	"ipvs/nft":        {"IP_VS", "IP_VS_RR", "IP_SET", "DUMMY", "NF_TABLES", "NFT_COMPAT"},
}

// Check reports whether mode (with backend, for iptables and ipvs) can
// run on this host's kernel, in a network namespace of this process.
func (h *Host) Check(mode, backend string) Availability {
	if mode == "nftables" {
		backend = ""
	}
	key := mode + "/" + backend
	a := Availability{Mode: mode, Backend: backend}
	tools, ok := modeTools[key]
	if !ok {
		a.Reason = fmt.Sprintf("unknown mode %q with backend %q", mode, backend)
		return a
	}
	var missingTools []string
	for _, t := range tools {
		if p, err := h.lookPath(t); err != nil {
			missingTools = append(missingTools, t)
		} else {
			a.Evidence = append(a.Evidence, "found "+p)
		}
	}
	var missingKernel []string
	for _, opt := range modeKernel[key] {
		state, how := h.kernel.has(opt)
		a.Evidence = append(a.Evidence, fmt.Sprintf("CONFIG_%s: %s (%s)", opt, state, how))
		if state == featureAbsent {
			missingKernel = append(missingKernel, "CONFIG_"+opt)
		}
	}
	switch {
	case len(missingKernel) > 0:
		a.Reason = fmt.Sprintf("kernel %s lacks %s", h.KernelRelease, strings.Join(missingKernel, ", "))
		a.Fix = "run this mode in a VM with a kernel that has it (kpsim run --kernel vm)"
	case len(missingTools) > 0:
		a.Reason = "missing " + strings.Join(missingTools, ", ")
		a.Fix = "sudo make deps (installs Debian's iptables, nftables, ipset, conntrack, iproute2)"
	case !h.Root:
		a.Reason = "needs root to create network namespaces"
		a.Fix = "run with sudo"
	default:
		a.OK = true
	}
	return a
}

type featureState string

const (
	featureBuiltIn featureState = "built in"
	featureModule  featureState = "module"
	featureAbsent  featureState = "absent"
	featureUnknown featureState = "unknown"
)

// kernelConfig is the running kernel's build configuration, when the
// kernel exposes it, and where its modules live.
type kernelConfig struct {
	options    map[string]string // CONFIG_X -> y|m
	source     string
	modulesDir string
}

func readKernelConfig(release string) kernelConfig {
	kc := kernelConfig{modulesDir: filepath.Join("/lib/modules", release)}
	for _, path := range []string{"/proc/config.gz", "/boot/config-" + release} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var r io.Reader = f
		if strings.HasSuffix(path, ".gz") {
			gz, err := gzip.NewReader(f)
			if err != nil {
				f.Close()
				continue
			}
			r = gz
		}
		kc.options = map[string]string{}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
				kc.options[k] = v
			}
		}
		f.Close()
		kc.source = path
		return kc
	}
	return kc
}

// has reports whether the kernel has CONFIG_<opt>, and how it knows.
func (kc kernelConfig) has(opt string) (featureState, string) {
	if kc.options == nil {
		return featureUnknown, "no kernel config readable; it will be tried"
	}
	switch kc.options["CONFIG_"+opt] {
	case "y":
		return featureBuiltIn, kc.source
	case "m":
		if _, err := os.Stat(kc.modulesDir); err != nil {
			return featureAbsent, kc.source + " says module, but " + kc.modulesDir + " is missing"
		}
		return featureModule, kc.source
	}
	return featureAbsent, kc.source + " does not set it"
}
