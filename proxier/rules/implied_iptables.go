package rules

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// iptables: kube-proxy writes a cascade in KUBE-SVC-* (and KUBE-SVL-*)
// chains, rule i ("-m statistic --mode random --probability P_i -j
// KUBE-SEP-…") taken with probability P_i when reached, the last rule
// without a statistic match. What the kernel compares is not P_i:
//   - iptables userspace (extensions/libxt_statistic.c, statistic_parse)
//     stores the threshold t = lround(0x80000000 * P) as a u32, rounding
//     half away from zero;
//   - the kernel (net/netfilter/xt_statistic.c, statistic_mt) takes the
//     branch iff (get_random_u32() & 0x7FFFFFFF) < t, a uniform 31-bit
//     number, so the branch is taken with probability exactly t / 2³¹
//     (t = 2³¹ for P = 1 is always; "!" inverts: (2³¹ - t)/2³¹);
//   - iptables-save prints t / 2³¹ with "%.11f". Re-reading the printed
//     value the way iptables-restore does, lround(2³¹ · P_printed), gives t
//     back: the printed value is within 5e-12 of t/2³¹, i.e. within 0.011
//     of t after scaling, far from the 0.5 that would change the rounding.
//     kube-proxy itself writes "%0.10f" of 1/n (1/3 as 0.3333333333, t =
//     715827883, printed back as 0.33333333349).
//
// Endpoint i of the cascade then gets t_i/2³¹ · Π_{j<i} (1 - t_j/2³¹),
// computed here in exact rational arithmetic. Shares differ from 1/n by
// about 2⁻³¹ per branch (1e-10 absolute).

// twoTo31 is the scale of xt_statistic thresholds.
const twoTo31 = 1 << 31

// StatisticThreshold returns the xt_statistic threshold iptables stores
// for "--probability p" (p as printed): lround(0x80000000 * p), which
// rounds half away from zero like Go's math.Round. The branch is taken
// with probability threshold/2³¹.
func StatisticThreshold(p string) (uint32, error) {
	v, err := strconv.ParseFloat(p, 64)
	if err != nil {
		return 0, fmt.Errorf("probability %q: %w", p, err)
	}
	if v < 0 || v > 1 || math.IsNaN(v) {
		return 0, fmt.Errorf("probability %q is not in [0, 1]", p)
	}
	return uint32(math.Round(twoTo31 * v)), nil
}

// ImpliedIPTables returns the shares implied by the KUBE-SVC-* and
// KUBE-SVL-* chains of the nat table in an iptables-save (or
// ip6tables-save) text, keyed by service ("ns/name:port", plus
// LocalSuffix for KUBE-SVL chains). Chains without endpoints are left
// out. Session-affinity rules ("-m recent --rcheck") are skipped: the
// shares are those of a new client.
func ImpliedIPTables(save []byte) (map[string]ServiceShares, error) {
	tables, err := parseIPTablesSave(save)
	if err != nil {
		return nil, err
	}
	var nat *iptTable
	for i := range tables {
		if tables[i].name == "nat" {
			nat = &tables[i]
		}
	}
	if nat == nil {
		return nil, errors.New("no nat table")
	}
	chains := map[string]*iptChain{}
	for _, c := range nat.chains {
		chains[c.name] = c
	}
	out := map[string]ServiceShares{}
	for _, c := range nat.chains {
		local := strings.HasPrefix(c.name, "KUBE-SVL-")
		if !local && !strings.HasPrefix(c.name, "KUBE-SVC-") {
			continue
		}
		s, err := impliedCascade(c, chains)
		if err != nil {
			return nil, fmt.Errorf("chain %s: %w", c.name, err)
		}
		if len(s.Endpoints) == 0 {
			continue
		}
		s.Local = local
		key := s.Service
		if local {
			key += LocalSuffix
		}
		if prev, ok := out[key]; ok {
			return nil, fmt.Errorf("chains %s and %s are both for %s", prev.Chain, c.name, key)
		}
		out[key] = s
	}
	return out, nil
}

