package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// dataPath runs a datapath step: rounds of new connections to sampled
// Services' ClusterIPs and straight to their endpoints, in the dataplane
// process pinned to one CPU (netns.PodNetwork.DataPath), summed into a
// reports.DataPath.
func (n *node) dataPath(ctx context.Context, st scenarios.Step) error {
	d := st.DataPath
	targets := n.dataPathTargets(d)
	if len(targets) == 0 {
		return fmt.Errorf("no Service to measure: none %s is a non-headless Service with a TCP port and an endpoint this node's client may reach", groupPhrase(d.Group))
	}
	per := d.ConnectionsFor(n.inVM) / (d.Rounds * len(targets))
	if per < 1 {
		return fmt.Errorf("%d connections per kind over %d Services and %d rounds: less than one each", d.ConnectionsFor(n.inVM), len(targets), d.Rounds)
	}
	dp := reports.DataPath{Step: st.Name, Rounds: d.Rounds, Concurrency: d.Concurrency, ConnectionsPerRound: per, CPU: -1}
	if d.CPU != nil {
		dp.CPU = *d.CPU
	}
	for _, t := range targets {
		dp.Services = append(dp.Services, reports.DataPathService{Name: t.svc.Key() + portSuffix(t.port.Name),
			Target: t.target.String(), Endpoints: len(t.exp.Eligible)})
	}
	if n.ms.Mode == scenarios.ModeIPTables {
		if err := n.chainPositions(ctx, &dp, targets); err != nil {
			dp.PositionError = err.Error()
		}
	}
	cpu := dp.CPU
	for r := range d.Rounds {
		n.emitProgress(ProgressEvent{Step: st.Name, Unit: "rounds", Done: r, Of: d.Rounds}, r == 0)
		spec := netns.DataPathSpec{Connections: per, Concurrency: d.Concurrency, Timeout: n.probeTimeout, CPU: cpu, Round: r}
		for j, t := range targets {
			spec.Targets = append(spec.Targets, netns.DataPathTarget{Service: t.target, Direct: directTarget(t.exp.Eligible, r, j)})
		}
		res, err := n.pods.DataPath(ctx, spec)
		if err != nil {
			return err
		}
		// Later rounds pin the CPU the first one chose.
		cpu, dp.CPU, dp.WindowMax = res.CPU, res.CPU, res.WindowMax
		if len(res.Service) != len(targets) || len(res.Direct) != len(targets) {
			return fmt.Errorf("round %d: %d and %d runs for %d Services", r, len(res.Service), len(res.Direct), len(targets))
		}
		var round reports.DataPathRound
		for j, t := range targets {
			sv, dr := dataPathKind(res.Service[j]), dataPathKind(res.Direct[j])
			round.Service.Add(sv)
			round.Direct.Add(dr)
			s := &dp.Services[j]
			s.Service.Add(sv)
			s.Direct.Add(dr)
			s.Stray += strayReplies(res.Service[j].Endpoints, t.exp.Eligible) +
				strayReplies(res.Direct[j].Endpoints, []netip.AddrPort{spec.Targets[j].Direct})
		}
		dp.ByRound = append(dp.ByRound, round)
		dp.Service.Add(round.Service)
		dp.Direct.Add(round.Direct)
	}
	dp.Figures = reports.NewDataPathFigures(&dp)
	n.res.DataPaths = append(n.res.DataPaths, dp)
	var errs []error
	for kind, k := range map[string]reports.DataPathKind{"through the Services": dp.Service, "straight to the pods": dp.Direct} {
		if k.OK == 0 {
			errs = append(errs, fmt.Errorf("no connection %s was answered (%d made; failures %v)", kind, k.Sent, k.Failures))
		}
	}
	return errors.Join(errs...)
}

