package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// probeTarget is one Service port a probe step sends connections to.
type probeTarget struct {
	svc    sim.Service
	port   sim.Port
	target netip.AddrPort
	exp    Expectation
}

// probe sends real connections to the sampled Services of the step,
// checks where each landed against the expected endpoints, and runs the
// distribution test over the step's Services.
func (n *node) probe(ctx context.Context, index int, st scenarios.Step) error {
	p := st.Probe
	model := n.cluster.Snapshot()
	var candidates []sim.Service
	for _, svc := range model.Services {
		if (p.Group == "" || svc.Group == p.Group) && !svc.Headless {
			candidates = append(candidates, svc)
		}
	}
	// The sample is drawn with the scenario's seed and the step index, so
	// the same scenario probes the same Services in every mode.
	rng := rand.New(rand.NewPCG(uint64(n.s.Spec.Seed), uint64(index)))
	rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	if p.Services > 0 && p.Services < len(candidates) {
		candidates = candidates[:p.Services]
	}
	var targets []probeTarget
	for _, svc := range candidates {
		for _, port := range svc.Ports {
			if t, ok := n.target(svc, port, p.Target); ok {
				targets = append(targets, probeTarget{svc: svc, port: port, target: t, exp: Expect(ExpectInput{
					Service: svc, Port: port, Group: n.group(svc.Group), Node: n.s.Spec.Cluster.Node,
					MasqueradeAll: n.masqueradeAll(), From: p.From, Target: p.Target, Mode: n.ms.Mode,
				})})
			}
		}
	}

	// The power calculation over the Services that take a share test: it
	// sets the count when the scenario leaves it to kpsim, and otherwise
	// says what the scenario's count can detect.
	var eligible []int
	for _, t := range targets {
		if !t.exp.Affinity {
			eligible = append(eligible, len(t.exp.Eligible))
		}
	}
	sd := reports.StepDistribution{Step: st.Name}
	var err error
	connections := p.Connections
	if n.inVM && p.VMConnections > 0 {
		connections = p.VMConnections
	}
	if sd.Connections, sd.Plan, err = PlanConnections(*n.s.Spec.Expectations.DistributionAlpha, connections, p.PowerFor, eligible); err != nil {
		return err
	}
	if sd.Plan != nil {
		sd.ServicePower, sd.PooledPower = sd.Plan.PowerAt(sd.Connections)
	}
	implied, impliedErr := n.impliedShares(ctx, targets)
	if impliedErr != nil {
		sd.ImpliedError = impliedErr.Error()
	}

	from := netns.ClientKind(p.From)
	var samples []reports.ServiceSample
	for i, t := range targets {
		n.emitProgress(ProgressEvent{Step: st.Name, Unit: "Service ports probed", Done: i, Of: len(targets)}, i == 0)
		count := sd.Connections
		if n.ms.Mode == scenarios.ModeIPVS && n.ms.Scheduler == "rr" && len(t.exp.Eligible) > 0 {
			// Round-robin is exact: make every endpoint's turn whole.
			k := len(t.exp.Eligible)
			count = (count + k - 1) / k * k
		}
		spec := netns.ProbeSpec{From: from, Target: t.target, Protocol: protocol(t.port.Protocol), Count: count, Timeout: n.probeTimeout}
		r, err := n.probeTarget(ctx, spec, t.exp.Affinity)
		if err != nil {
			return fmt.Errorf("probing %s port %s: %w", t.svc.Key(), t.port.Name, err)
		}
		pr := probeResult(st.Name, t, p, r)
		n.res.Probes = append(n.res.Probes, pr)
		sd.Checks = append(sd.Checks, CheckProbe(pr, t.exp, n.ms.Mode, n.ms.Scheduler)...)
		if !t.exp.Affinity && len(t.exp.Eligible) > 1 {
			samples = append(samples, distributionSample(pr, t, implied))
		}
	}
	if len(samples) > 0 {
		rep, err := reports.AnalyzeDistribution(samples, reports.DistributionOptions{Alpha: *n.s.Spec.Expectations.DistributionAlpha})
		if err != nil {
			return fmt.Errorf("distribution test: %w", err)
		}
		sd.Report = rep
	}
	sd.Passed = sd.Report == nil || sd.Report.Passed
	for _, c := range sd.Checks {
		if !c.Passed {
			sd.Passed = false
		}
	}
	n.res.Distributions = append(n.res.Distributions, sd)
	return nil
}

