package node

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// Replies is where a probe's answered connections landed, set against an
// Expectation: the Endpoints, Expected and Stray fields of a
// reports.Probe.
type Replies struct {
	// Endpoints counts replies by endpoint address:port as text; never
	// nil.
	Endpoints map[string]int
	// Expected are the eligible endpoints as text, in Eligible's order;
	// nil when none is eligible.
	Expected []string
	// Stray counts replies from endpoints that are not eligible.
	Stray int
}

// Tally sets the replies counted per endpoint (address:port that received
// the connection, after DNAT) against exp.
func Tally(exp Expectation, replies map[netip.AddrPort]int) Replies {
	out := Replies{Endpoints: make(map[string]int, len(replies))}
	eligible := make(map[netip.AddrPort]bool, len(exp.Eligible))
	for _, ap := range exp.Eligible {
		eligible[ap] = true
		out.Expected = append(out.Expected, ap.String())
	}
	for ap, n := range replies {
		out.Endpoints[ap.String()] = n
		if !eligible[ap] {
			out.Stray += n
		}
	}
	return out
}

// CheckProbe checks what a share test cannot: that connections landed
// only on eligible endpoints, were all answered (or none, when there is no
// endpoint), kept or lost their source address as the policy says, stuck
// to one endpoint under session affinity, and took exact turns under IPVS
// round-robin. mode is the proxy mode (scenarios.ModeIPVS, ...) and
// scheduler the IPVS scheduler ("" for other modes). It reads nothing but
// its arguments.
func CheckProbe(pr reports.Probe, exp Expectation, mode, scheduler string) []reports.ProbeCheck {
	name := pr.Service + ":" + pr.Port
	var out []reports.ProbeCheck
	add := func(check string, passed bool, format string, args ...any) {
		out = append(out, reports.ProbeCheck{Service: name, Check: check, Passed: passed, Detail: fmt.Sprintf(format, args...)})
	}
	if len(exp.Eligible) == 0 {
		add("no endpoint: no answer", pr.OK == 0, "%d of %d connections answered although no endpoint may take them", pr.OK, pr.Sent)
		return out
	}
	add("answered", pr.OK == pr.Sent, "%d of %d answered, failures %v", pr.OK, pr.Sent, pr.Failures)
	add("only eligible endpoints", pr.Stray == 0, "%d replies from endpoints outside %s", pr.Stray, exp.Rule)
	if sp := exp.SourcePreserved; sp != nil && pr.OK > 0 {
		if *sp {
			add("source preserved", pr.SourcePreserved == pr.OK, "%d of %d replies saw the client's own address", pr.SourcePreserved, pr.OK)
		} else {
			add("source masqueraded", pr.SourcePreserved == 0, "%d of %d replies saw the client's own address", pr.SourcePreserved, pr.OK)
		}
	}
	if exp.Affinity {
		add("session affinity: one endpoint", len(pr.Endpoints) == 1, "connections reached %d endpoints", len(pr.Endpoints))
	}
	if mode == scenarios.ModeIPVS && scheduler == "rr" && !exp.Affinity {
		counts := make([]int, 0, len(pr.Endpoints))
		for _, c := range pr.Endpoints {
			counts = append(counts, c)
		}
		sort.Ints(counts)
		// Eligible is not empty here, so equal lengths mean counts is not.
		exact := len(counts) == len(exp.Eligible) && counts[0] == counts[len(counts)-1]
		add("round-robin exact", exact, "per-endpoint counts %v", counts)
	}
	return out
}
