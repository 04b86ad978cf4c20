package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/toolexec"
)

// A footprint is what of kube-proxy's is in the node, every mode's: its
// iptables chains and the rules in or to them (each backend), its
// nftables tables, its ipsets, IPVS virtual servers and the kube-ipvs0
// dummy interface. A cleanup must leave none; a migration leaves the old
// mode's unless the new mode's startup cleanup removes it.

// footprintItem is one kind of kube-proxy state: its count and names.
type footprintItem struct {
	kind  string // iptables-legacy, iptables-nft, nftables, ipset, ipvs, link
	owner string // the mode that writes it: iptables (iptables and ipvs modes), nftables or ipvs
	count string // the key of footprint counts
	n     int
	names []string
}

// footprintNames is how many names of one kind are listed.
const footprintNames = 5

// readFootprint reads every mode's kube-proxy state. Tools and kernel
// modules that are missing (no ip_set loaded, no legacy iptables tables)
// mean no state of that kind: kpsim does not load modules into the host.
func readFootprint(ctx context.Context, tools toolexec.Runner) ([]footprintItem, error) {
	var items []footprintItem
	for _, backend := range []string{rules.BackendLegacy, rules.BackendNFT} {
		if backend == rules.BackendLegacy && !exists("/proc/net/ip_tables_names") {
			continue // no legacy table exists: reading would load ip_tables
		}
		bin := "iptables-" + backend + "-save"
		if _, err := tools.LookPath(bin); err != nil {
			continue
		}
		out, err := tools.Run(ctx, toolexec.Command(bin))
		if err != nil {
			return nil, err
		}
		chains, rulesIn := kubeIPTables(out)
		items = append(items,
			footprintItem{kind: "iptables-" + backend, owner: scenarios.ModeIPTables, count: "iptables-" + backend + "/chains", n: len(chains), names: chains},
			footprintItem{kind: "iptables-" + backend, owner: scenarios.ModeIPTables, count: "iptables-" + backend + "/rules", n: rulesIn})
	}
	if _, err := tools.LookPath("nft"); err == nil {
		out, err := tools.Run(ctx, toolexec.Command("nft", "list", "tables"))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "table" && f[2] == "kube-proxy" {
				names = append(names, "table "+f[1]+" kube-proxy")
			}
		}
		items = append(items, footprintItem{kind: "nftables", owner: scenarios.ModeNFTables, count: "nftables/tables", n: len(names), names: names})
	}
	if exists("/sys/module/ip_set") {
		if _, err := tools.LookPath("ipset"); err == nil {
			out, err := tools.Run(ctx, toolexec.Command("ipset", "save"))
			if err != nil {
				return nil, err
			}
			sets, members := kubeIPSets(out)
			items = append(items,
				footprintItem{kind: "ipset", owner: scenarios.ModeIPVS, count: "ipset/sets", n: len(sets), names: sets},
				footprintItem{kind: "ipset", owner: scenarios.ModeIPVS, count: "ipset/members", n: members})
		}
	}
	if b, err := os.ReadFile("/proc/net/ip_vs"); err == nil {
		svcs, err := rules.ParseProcIPVS(b)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range svcs {
			names = append(names, "virtual server "+s.Key())
		}
		items = append(items, footprintItem{kind: "ipvs", owner: scenarios.ModeIPVS, count: "ipvs/virtualServers", n: len(svcs), names: names})
	}
	link := footprintItem{kind: "link", owner: scenarios.ModeIPVS, count: "link/kube-ipvs0"}
	if l, err := netlink.LinkByName("kube-ipvs0"); err == nil {
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		link.n = 1
		link.names = []string{fmt.Sprintf("link kube-ipvs0 (%s, %d addresses)", l.Type(), len(addrs))}
	}
	items = append(items, link)
	return items, nil
}

// kubeIPTables lists, from iptables-save output, kube-proxy's chains (as
// "table/chain") and counts the rules in them or jumping to them.
func kubeIPTables(save []byte) (chains []string, rulesIn int) {
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":KUBE-"):
			chains = append(chains, table+"/"+strings.Fields(l[1:])[0])
		case strings.HasPrefix(l, "-A "):
			if f := strings.Fields(l); strings.HasPrefix(f[1], "KUBE-") || strings.Contains(l, " -j KUBE-") {
				rulesIn++
			}
		}
	}
	return chains, rulesIn
}

// kubeIPSets lists kube-proxy's ipsets (KUBE-*) in ipset save output and
// counts their members.
func kubeIPSets(save []byte) (sets []string, members int) {
	for _, l := range strings.Split(string(save), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || !strings.HasPrefix(f[1], "KUBE-") {
			continue
		}
		switch f[0] {
		case "create":
			sets = append(sets, "ipset "+f[1])
		case "add":
			members++
		}
	}
	return sets, members
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// footprintCounts flattens items into counts by key.
func footprintCounts(items []footprintItem) map[string]int {
	m := map[string]int{}
	for _, it := range items {
		m[it.count] += it.n
	}
	return m
}

// kubeProxyState names and counts every mode's kube-proxy state
// (cleanup: all of it must be gone).
func (n *node) kubeProxyState(ctx context.Context) ([]string, map[string]int, error) {
	items, err := readFootprint(ctx, n.tools)
	if err != nil {
		return nil, nil, fmt.Errorf("reading what is left of kube-proxy: %w", err)
	}
	return footprintNamed(items, func(footprintItem) bool { return true }), footprintCounts(items), nil
}

// footprintNamed names the items keep selects, at most footprintNames of
// each kind.
func footprintNamed(items []footprintItem, keep func(footprintItem) bool) []string {
	var names []string
	for _, it := range items {
		if it.n == 0 || !keep(it) {
			continue
		}
		for i, name := range it.names {
			if i == footprintNames {
				names = append(names, fmt.Sprintf("and %d more of %s", len(it.names)-i, it.count))
				break
			}
			names = append(names, it.kind+": "+name)
		}
		if len(it.names) == 0 {
			names = append(names, fmt.Sprintf("%s: %d", it.count, it.n))
		}
	}
	return names
}

// leftovers names the state of mode old that is still in the node after a
// migration to next, apart from what next writes itself (IPVS mode writes
// iptables rules too), with its counts.
func (n *node) leftovers(ctx context.Context, old, next scenarios.ModeSpec) ([]string, map[string]int, error) {
	items, err := readFootprint(ctx, n.tools)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the old mode's leftovers: %w", err)
	}
	owns := func(m scenarios.ModeSpec) []string {
		switch m.Mode {
		case scenarios.ModeIPVS:
			return []string{"iptables-" + m.Backend, "ipset", "ipvs", "link"}
		case scenarios.ModeIPTables:
			return []string{"iptables-" + m.Backend}
		}
		return []string{"nftables"}
	}
	keep := func(it footprintItem) bool {
		return slices.Contains(owns(old), it.kind) && !slices.Contains(owns(next), it.kind)
	}
	counts := map[string]int{}
	for _, it := range items {
		if keep(it) && it.n > 0 {
			counts[it.count] += it.n
		}
	}
	return footprintNamed(items, keep), counts, nil
}