// probeTarget probes one Service port. Under session affinity the first
// connection goes alone: affinity is recorded when a client's first
// connection passes, and connections racing it may legitimately land
// elsewhere (seen with nftables at 8 in flight); the rest must follow it.
func (n *node) probeTarget(ctx context.Context, spec netns.ProbeSpec, affinity bool) (netns.ProbeResult, error) {
	if !affinity || spec.Count < 2 {
		return n.pods.Probe(ctx, spec)
	}
	first := spec
	first.Count, first.Concurrency = 1, 1
	r, err := n.pods.Probe(ctx, first)
	if err != nil {
		return r, err
	}
	rest := spec
	rest.Count--
	r2, err := n.pods.Probe(ctx, rest)
	if err != nil {
		return r, err
	}
	r.Spec.Count = spec.Count
	r.Sent += r2.Sent
	r.OK += r2.OK
	r.SourcePreserved += r2.SourcePreserved
	r.Duration += r2.Duration
	r.ConntrackFlushes += r2.ConntrackFlushes
	for k, v := range r2.Failures {
		if r.Failures == nil {
			r.Failures = map[netns.FailureKind]int{}
		}
		r.Failures[k] += v
	}
	for ap, t := range r2.Endpoints {
		if r.Endpoints == nil {
			r.Endpoints = map[netip.AddrPort]*netns.EndpointTally{}
		}
		if cur, ok := r.Endpoints[ap]; ok {
			cur.Count += t.Count
			for src, c := range t.Sources {
				cur.Sources[src] += c
			}
		} else {
			r.Endpoints[ap] = t
		}
	}
	return r, nil
}

// impliedShares parses the shares the proxier's rules imply, keyed by
// impliedKey. iptables and nftables chains name their Service; the IPVS
// table names virtual servers only, so each target is looked up as the
// virtual server its connections are scheduled by (ClusterIP, node
// address and NodePort, or load-balancer IP, with the port's protocol).
func (n *node) impliedShares(ctx context.Context, targets []probeTarget) (map[string]rules.ServiceShares, error) {
	switch n.ms.Mode {
	case scenarios.ModeIPTables:
		d, err := rules.ReadIPTables(ctx, n.tools, n.ms.Backend)
		if err != nil {
			return nil, err
		}
		return rules.ImpliedIPTables(d.IPv4)
	case scenarios.ModeNFTables:
		d, err := rules.ReadNFTables(ctx, n.tools)
		if err != nil {
			return nil, err
		}
		return rules.ImpliedNFTables(d.JSON, "ip")
	case scenarios.ModeIPVS:
		d, err := rules.ReadIPVS(ctx, n.tools, n.ms.Backend)
		if err != nil {
			return nil, err
		}
		byVS, err := rules.ImpliedIPVS(d.ProcIPVS)
		if err != nil {
			return nil, err
		}
		return ipvsSharesByTarget(byVS, targets), nil
	}
	return nil, nil
}

// ipvsSharesByTarget keys the shares of IPVS virtual servers
// (rules.ImpliedIPVS) by the targets that reach them; a target without a
// virtual server gets none.
func ipvsSharesByTarget(byVS map[string]rules.ServiceShares, targets []probeTarget) map[string]rules.ServiceShares {
	out := map[string]rules.ServiceShares{}
	for _, t := range targets {
		vs := rules.IPVSService{Protocol: string(t.port.Protocol), Address: t.target}
		if s, ok := byVS[vs.Key()]; ok {
			s.Service, s.Local = t.svc.Key()+portSuffix(t.port.Name), t.exp.Local
			out[impliedKey(t)] = s
		}
	}
	return out
}

