package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"

	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/toolexec"
)

// A tamper step changes kube-proxy's rules with the standard tools, as an
// operator or another agent would, then polls the rules until they are
// again what they were before (normalized as the oracle's dumps are) or
// the timeout passes. kube-proxy not repairing something is a finding:
// the step records it and succeeds.

// tamperPollMin is the shortest interval between two reads of the rules;
// a slow reader (nft at many Services) is polled at three times its read
// time, so polling takes at most a quarter of a core.
const tamperPollMin = 200 * time.Millisecond

func (n *node) tamper(ctx context.Context, i int, st scenarios.Step) error {
	t := st.Tamper
	lc := &reports.Lifecycle{Step: st.Name, Action: st.Action(), Mode: modeText(*n.ms)}
	timeout := n.tamperTimeout(t)
	lc.RepairTimeoutSeconds = timeout.Seconds()
	// The reference: kube-proxy's rules once it has programmed the API as
	// it is.
	if _, err := n.waitSynced(ctx, scenarios.DefaultLifecycleWait); err != nil {
		return n.endLifecycle(lc, nil, err)
	}
	before, err := n.normalizedRules(ctx)
	if err != nil {
		return n.endLifecycle(lc, nil, err)
	}
	w := n.startWatch(ctx, i, t.Probes, t.Service, "before")
	svc := t.Service
	if svc == "" && len(w.targets) > 0 {
		svc = w.targets[0].svc
	}
	if t.Action == scenarios.TamperDeleteService {
		lc.TamperTarget = svc
	}
	syncsBefore := len(n.proxier.Syncs())
	lc.Tamper, err = n.doTamper(ctx, t, svc)
	at := time.Now()
	if err != nil {
		return n.endLifecycle(lc, w, fmt.Errorf("tampering: %w", err))
	}
	w.markAt("tamper", at)
	w.phaseAt("tampered", at)

	deadline := at.Add(timeout)
	var last string
	var seen time.Time // the repair seen, or the timeout
	for first := true; ; first = false {
		began := time.Now()
		now, err := n.normalizedRules(ctx)
		if err != nil {
			return n.endLifecycle(lc, w, err)
		}
		read := time.Since(began)
		if now == before {
			// Unchanged at kpsim's first read: kube-proxy repaired it
			// before the read ended (IPVS mode's periodic sync can, and
			// a read in a VM takes seconds). A sync that repairs may end
			// after the read, so no sync need be seen yet. (A tamper
			// whose target is missing fails in its own command.)
			lc.RepairedBeforeFirstRead = first
			seen = time.Now()
			lc.Repaired, lc.RepairSeconds = true, seen.Sub(at).Seconds()
			w.markAt("repaired", seen)
			w.phaseAt("repaired", seen)
			break
		}
		last = now
		if seen = time.Now(); seen.After(deadline) {
			lc.Unrepaired = firstLines(rules.DiffNormalized(before, last), 20)
			break
		}
		if err := sleep(ctx, max(tamperPollMin, 3*read)); err != nil {
			return n.endLifecycle(lc, w, err)
		}
	}
	err = sleep(ctx, afterTail)
	// The syncs that began before the repair was seen (or the timeout),
	// counted after the tail, so that one still running then counts if
	// it has ended. (Syncs is empty when kube-proxy's process could not
	// answer.)
	syncs := n.proxier.Syncs()
	for _, s := range syncs[min(syncsBefore, len(syncs)):] {
		if s.Start.After(seen) {
			continue
		}
		lc.RepairSyncs++
		if s.Full {
			lc.RepairFull++
		}
	}
	return n.endLifecycle(lc, w, err)
}

// tamperTimeout is the step's timeout, or twice the sync period plus
// 10 s. syncPeriod paces what could repair a tamper: iptables mode's
// canary check, IPVS mode's periodic sync and every mode's retry of a
// failed sync. (iptables and nftables modes sync periodically only every
// hour, proxyutil.FullSyncPeriod.)
func (n *node) tamperTimeout(t *scenarios.TamperStep) time.Duration {
	if t.Timeout != nil {
		return t.Timeout.Duration
	}
	period := 30 * time.Second // kube-proxy's default
	if d := n.ms.Proxy.SyncPeriod; d != nil {
		period = d.Duration
	} else if d := n.s.Spec.Proxy.SyncPeriod; d != nil {
		period = d.Duration
	}
	return 2*period + 10*time.Second
}

