package node

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

func TestTally(t *testing.T) {
	ap := netip.MustParseAddrPort
	two := Expectation{Eligible: addrPorts("10.244.0.10:8080", "10.244.0.9:8080")}
	tests := []struct {
		name    string
		why     string
		exp     Expectation
		replies map[netip.AddrPort]int
		want    Replies
	}{
		{
			name:    "every reply from an eligible endpoint",
			why:     "Expected keeps Eligible's order (kube-proxy's, as text), so reports line endpoints up the same in every mode",
			exp:     two,
			replies: map[netip.AddrPort]int{ap("10.244.0.9:8080"): 3, ap("10.244.0.10:8080"): 5},
			want: Replies{Endpoints: map[string]int{"10.244.0.9:8080": 3, "10.244.0.10:8080": 5},
				Expected: []string{"10.244.0.10:8080", "10.244.0.9:8080"}},
		},
		{
			name:    "replies from other endpoints are stray",
			why:     "a reply from an endpoint the policy excludes (another node's under Local, another zone's under hints) is what the check must catch",
			exp:     two,
			replies: map[netip.AddrPort]int{ap("10.244.0.9:8080"): 3, ap("10.244.2.1:8080"): 4, ap("10.244.0.10:9090"): 1},
			want: Replies{Endpoints: map[string]int{"10.244.0.9:8080": 3, "10.244.2.1:8080": 4, "10.244.0.10:9090": 1},
				Expected: []string{"10.244.0.10:8080", "10.244.0.9:8080"}, Stray: 5},
		},
		{
			name: "no reply",
			why:  "Endpoints is an empty map, never nil, as the result schema has always written it",
			exp:  two,
			want: Replies{Endpoints: map[string]int{}, Expected: []string{"10.244.0.10:8080", "10.244.0.9:8080"}},
		},
		{
			name:    "no eligible endpoint: every reply is stray",
			why:     "a dropped or rejected Service (no endpoint, or Local policy without a local one) must not answer at all",
			replies: map[netip.AddrPort]int{ap("10.244.0.1:8080"): 2},
			want:    Replies{Endpoints: map[string]int{"10.244.0.1:8080": 2}, Stray: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Tally(tc.exp, tc.replies)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Tally (-want +got):\n%s\nwhy: %s", d, tc.why)
			}
		})
	}
}

