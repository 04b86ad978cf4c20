package node

import (
	"context"
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/toolexec"
)

// versionArgs are the programs a mode's kube-proxy runs, with kpsim's own
// rule readers, and how each says its version.
var versionArgs = map[string][]string{
	"iptables-legacy": {"--version"}, // iptables v1.8.11 (legacy)
	"iptables-nft":    {"--version"}, // iptables v1.8.11 (nf_tables)
	"nft":             {"--version"}, // nftables v1.1.3 (Commodore Bullmoose #4)
	"ipset":           {"--version"}, // ipset v7.17, protocol version: 7
}

// ipvsReader is how kpsim reads IPVS: there is no ipvsadm in the node,
// the kernel's own listing stands in for it.
const ipvsReader = "/proc/net/ip_vs (the kernel's listing, as ipvsadm -Ln shows it)"

// modePrograms are the programs behind each mode the entry runs over the
// scenario (a migration runs two): iptables-<backend> for iptables and
// IPVS modes, nft for nftables, ipset for IPVS. nftables mode's startup
// cleanup of iptables leftovers uses the entry's first backend.
func modePrograms(s *scenarios.Scenario, entry scenarios.ModeSpec) []string {
	var out []string
	add := func(p string) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for i := 0; i <= len(s.Spec.Steps); i++ {
		ms := s.ModeAt(entry, i)
		backend := ms.Backend
		if backend == "" {
			backend = entry.Backend
		}
		if backend == "" {
			backend = "legacy"
		}
		switch ms.Mode {
		case scenarios.ModeNFTables:
			add("nft")
		case scenarios.ModeIPVS:
			add("iptables-" + backend)
			add("ipset")
		default:
			add("iptables-" + backend)
		}
	}
	return out
}

// toolVersions asks each program for its version in the node, before
// kube-proxy starts (their runs are the harness's, not kube-proxy's), and
// says which file ran and how it is linked: a program's start costs far
// more when dynamic (in the emulated VM, 9-10 ms against 4 ms for a static
// busybox). A program that is missing or fails says so instead of a
// version.
func toolVersions(ctx context.Context, run toolexec.Runner, programs []string) map[string]string {
	out := map[string]string{}
	for _, p := range programs {
		if p == "ipset" {
			out["ipvs reader"] = ipvsReader
		}
		path, err := run.LookPath(p)
		if err != nil {
			out[p] = "not installed"
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := run.Run(tctx, toolexec.Command(p, versionArgs[p]...))
		cancel()
		if err != nil {
			out[p] = "version unknown: " + strings.SplitN(err.Error(), "\n", 2)[0]
			continue
		}
		out[p] = strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)[0] + " (" + binaryLinkage(path) + ")"
	}
	return out
}

// binaryLinkage names the file behind path (symlinks resolved: Debian's
// iptables-legacy is xtables-legacy-multi) and whether it is static or
// which shared libraries it loads, from its ELF headers.
func binaryLinkage(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Sprintf("%s, linkage unknown: %v", path, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Sprintf("%s, linkage unknown: %v", path, err)
	}
	interp := false
	for _, p := range f.Progs {
		interp = interp || p.Type == elf.PT_INTERP
	}
	switch {
	case !interp && len(libs) == 0:
		return path + ", static"
	case len(libs) == 0:
		return path + ", dynamic"
	}
	return path + ", dynamic: " + strings.Join(libs, " ")
}