// impliedCascade walks one KUBE-SVC/KUBE-SVL chain.
func impliedCascade(c *iptChain, chains map[string]*iptChain) (ServiceShares, error) {
	s := ServiceShares{Chain: c.name}
	remaining := big.NewRat(1, 1) // probability of reaching the current rule
	shares := map[string]*big.Rat{}
	var order []string
	for _, rule := range c.rules {
		args, err := splitRule(rule)
		if err != nil {
			return s, err
		}
		target := flagValue(args, "-j")
		if !strings.HasPrefix(target, "KUBE-SEP-") {
			continue // KUBE-MARK-MASQ and the like do not terminate
		}
		if hasArg(args, "recent") && hasArg(args, "--rcheck") {
			continue // session affinity: only clients seen before
		}
		taken := big.NewRat(1, 1)
		if flagValue(args, "--mode") == "nth" {
			return s, fmt.Errorf("rule %q: statistic mode nth is not random", rule)
		}
		if p := flagValue(args, "--probability"); p != "" {
			t, err := StatisticThreshold(p)
			if err != nil {
				return s, fmt.Errorf("rule %q: %w", rule, err)
			}
			num := int64(t)
			if inverted(args, "--probability") {
				num = twoTo31 - num
			}
			taken = big.NewRat(num, twoTo31)
		}
		sep := chains[target]
		if sep == nil {
			return s, fmt.Errorf("rule %q jumps to missing chain %s", rule, target)
		}
		ep, svc, err := sepDestination(sep)
		if err != nil {
			return s, err
		}
		if s.Service == "" {
			s.Service = svc
		} else if svc != s.Service {
			return s, fmt.Errorf("endpoint chains of services %s and %s in one chain", s.Service, svc)
		}
		share := new(big.Rat).Mul(remaining, taken)
		if shares[ep] == nil {
			shares[ep] = new(big.Rat)
			order = append(order, ep)
		}
		shares[ep].Add(shares[ep], share)
		remaining.Sub(remaining, share)
	}
	for _, ep := range order {
		f, _ := shares[ep].Float64()
		s.Endpoints = append(s.Endpoints, EndpointShare{Endpoint: ep, Probability: f})
	}
	s.Unmatched, _ = remaining.Float64()
	return s, nil
}

// sepDestination returns a KUBE-SEP chain's DNAT destination and its
// service comment.
func sepDestination(c *iptChain) (dest, service string, err error) {
	for _, rule := range c.rules {
		args, err := splitRule(rule)
		if err != nil {
			return "", "", err
		}
		if service == "" {
			service = flagValue(args, "--comment")
		}
		if flagValue(args, "-j") == "DNAT" {
			dest = flagValue(args, "--to-destination")
		}
	}
	if dest == "" {
		return "", "", fmt.Errorf("chain %s has no DNAT --to-destination", c.name)
	}
	if service == "" {
		return "", "", fmt.Errorf("chain %s has no service comment", c.name)
	}
	return dest, service, nil
}

// splitRule splits an iptables-save rule into words, undoing the double
// quotes (and backslash escapes inside them) iptables-save puts around
// comments.
func splitRule(rule string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		inArg bool
		quote bool
	)
	for i := 0; i < len(rule); i++ {
		ch := rule[i]
		switch {
		case quote && ch == '\\' && i+1 < len(rule):
			i++
			cur.WriteByte(rule[i])
		case ch == '"':
			quote, inArg = !quote, true
		case !quote && (ch == ' ' || ch == '\t'):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(ch)
			inArg = true
		}
	}
	if quote {
		return nil, fmt.Errorf("unterminated quote in %q", rule)
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

// flagValue returns the word after the first occurrence of flag.
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// inverted reports whether "!" precedes flag.
func inverted(args []string, flag string) bool {
	for i, a := range args {
		if a == flag {
			return i > 0 && args[i-1] == "!"
		}
	}
	return false
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}
