package rules

// This file and implied_*.go compute the traffic split the rules themselves
// imply: the exact probability that a new connection to a service is
// DNATed (or, for IPVS, scheduled) to each endpoint, from what the proxier
// wrote (iptables-save text, nft JSON, /proc/net/ip_vs), so that a report
// can separate an error in the rules from the sampling error of probes.

// LocalSuffix is appended to the service key of a local-traffic-policy
// chain (iptables KUBE-SVL-*, nftables local-*), which a service with
// externalTrafficPolicy or internalTrafficPolicy Local has beside its
// cluster-wide one.
const LocalSuffix = " (local)"

// ServiceShares is the split of new connections one service chain (or
// IPVS virtual server) implies.
type ServiceShares struct {
	// Service is "namespace/name:port" (the port's name; "namespace/name"
	// for an unnamed port), as kube-proxy's comments print it; empty from
	// ImpliedIPVS, as the IPVS table names no Service.
	Service string `json:"service"`
	// Chain is the service chain the shares were computed from, or the
	// IPVS virtual server (IPVSService.Key).
	Chain string `json:"chain"`
	// Local marks a local-traffic-policy chain.
	Local bool `json:"local,omitempty"`
	// Endpoints in chain order (cascade order, map key order, or IPVS
	// real server order): in iptables and nftables output a position means
	// the same in every service.
	Endpoints []EndpointShare `json:"endpoints"`
	// Unmatched is the probability that no branch applies (0 in kube-proxy
	// output: its last iptables branch is unconditional, its maps cover
	// every key; 1 for an IPVS virtual server whose real servers all have
	// weight 0).
	Unmatched float64 `json:"unmatched"`
}

// EndpointShare is one endpoint's exact share.
type EndpointShare struct {
	// Endpoint is address:port, IPv6 addresses in brackets.
	Endpoint string `json:"endpoint"`
	// Probability is the exact share (rounded only by the final
	// conversion to float64).
	Probability float64 `json:"probability"`
}

// Addresses returns the endpoints in chain order.
func (s ServiceShares) Addresses() []string {
	out := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.Endpoint
	}
	return out
}

// Probabilities returns the endpoints' shares in chain order.
func (s ServiceShares) Probabilities() []float64 {
	out := make([]float64, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.Probability
	}
	return out
}