// dataPathTargets samples the step's Services: the candidates (in the
// step's group, not headless, with a TCP port and an endpoint the client
// pod may reach through the ClusterIP) in creation order, evenly spaced
// over the whole list. Each is measured on its first TCP port.
func (n *node) dataPathTargets(d *scenarios.DataPathStep) []probeTarget {
	model := n.cluster.Snapshot()
	var candidates []probeTarget
	for _, svc := range model.Services {
		if (d.Group != "" && svc.Group != d.Group) || svc.Headless || !svc.ClusterIP.IsValid() {
			continue
		}
		i := slices.IndexFunc(svc.Ports, func(p sim.Port) bool { return p.Protocol == corev1.ProtocolTCP })
		if i < 0 {
			continue
		}
		port := svc.Ports[i]
		exp := Expect(ExpectInput{Service: svc, Port: port, Group: n.group(svc.Group), Node: n.s.Spec.Cluster.Node,
			MasqueradeAll: n.masqueradeAll(), From: scenarios.FromPod, Target: scenarios.TargetClusterIP, Mode: n.ms.Mode})
		if len(exp.Eligible) == 0 {
			continue
		}
		candidates = append(candidates, probeTarget{svc: svc, port: port, target: netip.AddrPortFrom(svc.ClusterIP, uint16(port.Port)), exp: exp})
	}
	var out []probeTarget
	for _, i := range spreadSample(len(candidates), d.Services) {
		out = append(out, candidates[i])
	}
	return out
}

// spreadSample picks k of n indices evenly spaced over [0, n): the middle
// of each of k equal parts. All n when k >= n.
func spreadSample(n, k int) []int {
	if k >= n {
		k = n
	}
	out := make([]int, 0, k)
	for i := range k {
		out = append(out, (2*i+1)*n/(2*k))
	}
	return out
}

// directTarget is the endpoint round r's direct connections to target j
// go to: each endpoint in turn, a different one for neighbouring targets.
func directTarget(eligible []netip.AddrPort, r, j int) netip.AddrPort {
	return eligible[(r+j)%len(eligible)]
}

// strayReplies counts the replies from endpoints not in allowed.
func strayReplies(got map[netip.AddrPort]int, allowed []netip.AddrPort) int {
	n := 0
	for ep, c := range got {
		if !slices.Contains(allowed, ep) {
			n += c
		}
	}
	return n
}

func dataPathKind(r netns.DataPathRun) reports.DataPathKind {
	k := reports.DataPathKind{Sent: r.Sent, OK: r.OK, Seconds: r.Seconds, ProcessSeconds: r.ProcessSeconds,
		ProcessSystemSeconds: r.ProcessSystemSeconds, Windows: r.Windows,
		// The result schema's mirror of netns.CPUTimes: a field added to
		// one and not the other stops this conversion compiling.
		CPU: reports.CPUTicks(r.CPU)}
	for f, c := range r.Failures {
		if k.Failures == nil {
			k.Failures = map[string]int{}
		}
		k.Failures[string(f)] = c
	}
	return k
}

// chainPositions reads iptables' nat KUBE-SERVICES and places each target
// in it.
func (n *node) chainPositions(ctx context.Context, dp *reports.DataPath, targets []probeTarget) error {
	dump, err := rules.ReadIPTables(ctx, n.tools, n.ms.Backend)
	if err != nil {
		return err
	}
	chain, err := rules.IPTablesChainRules(dump.IPv4, "nat", "KUBE-SERVICES")
	if err != nil {
		return err
	}
	dp.ChainRules = len(chain)
	var missing []string
	for j, t := range targets {
		dp.Services[j].Position = chainPosition(chain, t.target, "tcp")
		if dp.Services[j].Position == 0 {
			missing = append(missing, t.target.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no KUBE-SERVICES rule for %s", strings.Join(missing, ", "))
	}
	return nil
}

// chainPosition is the place, from 1, of the first rule of chain (as
// iptables-save prints them) that matches destination dst and protocol
// proto: "-d IP/32 -p proto ... --dport PORT"; 0 when none does.
func chainPosition(chain []string, dst netip.AddrPort, proto string) int {
	ip, port := dst.Addr().String()+"/32", strconv.Itoa(int(dst.Port()))
	for i, rule := range chain {
		f := strings.Fields(rule)
		var d, p, dport bool
		for k := 0; k+1 < len(f); k++ {
			switch f[k] {
			case "-d":
				d = f[k+1] == ip
			case "-p":
				p = f[k+1] == proto
			case "--dport":
				dport = f[k+1] == port
			}
		}
		if d && p && dport {
			return i + 1
		}
	}
	return 0
}

func groupPhrase(g string) string {
	if g == "" {
		return "in any group"
	}
	return "in group " + g
}
