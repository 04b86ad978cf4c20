package proxier

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/kubernetes/pkg/proxy/nftables"
)

// StartupCleanup is what kube-proxy's startup cleanup did before the
// proxier was built.
type StartupCleanup struct {
	// Modes are the modes whose leftovers were removed, by upstream's
	// CleanupLeftovers of each.
	Modes []string `json:"modes"`
	// Programs are the programs those cleanups run, as PATH resolves them
	// here (upstream execs them by name).
	Programs map[string]string `json:"programs,omitempty"`
	// Skipped says what kpsim did not run, and why.
	Skipped string `json:"skipped,omitempty"`
	// Duration of the whole cleanup, the programs included.
	Duration time.Duration `json:"duration"`
	// Failed says a cleanup reported an error. kube-proxy logs it and goes
	// on ("the cleanup is best-effort"), and so does kpsim.
	Failed bool `json:"failed,omitempty"`
}

// startupCleanup runs what kube-proxy runs before it builds its proxy
// server: platformCleanup(ctx, mode, false) (cmd/kube-proxy/app
// server_linux.go:313-331 in v1.37.1), which Options.Run calls first
// (options.go:371). It removes the leftovers of the modes the new one
// definitely does not use: iptables and IPVS state before nftables mode,
// nftables state before the iptables-based modes (iptables, IPVS).
//
// One part kpsim does not run: ipvs.CleanupLeftovers starts with
// "modprobe -va ip_vs", which loads the module for the whole host (and
// adds its sysctls to every namespace). Where ip_vs is not loaded there is
// no IPVS state to remove, so kpsim skips that cleanup and says so.
func startupCleanup(ctx context.Context, mode string) StartupCleanup {
	start := time.Now()
	var c StartupCleanup
	if mode == ModeNFTables {
		c.Modes = append(c.Modes, "iptables")
		c.Programs = resolvePrograms("iptables", "ip6tables")
		c.Failed = iptables.CleanupLeftovers(ctx)
		if ipvsLoaded() {
			c.Modes = append(c.Modes, "ipvs")
			c.Failed = ipvs.CleanupLeftovers(ctx) || c.Failed
		} else {
			c.Skipped = "ipvs: the ip_vs module is not loaded, so no IPVS state is left to remove; upstream's cleanup would load it (modprobe ip_vs), for the whole host"
		}
	} else {
		c.Modes = []string{"nftables"}
		c.Programs = resolvePrograms("nft")
		c.Failed = nftables.CleanupLeftovers(ctx)
	}
	c.Duration = time.Since(start)
	return c
}

// CleanupAndExit runs what `kube-proxy --cleanup` runs:
// platformCleanup(ctx, mode, true), which removes the leftovers of every
// mode (iptables, IPVS and nftables), whatever mode it was given. backend
// is the iptables backend the node's "iptables" runs ("" leaves PATH as it
// is); toolsDir holds its directory of symlinks. It changes this
// process's PATH, so it runs in a process of its own, as kube-proxy
// --cleanup does. The ip_vs guard of startupCleanup applies.
func CleanupAndExit(ctx context.Context, backend, toolsDir string) (StartupCleanup, error) {
	if backend != "" {
		if _, err := useIPTablesBackend(ctx, toolsDir, backend); err != nil {
			return StartupCleanup{}, err
		}
	}
	start := time.Now()
	c := StartupCleanup{Modes: []string{"iptables"}, Programs: resolvePrograms("iptables", "ip6tables", "nft")}
	c.Failed = iptables.CleanupLeftovers(ctx)
	if ipvsLoaded() {
		c.Modes = append(c.Modes, "ipvs")
		c.Failed = ipvs.CleanupLeftovers(ctx) || c.Failed
	} else {
		c.Skipped = "ipvs: the ip_vs module is not loaded, so no IPVS state is left to remove; upstream's cleanup would load it (modprobe ip_vs), for the whole host"
	}
	c.Modes = append(c.Modes, "nftables")
	c.Failed = nftables.CleanupLeftovers(ctx) || c.Failed
	c.Duration = time.Since(start)
	return c, nil
}

// ipvsLoaded says whether the kernel has IPVS loaded: it shows
// /proc/net/ip_vs in every network namespace then.
func ipvsLoaded() bool {
	_, err := os.Stat("/proc/net/ip_vs")
	return err == nil
}

// resolvePrograms maps each name to the file PATH finds for it, links
// resolved ("" when there is none).
func resolvePrograms(names ...string) map[string]string {
	m := map[string]string{}
	for _, name := range names {
		p, err := exec.LookPath(name)
		if err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
		}
		m[name] = p
	}
	return m
}
