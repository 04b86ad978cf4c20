package rules

import (
	"fmt"
	"math/big"
)

// IPVS: each virtual server's scheduler picks the real server of a new
// connection from the real servers and their weights; a weight of 0
// quiesces a real server (kube-proxy sets it on terminating endpoints): it
// keeps its connections and gets no new one. Only two schedulers fix the
// long-run split by the table alone:
//   - rr (net/netfilter/ipvs/ip_vs_rr.c, ip_vs_rr_schedule) takes the real
//     servers in list order, skipping those with weight 0 (or overloaded:
//     an upper connection threshold, which kube-proxy never sets). The
//     weight's value plays no part: of every n new connections each of the
//     n real servers with weight > 0 gets exactly one, a share of 1/n.
//   - wrr (ip_vs_wrr.c, ip_vs_wrr_schedule) lowers a current weight cw from
//     the largest weight to the gcd of the weights in steps of that gcd and
//     at each step takes, in list order, every real server whose weight is
//     at least cw: over one cycle of Σw/gcd connections a real server of
//     weight w gets w/gcd of them, a share of w/Σw.
//
// Every other scheduler decides by state or by hashing, not by the table:
// lc, wlc, sed, nq, fo, ovf, lblc and lblcr by connection counts, twos
// by the load of two real servers drawn at random, sh, dh and mh by a hash
// of the source or destination address (one client always reaches the
// same real server). ImpliedIPVS refuses them. Like the rr and wrr shares above, the
// shares are those of a new client: persistence (session affinity) only
// sends a known client back to its real server.

// ImpliedIPVS returns the shares implied by the IPVS table (the text of
// /proc/net/ip_vs, see ParseProcIPVS), keyed by virtual server as
// IPVSService.Key prints it ("TCP 10.96.0.10:80"). The table knows virtual
// servers, not Services: Service is left empty and Chain is the key, for
// the caller to map a Service's ClusterIP, node address and NodePort,
// external or load-balancer IP to it. Endpoints are in kernel (list)
// order, real servers with weight 0 included with share 0; a virtual
// server whose real servers all have weight 0 takes no new connection
// (Unmatched 1). Virtual servers without real servers are left out. A
// scheduler other than rr and wrr is an error (see above).
func ImpliedIPVS(procIPVS []byte) (map[string]ServiceShares, error) {
	svcs, err := ParseProcIPVS(procIPVS)
	if err != nil {
		return nil, err
	}
	out := map[string]ServiceShares{}
	for _, svc := range svcs {
		if len(svc.Dests) == 0 {
			continue
		}
		key := svc.Key()
		if _, ok := out[key]; ok {
			return nil, fmt.Errorf("virtual server %s listed twice", key)
		}
		s, err := impliedIPVSService(svc)
		if err != nil {
			return nil, fmt.Errorf("virtual server %s: %w", key, err)
		}
		out[key] = s
	}
	return out, nil
}

// impliedIPVSService computes one virtual server's shares.
func impliedIPVSService(svc IPVSService) (ServiceShares, error) {
	s := ServiceShares{Chain: svc.Key()}
	// weight returns what a real server counts for under the scheduler.
	var weight func(IPVSDest) int64
	switch svc.Scheduler {
	case "rr":
		weight = func(d IPVSDest) int64 { return min(int64(d.Weight), 1) }
	case "wrr":
		weight = func(d IPVSDest) int64 { return int64(d.Weight) }
	default:
		return s, fmt.Errorf("scheduler %s: the table fixes no split (only rr and wrr do)", svc.Scheduler)
	}
	total := new(big.Int)
	seen := map[string]bool{}
	for _, d := range svc.Dests {
		if d.Weight < 0 {
			return s, fmt.Errorf("real server %s: negative weight %d", d.Address, d.Weight)
		}
		ep := d.Address.String()
		if seen[ep] {
			return s, fmt.Errorf("real server %s listed twice", ep)
		}
		seen[ep] = true
		total.Add(total, big.NewInt(weight(d)))
	}
	for _, d := range svc.Dests {
		p := 0.0
		if total.Sign() > 0 {
			p, _ = new(big.Rat).SetFrac(big.NewInt(weight(d)), total).Float64()
		}
		s.Endpoints = append(s.Endpoints, EndpointShare{Endpoint: d.Address.String(), Probability: p})
	}
	if total.Sign() == 0 {
		s.Unmatched = 1
	}
	return s, nil
}
