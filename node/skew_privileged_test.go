package node

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/toolexec"
)

// The distribution test's self-check on a real kernel: a deliberately
// skewed ruleset (kube-proxy-style iptables cascades whose probabilities
// give one endpoint of one Service 20% more, and the endpoint at one
// chain position 2% more in every Service) must be flagged; the same
// ruleset with even shares must pass. Connections go through the kernel's
// DNAT from a fake client pod, exactly as kpsim run probes.

const skewNodeMain = "kpsim-skew-test"

func init() { netns.RegisterNodeMain(skewNodeMain, runSkewNode) }

type skewInput struct {
	Skewed      bool
	Services    int
	Endpoints   int
	Connections int
	Alpha       float64
}

const (
	skewService  = 0    // the Service with one endpoint +20%
	skewEndpoint = 4    // ... at this position
	skewPosition = 3    // the position +2% in every Service
	skewOne      = 0.20 // relative excesses
	skewAll      = 0.02
)

// skewShares are the intended shares of Service s.
func skewShares(in skewInput, s int) []float64 {
	k := in.Endpoints
	q := make([]float64, k)
	for i := range q {
		q[i] = 1 / float64(k)
	}
	if !in.Skewed {
		return q
	}
	bump := func(pos int, rel float64) {
		extra := q[pos] * rel
		q[pos] += extra
		for i := range q {
			if i != pos {
				q[i] -= extra / float64(k-1)
			}
		}
	}
	bump(skewPosition, skewAll)
	if s == skewService {
		bump(skewEndpoint, skewOne)
	}
	return q
}

func skewAddr(s, j int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(1 + s), byte(10 + j)})
}
func skewClusterIP(s int) netip.Addr  { return netip.AddrFrom4([4]byte{10, 96, 0, byte(10 + s)}) }
func skewServiceName(s int) string    { return fmt.Sprintf("default/skew-%d:http", s) }
func skewEndpointKey(s, j int) string { return netip.AddrPortFrom(skewAddr(s, j), 8080).String() }
func skewChain(kind string, s, j int) string {
	return fmt.Sprintf("KUBE-%s-SKEW%02d%02d", kind, s, j)
}

// skewRuleset writes a kube-proxy-style nat table: a cascade per Service
// taking endpoint j with probability q_j / (1 - sum of earlier q), in the
// order kube-proxy uses (endpoint address:port as text).
func skewRuleset(in skewInput) string {
	var decl, rules strings.Builder
	decl.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n")
	rules.WriteString("-A PREROUTING -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\n")
	for s := range in.Services {
		svc := skewChain("SVC", s, 0)
		fmt.Fprintf(&decl, ":%s - [0:0]\n", svc)
		fmt.Fprintf(&rules, "-A KUBE-SERVICES -d %s/32 -p tcp -m tcp --dport 80 -m comment --comment %q -j %s\n", skewClusterIP(s), skewServiceName(s), svc)
		q := skewShares(in, s)
		order := make([]int, in.Endpoints)
		for j := range order {
			order[j] = j
		}
		sort.Slice(order, func(a, b int) bool { return skewEndpointKey(s, order[a]) < skewEndpointKey(s, order[b]) })
		left := 1.0
		for n, j := range order {
			sep := skewChain("SEP", s, j)
			fmt.Fprintf(&decl, ":%s - [0:0]\n", sep)
			if n < len(order)-1 {
				fmt.Fprintf(&rules, "-A %s -m comment --comment %q -m statistic --mode random --probability %.10f -j %s\n", svc, skewServiceName(s), q[j]/left, sep)
			} else {
				fmt.Fprintf(&rules, "-A %s -m comment --comment %q -j %s\n", svc, skewServiceName(s), sep)
			}
			left -= q[j]
			fmt.Fprintf(&rules, "-A %s -m comment --comment %q -p tcp -m tcp -j DNAT --to-destination %s\n", sep, skewServiceName(s), skewEndpointKey(s, j))
		}
	}
	return decl.String() + rules.String() + "COMMIT\n"
}