// normalizedRules reads kube-proxy's rules in the current mode,
// normalized as the oracle's dumps are. Unlike the oracle, it keeps the
// chains no packet reaches: kube-proxy's canaries are such chains, and a
// tamper compares one kube-proxy with itself, so no stale chain of a
// partial sync can come between.
func (n *node) normalizedRules(ctx context.Context) (string, error) {
	d, err := n.readDump(ctx)
	if err != nil {
		return "", err
	}
	text := d.Normalize()
	if n.ms.Mode == scenarios.ModeIPVS {
		// Draining real servers: a rebuilt virtual server has none.
		text, _ = rules.WithoutWeightZero(text)
	}
	return text, nil
}

// doTamper runs the tamper and returns it as commands.
func (n *node) doTamper(ctx context.Context, t *scenarios.TamperStep, svc string) ([]string, error) {
	run := func(c toolexec.Cmd) ([]string, error) {
		_, err := n.tools.Run(ctx, c)
		return []string{c.String()}, err
	}
	ipt := "iptables-" + n.ms.Backend
	switch t.Action {
	case scenarios.TamperFlushChain:
		chain := t.Chain
		if n.ms.Mode == scenarios.ModeNFTables {
			if chain == "" {
				chain = "services"
			}
			return run(toolexec.Command("nft", "flush", "chain", "ip", "kube-proxy", chain))
		}
		if chain == "" {
			chain = "nat/KUBE-SERVICES"
		}
		table, name, _ := strings.Cut(chain, "/")
		return run(toolexec.Command(ipt, "-w", "-t", table, "-F", name))
	case scenarios.TamperFlushTable:
		if n.ms.Mode == scenarios.ModeNFTables {
			return run(toolexec.Command("nft", "flush", "table", "ip", "kube-proxy"))
		}
		table := t.Table
		if table == "" {
			table = "nat"
		}
		// The usual reset: every rule, then every chain left empty.
		flush, err := run(toolexec.Command(ipt, "-w", "-t", table, "-F"))
		if err != nil {
			return flush, err
		}
		del, err := run(toolexec.Command(ipt, "-w", "-t", table, "-X"))
		return append(flush, del...), err
	case scenarios.TamperDeleteTable:
		return run(toolexec.Command("nft", "delete", "table", "ip", "kube-proxy"))
	case scenarios.TamperFlushIPSet:
		return run(toolexec.Command("ipset", "flush", t.Set))
	case scenarios.TamperDeleteService:
		if svc == "" {
			return nil, fmt.Errorf("no Service to delete")
		}
		switch n.ms.Mode {
		case scenarios.ModeIPTables:
			return n.deleteIPTablesService(ctx, svc)
		case scenarios.ModeNFTables:
			return n.deleteNFTablesService(ctx, svc)
		case scenarios.ModeIPVS:
			return n.deleteVirtualServers(svc)
		}
	}
	return nil, fmt.Errorf("tamper %s: not for mode %s", t.Action, n.ms.Mode)
}

// deleteIPTablesService removes the Service's ClusterIP jumps from
// KUBE-SERVICES and flushes the chains they jumped to (deleting those
// nothing else jumps to), in one iptables-restore --noflush transaction.
func (n *node) deleteIPTablesService(ctx context.Context, svc string) ([]string, error) {
	save, err := n.tools.Run(ctx, toolexec.Command("iptables-"+n.ms.Backend+"-save", "-t", "nat"))
	if err != nil {
		return nil, err
	}
	var dels []string
	targets := map[string]bool{}
	lines := strings.Split(string(save), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "-A KUBE-SERVICES ") && (strings.Contains(l, `--comment "`+svc+`:`) || strings.Contains(l, `--comment "`+svc+` cluster IP"`)) {
			dels = append(dels, "-D"+strings.TrimPrefix(l, "-A"))
			if f := strings.Fields(l); len(f) > 1 && f[len(f)-2] == "-j" {
				targets[f[len(f)-1]] = true
			}
		}
	}
	if len(dels) == 0 {
		return nil, fmt.Errorf("no KUBE-SERVICES rule of Service %s in table nat (did an earlier tamper that kube-proxy did not repair remove it?)", svc)
	}
	script := []string{"*nat"}
	script = append(script, dels...)
	for chain := range targets {
		if !strings.HasPrefix(chain, "KUBE-SVC-") && !strings.HasPrefix(chain, "KUBE-SVL-") {
			continue
		}
		script = append(script, "-F "+chain)
		others := 0
		for _, l := range lines {
			if strings.HasSuffix(l, " -j "+chain) && !strings.HasPrefix(l, "-A KUBE-SERVICES ") {
				others++
			}
		}
		if others == 0 {
			script = append(script, "-X "+chain)
		}
	}
	script = append(script, "COMMIT", "")
	c := toolexec.Cmd{Name: "iptables-" + n.ms.Backend + "-restore", Args: []string{"-w", "--noflush"}, Stdin: strings.Join(script, "\n")}
	if _, err := n.tools.Run(ctx, c); err != nil {
		return nil, err
	}
	return append([]string{c.String() + " <<EOF"}, append(script[:len(script)-1], "EOF")...), nil
}