func TestCheckProbe(t *testing.T) {
	three := addrPorts("10.244.0.1:8080", "10.244.1.1:8080", "10.244.2.1:8080")
	// probe is a clean result for three eligible endpoints, 30 connections
	// spread 10/10/10, every reply with the client's own source, changed
	// by set.
	probe := func(set func(p *reports.Probe)) reports.Probe {
		p := reports.Probe{
			Service: "ns/web", Port: "http", Sent: 30, OK: 30, SourcePreserved: 30,
			Endpoints: map[string]int{"10.244.0.1:8080": 10, "10.244.1.1:8080": 10, "10.244.2.1:8080": 10},
		}
		if set != nil {
			set(&p)
		}
		return p
	}
	check := func(name string, passed bool, detail string) reports.ProbeCheck {
		return reports.ProbeCheck{Service: "ns/web:http", Check: name, Passed: passed, Detail: detail}
	}
	answered := check("answered", true, "30 of 30 answered, failures map[]")
	eligible := check("only eligible endpoints", true, "0 replies from endpoints outside ready endpoints")

	tests := []struct {
		name      string
		why       string
		pr        reports.Probe
		exp       Expectation
		mode      string
		scheduler string
		want      []reports.ProbeCheck
	}{
		{
			name: "clean probe, source preserved",
			why:  "pod->ClusterIP keeps the source (iptables/proxier.go:1082-1093 masquerades only off-cluster sources)",
			pr:   probe(nil),
			exp:  Expectation{Eligible: three, SourcePreserved: kept, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, eligible, check("source preserved", true, "30 of 30 replies saw the client's own address")},
		},
		{
			name: "unanswered connections",
			why:  "every eligible endpoint answers, so a timeout means a missing or broken rule",
			pr: probe(func(p *reports.Probe) {
				p.OK, p.SourcePreserved = 27, 27
				p.Failures = map[string]int{"timeout": 2, "refused": 1}
				p.Endpoints["10.244.0.1:8080"] = 7
			}),
			exp:  Expectation{Eligible: three, SourcePreserved: kept, Rule: ruleReady},
			mode: scenarios.ModeNFTables,
			want: []reports.ProbeCheck{
				check("answered", false, "27 of 30 answered, failures map[refused:1 timeout:2]"),
				eligible,
				check("source preserved", true, "27 of 27 replies saw the client's own address"),
			},
		},
		{
			name: "stray replies",
			why:  "a reply from an endpoint outside the rule (e.g. another node's under Local policy) breaks the policy",
			pr:   probe(func(p *reports.Probe) { p.Stray = 4 }),
			exp:  Expectation{Eligible: three, Rule: ruleLocalReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, check("only eligible endpoints", false, "4 replies from endpoints outside "+ruleLocalReady)},
		},
		{
			name: "source expected preserved but masqueraded",
			why:  "externalTrafficPolicy Local keeps the client address (iptables/proxier.go:1147-1152, no KUBE-MARK-MASQ)",
			pr:   probe(func(p *reports.Probe) { p.SourcePreserved = 20 }),
			exp:  Expectation{Eligible: three, Local: true, SourcePreserved: kept, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, eligible, check("source preserved", false, "20 of 30 replies saw the client's own address")},
		},
		{
			name: "source masqueraded as expected",
			why:  "externalTrafficPolicy Cluster masquerades (iptables/proxier.go:1104-1110)",
			pr:   probe(func(p *reports.Probe) { p.SourcePreserved = 0 }),
			exp:  Expectation{Eligible: three, SourcePreserved: masqueraded, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, eligible, check("source masqueraded", true, "0 of 30 replies saw the client's own address")},
		},
		{
			name: "source expected masqueraded but kept",
			why:  "externalTrafficPolicy Cluster masquerades every external connection (iptables/proxier.go:1104-1110)",
			pr:   probe(func(p *reports.Probe) { p.SourcePreserved = 1 }),
			exp:  Expectation{Eligible: three, SourcePreserved: masqueraded, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, eligible, check("source masqueraded", false, "1 of 30 replies saw the client's own address")},
		},
		{
			name: "source unchecked",
			why:  "SourcePreserved nil (node clients, masqueradeAll): no source check",
			pr:   probe(func(p *reports.Probe) { p.SourcePreserved = 12 }),
			exp:  Expectation{Eligible: three, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, eligible},
		},
		{
			name: "nothing answered: no source check",
			why:  "with no reply there is no source to judge; \"answered\" already fails",
			pr:   probe(func(p *reports.Probe) { p.OK, p.SourcePreserved, p.Endpoints = 0, 0, map[string]int{} }),
			exp:  Expectation{Eligible: three, SourcePreserved: kept, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{check("answered", false, "0 of 30 answered, failures map[]"), eligible},
		},
		{
			name: "session affinity kept",
			why:  "ClientIP affinity sends one client to one endpoint (iptables/proxier.go:1238,1445 -m recent; ipvs/proxier.go:836-839 persistent)",
			pr:   probe(func(p *reports.Probe) { p.Endpoints = map[string]int{"10.244.1.1:8080": 30} }),
			exp:  Expectation{Eligible: three, Affinity: true, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{answered, eligible, check("session affinity: one endpoint", true, "connections reached 1 endpoints")},
		},
		{
			name:      "session affinity violated",
			why:       "ClientIP affinity: a second endpoint means the affinity entry was not honoured; IPVS rr is not checked under affinity",
			pr:        probe(func(p *reports.Probe) { p.Endpoints = map[string]int{"10.244.1.1:8080": 29, "10.244.2.1:8080": 1} }),
			exp:       Expectation{Eligible: three, Affinity: true, Rule: ruleReady},
			mode:      scenarios.ModeIPVS,
			scheduler: "rr",
			want:      []reports.ProbeCheck{answered, eligible, check("session affinity: one endpoint", false, "connections reached 2 endpoints")},
		},
		{
			name:      "IPVS round-robin exact",
			why:       "ipvs/proxier.go:1650 gives every real server weight 1; rr then takes exact turns",
			pr:        probe(nil),
			exp:       Expectation{Eligible: three, Rule: ruleReady},
			mode:      scenarios.ModeIPVS,
			scheduler: "rr",
			want:      []reports.ProbeCheck{answered, eligible, check("round-robin exact", true, "per-endpoint counts [10 10 10]")},
		},
		{
			name:      "IPVS round-robin uneven",
			why:       "equal weights under rr cannot give uneven counts",
			pr:        probe(func(p *reports.Probe) { p.Endpoints["10.244.0.1:8080"], p.Endpoints["10.244.1.1:8080"] = 11, 9 }),
			exp:       Expectation{Eligible: three, Rule: ruleReady},
			mode:      scenarios.ModeIPVS,
			scheduler: "rr",
			want:      []reports.ProbeCheck{answered, eligible, check("round-robin exact", false, "per-endpoint counts [9 10 11]")},
		},
		{
			name:      "IPVS round-robin misses an endpoint",
			why:       "every eligible endpoint is a real server with weight 1 (ipvs/proxier.go:1650), so each must get its turns",
			pr:        probe(func(p *reports.Probe) { p.Endpoints = map[string]int{"10.244.0.1:8080": 15, "10.244.1.1:8080": 15} }),
			exp:       Expectation{Eligible: three, Rule: ruleReady},
			mode:      scenarios.ModeIPVS,
			scheduler: "rr",
			want:      []reports.ProbeCheck{answered, eligible, check("round-robin exact", false, "per-endpoint counts [15 15]")},
		},
		{
			name:      "IPVS round-robin, nothing answered",
			why:       "no counts at all is not exact (and must not index an empty list)",
			pr:        probe(func(p *reports.Probe) { p.OK, p.SourcePreserved, p.Endpoints = 0, 0, map[string]int{} }),
			exp:       Expectation{Eligible: three, Rule: ruleReady},
			mode:      scenarios.ModeIPVS,
			scheduler: "rr",
			want: []reports.ProbeCheck{check("answered", false, "0 of 30 answered, failures map[]"), eligible,
				check("round-robin exact", false, "per-endpoint counts []")},
		},
		{
			name:      "IPVS with another scheduler: no exactness check",
			why:       "only rr promises exact turns; sh, lc and others do not",
			pr:        probe(func(p *reports.Probe) { p.Endpoints["10.244.0.1:8080"], p.Endpoints["10.244.1.1:8080"] = 20, 0 }),
			exp:       Expectation{Eligible: three, Rule: ruleReady},
			mode:      scenarios.ModeIPVS,
			scheduler: "sh",
			want:      []reports.ProbeCheck{answered, eligible},
		},
		{
			name:      "iptables: no exactness check",
			why:       "iptables picks endpoints with -m statistic --mode random, so only the share test applies",
			pr:        probe(func(p *reports.Probe) { p.Endpoints["10.244.0.1:8080"], p.Endpoints["10.244.1.1:8080"] = 12, 8 }),
			exp:       Expectation{Eligible: three, Rule: ruleReady},
			mode:      scenarios.ModeIPTables,
			scheduler: "rr",
			want:      []reports.ProbeCheck{answered, eligible},
		},
		{
			name: "no endpoint: nothing answered",
			why:  "a Service with no usable endpoint is REJECTed or DROPped (iptables/proxier.go:889-914); the only check",
			pr:   probe(func(p *reports.Probe) { p.OK, p.SourcePreserved, p.Endpoints = 0, 0, map[string]int{} }),
			exp:  Expectation{SourcePreserved: kept, Rule: ruleTerminating},
			mode: scenarios.ModeIPVS, scheduler: "rr",
			want: []reports.ProbeCheck{check("no endpoint: no answer", true, "0 of 30 connections answered although no endpoint may take them")},
		},
		{
			name: "no endpoint: answered anyway",
			why:  "with no eligible endpoint any answer is wrong (iptables/proxier.go:899-914 DROP under Local policy)",
			pr:   probe(func(p *reports.Probe) { p.OK, p.Stray, p.Endpoints = 5, 5, map[string]int{"10.244.1.1:8080": 5} }),
			exp:  Expectation{Local: true, SourcePreserved: kept, Rule: ruleLocalServingTm},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{check("no endpoint: no answer", false, "5 of 30 connections answered although no endpoint may take them")},
		},
		{
			name: "unnamed port",
			why:  "the check names the Service as ns/name:port, with an empty port name for an unnamed port",
			pr:   probe(func(p *reports.Probe) { p.Port = "" }),
			exp:  Expectation{Eligible: three, Rule: ruleReady},
			mode: scenarios.ModeIPTables,
			want: []reports.ProbeCheck{
				{Service: "ns/web:", Check: "answered", Passed: true, Detail: "30 of 30 answered, failures map[]"},
				{Service: "ns/web:", Check: "only eligible endpoints", Passed: true, Detail: "0 replies from endpoints outside ready endpoints"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckProbe(tc.pr, tc.exp, tc.mode, tc.scheduler)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("CheckProbe (-want +got):\n%s\nwhy: %s", d, tc.why)
			}
		})
	}
}