// impliedKey is the key of a target's shares in impliedShares' map:
// "ns/name:port" as kube-proxy's comments print it, plus rules.LocalSuffix
// when only node-local endpoints are eligible (iptables KUBE-SVL-*,
// nftables local-* chains).
func impliedKey(t probeTarget) string {
	key := t.svc.Key() + portSuffix(t.port.Name)
	if t.exp.Local {
		key += rules.LocalSuffix
	}
	return key
}

// portSuffix is ":name" for a named port, "" for an unnamed one.
func portSuffix(name string) string {
	if name == "" {
		return ""
	}
	return ":" + name
}

func probeResult(step string, t probeTarget, p *scenarios.ProbeStep, r netns.ProbeResult) reports.Probe {
	out := reports.Probe{
		Step: step, Service: t.svc.Key(), Port: t.port.Name, Protocol: string(t.port.Protocol),
		From: p.From, Target: r.Spec.Target.String(),
		Sent: r.Sent, OK: r.OK, SourcePreserved: r.SourcePreserved, Seconds: r.Duration.Seconds(),
		Rule: t.exp.Rule,
	}
	replies := make(map[netip.AddrPort]int, len(r.Endpoints))
	for ap, tally := range r.Endpoints {
		replies[ap] = tally.Count
	}
	rp := Tally(t.exp, replies)
	out.Endpoints, out.Expected, out.Stray = rp.Endpoints, rp.Expected, rp.Stray
	if len(r.Failures) > 0 {
		out.Failures = map[string]int{}
		for k, v := range r.Failures {
			out.Failures[string(k)] = v
		}
	}
	return out
}

// group is the scenario's service group of that name (nil: none, as for
// literal Services).
func (n *node) group(name string) *scenarios.ServiceGroup {
	for i := range n.s.Spec.ServiceGroups {
		if n.s.Spec.ServiceGroups[i].Name == name {
			return &n.s.Spec.ServiceGroups[i]
		}
	}
	return nil
}

// masqueradeAll is kube-proxy's masqueradeAll: the mode entry's, else
// the scenario's.
func (n *node) masqueradeAll() bool {
	if o := n.ms.Proxy.MasqueradeAll; o != nil {
		return *o
	}
	return n.s.Spec.Proxy.MasqueradeAll != nil && *n.s.Spec.Proxy.MasqueradeAll
}

// distributionSample lines up counts, expected and rule-implied shares by
// endpoint, in kube-proxy's order (address:port as text), so positions
// mean the same in every Service.
func distributionSample(pr reports.Probe, t probeTarget, implied map[string]rules.ServiceShares) reports.ServiceSample {
	key := pr.Service + portSuffix(pr.Port)
	names := append([]string(nil), pr.Expected...)
	for ep := range pr.Endpoints {
		if !slices.Contains(names, ep) {
			names = append(names, ep)
		}
	}
	sort.Strings(names)
	s := reports.ServiceSample{Service: key, Endpoints: names}
	k := float64(len(t.exp.Eligible))
	for _, ep := range names {
		share := 0.0
		if slices.Contains(pr.Expected, ep) {
			share = 1 / k
		}
		s.Expected = append(s.Expected, share)
		s.Counts = append(s.Counts, pr.Endpoints[ep])
	}
	if sh, ok := implied[impliedKey(t)]; ok {
		byEP := map[string]float64{}
		for _, e := range sh.Endpoints {
			byEP[e.Endpoint] = e.Probability
		}
		for _, ep := range names {
			s.Implied = append(s.Implied, byEP[ep])
		}
	}
	return s
}
