package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/toolexec"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostSnapshot is a read-only picture of the host network state a proxier
// could change: rulesets, links, addresses, routes, policy rules and the
// sysctls the proxiers touch. Counters and statistics are left out so two
// snapshots of an untouched host are equal.
type HostSnapshot struct {
	Taken time.Time `json:"taken"`
	// NetNS is the inode of the network namespace the snapshot was taken
	// in; snapshots of different namespaces are never equal.
	NetNS uint64 `json:"netns"`
	// Rulesets by tool ("iptables-legacy-save", "nft list ruleset", ...),
	// normalised (no counters, no timestamps). A tool that failed records
	// its error as the text.
	Rulesets map[string]string `json:"rulesets"`
	// Missing lists the tools that are not installed.
	Missing []string `json:"missing,omitempty"`
	Links   []string `json:"links"`
	Addrs   []string `json:"addrs"`
	Routes  []string `json:"routes"`
	Rules   []string `json:"rules"`
	// Sysctls by path below /proc/sys (and /sys/module for conntrack's
	// hashsize); absent files are not recorded.
	Sysctls map[string]string `json:"sysctls"`
}

// snapshotTools are the read-only dump commands, each run only when its
// binary exists.
var snapshotTools = [][]string{
	{"iptables-legacy-save"},
	{"ip6tables-legacy-save"},
	{"iptables-nft-save"},
	{"ip6tables-nft-save"},
	// --stateless leaves out counters and quotas.
	{"nft", "--stateless", "list", "ruleset"},
}