func runSkewNode(ctx context.Context, env *netns.NodeEnv) error {
	var in skewInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	var addrs []netip.Addr
	for s := range in.Services {
		for j := range in.Endpoints {
			addrs = append(addrs, skewAddr(s, j))
		}
	}
	pn, err := env.NewPodNetwork(netns.PodNetworkConfig{
		Ports:                 []netns.Port{{Port: 8080, Protocol: netns.TCP}},
		AddressesPerNamespace: 16,
		ClientPodIP:           netip.MustParseAddr("10.244.0.1"),
		PodCIDR:               netip.MustParsePrefix("10.244.0.0/16"),
	})
	if err != nil {
		return err
	}
	if err := pn.AddEndpoints(addrs); err != nil {
		return err
	}
	restore := exec.CommandContext(ctx, "iptables-legacy-restore")
	restore.Stdin = strings.NewReader(skewRuleset(in))
	if out, err := restore.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-legacy-restore: %w: %s", err, out)
	}
	dump, err := rules.ReadIPTables(ctx, &toolexec.Exec{}, "legacy")
	if err != nil {
		return err
	}
	implied, err := rules.ImpliedIPTables(dump.IPv4)
	if err != nil {
		return err
	}
	var samples []reports.ServiceSample
	for s := range in.Services {
		r, err := pn.Probe(ctx, netns.ProbeSpec{From: netns.ClientPod, Target: netip.AddrPortFrom(skewClusterIP(s), 80), Protocol: netns.TCP, Count: in.Connections})
		if err != nil {
			return err
		}
		if r.OK != r.Sent {
			return fmt.Errorf("service %d: %d of %d answered: %v", s, r.OK, r.Sent, r.FailureSample)
		}
		sample := reports.ServiceSample{Service: skewServiceName(s)}
		for j := range in.Endpoints {
			sample.Endpoints = append(sample.Endpoints, skewEndpointKey(s, j))
		}
		sort.Strings(sample.Endpoints)
		byEP := map[string]float64{}
		for _, e := range implied[skewServiceName(s)].Endpoints {
			byEP[e.Endpoint] = e.Probability
		}
		for _, ep := range sample.Endpoints {
			ap := netip.MustParseAddrPort(ep)
			n := 0
			if t := r.Endpoints[ap]; t != nil {
				n = t.Count
			}
			sample.Counts = append(sample.Counts, n)
			sample.Expected = append(sample.Expected, 1/float64(in.Endpoints))
			sample.Implied = append(sample.Implied, byEP[ep])
		}
		samples = append(samples, sample)
	}
	rep, err := reports.AnalyzeDistribution(samples, reports.DistributionOptions{Alpha: in.Alpha})
	if err != nil {
		return err
	}
	return env.SetResult(rep)
}

func runSkew(t *testing.T, in skewInput) *reports.DistributionReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var rep reports.DistributionReport
	if err := netns.RunNode(ctx, netns.NodeOptions{Name: skewNodeMain}, in, &rep); err != nil {
		t.Fatalf("node: %v", err)
	}
	return &rep
}

func TestPrivilegedSkewedRulesetFlagged(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "iptables-legacy-save")
	base := skewInput{Services: 10, Endpoints: 10, Connections: 4000, Alpha: 1e-4}

	t.Run("skewed", func(t *testing.T) {
		in := base
		in.Skewed = true
		rep := runSkew(t, in)
		if rep.Passed {
			t.Fatalf("a skewed ruleset passed the distribution test: %+v", rep)
		}
		for i, s := range rep.Services {
			// The rules imply the skew exactly, whatever the sampling.
			want := skewAll
			if i == skewService {
				want = skewOne // the larger of its two bumps
			}
			if s.RuleError == nil || *s.RuleError < want*0.9 {
				t.Errorf("%s: rule-implied error %v, want about %v", s.Service, s.RuleError, want)
			}
			if s.Verdict != reports.VerdictRules && s.Verdict != reports.VerdictSkewed {
				t.Errorf("%s: verdict %s, want flagged", s.Service, s.Verdict)
			}
		}
		// The sampling tests have power below 1 at this count; say what
		// they saw rather than assert it.
		if p := rep.Pooled; p != nil {
			t.Logf("pooled by position: %s, %+.2f%% at position %d, adjusted p %.3g", p.Verdict, 100*p.LargestDeviation, p.LargestDeviationPosition, p.AdjustedPValue)
		}
		s0 := rep.Services[skewService]
		t.Logf("%s: measured %+.1f%% at %s, adjusted p %.3g", s0.Service, 100*s0.LargestDeviation, s0.LargestDeviationEndpoint, s0.AdjustedPValue)
	})

	t.Run("even", func(t *testing.T) {
		rep := runSkew(t, base)
		if !rep.Passed {
			t.Fatalf("an even ruleset failed the distribution test (alpha %g): %+v", base.Alpha, rep)
		}
		for _, s := range rep.Services {
			if s.RuleError == nil || *s.RuleError > 1e-6 {
				t.Errorf("%s: rule-implied error %v, want under 1e-6", s.Service, s.RuleError)
			}
		}
	})
}