// serviceChain matches kube-proxy's nftables per-Service chain names:
// service-HASH-NAMESPACE/NAME/PROTOCOL/PORT.
var serviceChain = regexp.MustCompile(`^service-[A-Z0-9]+-([^/]+)/([^/]+)/`)

// deleteNFTablesService deletes the Service's elements of the service-ips
// map: its ClusterIPs no longer lead to its chain.
func (n *node) deleteNFTablesService(ctx context.Context, svc string) ([]string, error) {
	out, err := n.tools.Run(ctx, toolexec.Command("nft", "-j", "list", "map", "ip", "kube-proxy", "service-ips"))
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nftables []struct {
			Map *struct {
				Elem [][2]json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parsing nft -j list map: %w", err)
	}
	var cmds []string
	for _, o := range doc.Nftables {
		if o.Map == nil {
			continue
		}
		for _, e := range o.Map.Elem {
			var key struct {
				Concat []any `json:"concat"`
			}
			var verdict struct {
				Goto *struct {
					Target string `json:"target"`
				} `json:"goto"`
			}
			if json.Unmarshal(e[0], &key) != nil || json.Unmarshal(e[1], &verdict) != nil || verdict.Goto == nil {
				continue
			}
			m := serviceChain.FindStringSubmatch(verdict.Goto.Target)
			if m == nil || m[1]+"/"+m[2] != svc {
				continue
			}
			var parts []string
			for _, k := range key.Concat {
				parts = append(parts, fmt.Sprint(k))
			}
			c := toolexec.Command("nft", "delete", "element", "ip", "kube-proxy", "service-ips", "{ "+strings.Join(parts, " . ")+" }")
			if _, err := n.tools.Run(ctx, c); err != nil {
				return cmds, err
			}
			cmds = append(cmds, c.String())
		}
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no element of map service-ips leads to Service %s (did an earlier tamper that kube-proxy did not repair remove it?)", svc)
	}
	return cmds, nil
}

// deleteVirtualServers deletes the IPVS virtual servers of the Service's
// ClusterIP ports, through the same netlink interface kube-proxy uses
// (the guest has no ipvsadm); the commands say what ipvsadm would.
func (n *node) deleteVirtualServers(svc string) ([]string, error) {
	var found bool
	var cmds []string
	for _, s := range n.cluster.Snapshot().Services {
		if s.Key() != svc {
			continue
		}
		found = true
		h := utilipvs.New()
		for _, p := range s.Ports {
			vs := &utilipvs.VirtualServer{Address: net.IP(s.ClusterIP.AsSlice()), Protocol: string(p.Protocol), Port: uint16(p.Port)}
			if err := h.DeleteVirtualServer(vs); err != nil {
				return cmds, fmt.Errorf("deleting IPVS virtual server %s:%d/%s: %w", s.ClusterIP, p.Port, p.Protocol, err)
			}
			flag := map[string]string{"TCP": "-t", "UDP": "-u", "SCTP": "--sctp-service"}[string(p.Protocol)]
			cmds = append(cmds, "ipvsadm -D "+flag+" "+net.JoinHostPort(s.ClusterIP.String(), strconv.Itoa(int(p.Port)))+" (netlink)")
		}
	}
	if !found {
		return nil, fmt.Errorf("no Service %s in the API", svc)
	}
	return cmds, nil
}

func firstLines(s string, k int) string {
	lines := strings.SplitN(s, "\n", k+1)
	if len(lines) > k {
		lines[k] = "..."
	}
	return strings.Join(lines, "\n")
}