// snapshotSysctlGlobs are the sysctls kube-proxy (all modes), the kubelet
// and kpsim's node setup touch.
var snapshotSysctlGlobs = []string{
	"net/ipv4/ip_forward",
	"net/ipv4/ip_local_port_range",
	"net/ipv4/conf/*/route_localnet",
	"net/ipv4/conf/*/rp_filter",
	"net/ipv4/conf/*/forwarding",
	"net/ipv4/conf/*/arp_ignore",
	"net/ipv4/conf/*/arp_announce",
	"net/ipv6/conf/all/forwarding",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/ipv4/vs/*",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"net/netfilter/nf_conntrack_tcp_be_liberal",
	"net/netfilter/nf_conntrack_udp_timeout",
	"net/netfilter/nf_conntrack_udp_timeout_stream",
	"net/core/somaxconn",
	"kernel/panic",
	"kernel/panic_on_oops",
	"vm/overcommit_memory",
}

// TakeHostSnapshot records the state of the calling process's network
// namespace (the host's, in the orchestrator). It only reads: dump tools,
// netlink dumps and /proc/sys. Call it from the orchestrator, never from a
// node process. The dump tools run in their own process group: a Ctrl-C
// to the run must not turn the check's reading into an error.
func TakeHostSnapshot() (*HostSnapshot, error) {
	return takeSnapshot(context.Background(), &toolexec.Exec{OwnGroup: true})
}

func takeSnapshot(ctx context.Context, tools toolexec.Runner) (*HostSnapshot, error) {
	s := &HostSnapshot{Taken: time.Now(), Rulesets: map[string]string{}, Sysctls: map[string]string{}}
	var err error
	if s.NetNS, err = threadNetNSInode(); err != nil {
		return nil, fmt.Errorf("host snapshot: %w", err)
	}
	for _, argv := range snapshotTools {
		name := strings.Join(argv, " ")
		if _, err := tools.LookPath(argv[0]); err != nil {
			s.Missing = append(s.Missing, argv[0])
			continue
		}
		toolCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, err := tools.Run(toolCtx, toolexec.Command(argv[0], argv[1:]...))
		cancel()
		if err != nil {
			s.Rulesets[name] = "error: " + err.Error()
			continue
		}
		s.Rulesets[name] = normalizeRuleset(string(out))
	}
	var errs []error
	if s.Links, err = snapshotLinks(); err != nil {
		errs = append(errs, err)
	}
	if s.Addrs, err = snapshotAddrs(); err != nil {
		errs = append(errs, err)
	}
	if s.Routes, err = snapshotRoutes(); err != nil {
		errs = append(errs, err)
	}
	if s.Rules, err = snapshotRules(); err != nil {
		errs = append(errs, err)
	}
	for _, g := range snapshotSysctlGlobs {
		matches, _ := filepath.Glob(filepath.Join(procSys, g))
		for _, m := range matches {
			if b, err := os.ReadFile(m); err == nil {
				s.Sysctls[strings.TrimPrefix(m, procSys+"/")] = strings.Join(strings.Fields(string(b)), " ")
			}
		}
	}
	// kube-proxy raises conntrack's hash table size here.
	if b, err := os.ReadFile("/sys/module/nf_conntrack/parameters/hashsize"); err == nil {
		s.Sysctls["/sys/module/nf_conntrack/parameters/hashsize"] = strings.TrimSpace(string(b))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("host snapshot: %w", err)
	}
	return s, nil
}

var (
	// ":KUBE-SERVICES - [12:3456]" and "[12:3456] -A ..." (iptables-save -c).
	reChainCounters = regexp.MustCompile(`\[\d+:\d+\]`)
	// nft: "counter packets 12 bytes 3456", set elements' "expires 1m2s".
	reNftCounters = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	reNftExpires  = regexp.MustCompile(` expires [0-9hmsd.]+`)
)

// normalizeRuleset strips what changes on an untouched host: counters,
// the "# Generated by ... on <date>" and "# Completed on <date>" lines.
func normalizeRuleset(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "# Generated by") || strings.HasPrefix(line, "# Completed on") {
			continue
		}
		line = reChainCounters.ReplaceAllString(line, "[0:0]")
		line = reNftCounters.ReplaceAllString(line, "counter packets 0 bytes 0")
		line = reNftExpires.ReplaceAllString(line, "")
		out = append(out, strings.TrimRight(line, " "))
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func snapshotLinks() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		// Administrative state and identity only: no statistics or carrier.
		out = append(out, fmt.Sprintf("%d %s type=%s mtu=%d mac=%s up=%t master=%d netnsid=%d",
			a.Index, a.Name, l.Type(), a.MTU, a.HardwareAddr, a.Flags&unix.IFF_UP != 0, a.MasterIndex, a.NetNsID))
	}
	slices.Sort(out)
	return out, nil
}

func snapshotAddrs() ([]string, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []string
	for _, a := range addrs {
		out = append(out, fmt.Sprintf("if=%d %s scope=%d label=%s", a.LinkIndex, a.IPNet, a.Scope, a.Label))
	}
	slices.Sort(out)
	return out, nil
}

func snapshotRoutes() ([]string, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []string
	for _, r := range routes {
		// Route.String has no table or type: add them.
		out = append(out, fmt.Sprintf("table=%d type=%d proto=%d %s", r.Table, r.Type, r.Protocol, r.String()))
	}
	slices.Sort(out)
	return out, nil
}

func snapshotRules() ([]string, error) {
	rules, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list policy rules: %w", err)
	}
	var out []string
	for _, r := range rules {
		out = append(out, fmt.Sprintf("%d %s", r.Priority, r.String()))
	}
	slices.Sort(out)
	return out, nil
}

// Diff returns a readable difference between two snapshots, "" when equal.
// Lines only in before start with "-", lines only in after with "+".
func Diff(before, after *HostSnapshot) string {
	var b strings.Builder
	if before.NetNS != after.NetNS {
		fmt.Fprintf(&b, "netns: - %d\n       + %d (snapshots of different network namespaces)\n", before.NetNS, after.NetNS)
	}
	diffLists(&b, "missing tools", before.Missing, after.Missing)
	for _, k := range unionKeys(before.Rulesets, after.Rulesets) {
		diffLists(&b, k, splitLines(before.Rulesets[k]), splitLines(after.Rulesets[k]))
	}
	diffLists(&b, "links", before.Links, after.Links)
	diffLists(&b, "addresses", before.Addrs, after.Addrs)
	diffLists(&b, "routes", before.Routes, after.Routes)
	diffLists(&b, "policy rules", before.Rules, after.Rules)
	for _, k := range unionKeys(before.Sysctls, after.Sysctls) {
		bv, bok := before.Sysctls[k]
		av, aok := after.Sysctls[k]
		switch {
		case bok && !aok:
			fmt.Fprintf(&b, "sysctl %s: - %s\n", k, bv)
		case !bok && aok:
			fmt.Fprintf(&b, "sysctl %s: + %s\n", k, av)
		case bv != av:
			fmt.Fprintf(&b, "sysctl %s: - %s + %s\n", k, bv, av)
		}
	}
	return b.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLists writes the lines that differ as multisets and, when the lines
// are the same but their order is not (rule order matters), says so.
func diffLists(b *strings.Builder, section string, before, after []string) {
	count := map[string]int{}
	for _, l := range before {
		count[l]++
	}
	for _, l := range after {
		count[l]--
	}
	var lines []string
	for _, l := range before {
		if count[l] > 0 {
			lines = append(lines, "  - "+l)
			count[l]--
		}
	}
	for _, l := range after {
		if count[l] < 0 {
			lines = append(lines, "  + "+l)
			count[l]++
		}
	}
	if len(lines) == 0 && !slices.Equal(before, after) {
		lines = append(lines, "  (same lines, different order)")
	}
	if len(lines) > 0 {
		fmt.Fprintf(b, "%s:\n%s\n", section, strings.Join(lines, "\n"))
	}
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
