package rules

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/toolexec"
)

// Backends of the iptables binaries: iptables-<backend>-save.
const (
	BackendLegacy = "legacy"
	BackendNFT    = "nft"
)

// IPTablesDump is what iptables-save and ip6tables-save print in the
// current network namespace, kept raw (so a user can re-derive every count
// with grep) and parsed.
type IPTablesDump struct {
	// Backend is "legacy" or "nft": the binaries were
	// iptables-<backend>-save and ip6tables-<backend>-save.
	Backend string `json:"backend"`
	// IPv4 and IPv6 are the raw outputs.
	IPv4 []byte `json:"-"`
	IPv6 []byte `json:"-"`
	// V4 and V6 are their counts.
	V4 IPTablesCounts `json:"ipv4"`
	V6 IPTablesCounts `json:"ipv6"`

	v4, v6 []iptTable
}

// IPTablesCounts are the counts of one iptables-save output.
type IPTablesCounts struct {
	// Tables by name (nat, filter, mangle, raw, ...).
	Tables map[string]IPTablesTable `json:"tables"`
}

// IPTablesTable counts one table of an iptables-save output.
type IPTablesTable struct {
	// Rules is the number of "-A" lines: grep -c '^-A'.
	Rules int `json:"rules"`
	// Chains is the number of ":" lines, built-in chains included:
	// grep -c '^:'.
	Chains int `json:"chains"`
	// ChainRules is the number of rules of each chain (chains without
	// rules included, with 0).
	ChainRules map[string]int `json:"chainRules"`
	// Chains kube-proxy makes per service port (KUBE-SVC-*, KUBE-SVL-*,
	// KUBE-EXT-*, KUBE-FW-*) and per endpoint (KUBE-SEP-*).
	SVC int `json:"svc"`
	SVL int `json:"svl"`
	SEP int `json:"sep"`
	FW  int `json:"fw"`
	EXT int `json:"ext"`
}

// ReadIPTables runs iptables-<backend>-save and ip6tables-<backend>-save
// (backend "legacy" or "nft") in the calling process's network namespace
// and parses their output.
func ReadIPTables(ctx context.Context, run toolexec.Runner, backend string) (*IPTablesDump, error) {
	if backend != BackendLegacy && backend != BackendNFT {
		return nil, fmt.Errorf("read iptables: backend %q: want %q or %q", backend, BackendLegacy, BackendNFT)
	}
	d := &IPTablesDump{Backend: backend}
	for _, f := range []struct {
		bin    string
		raw    *[]byte
		tables *[]iptTable
		counts *IPTablesCounts
	}{
		{"iptables-" + backend + "-save", &d.IPv4, &d.v4, &d.V4},
		{"ip6tables-" + backend + "-save", &d.IPv6, &d.v6, &d.V6},
	} {
		out, err := run.Run(ctx, toolexec.Command(f.bin))
		if err != nil {
			return nil, fmt.Errorf("read iptables: %w", err)
		}
		tables, err := parseIPTablesSave(out)
		if err != nil {
			return nil, fmt.Errorf("read iptables: output of %s: %w", f.bin, err)
		}
		*f.raw, *f.tables, *f.counts = out, tables, countIPTables(tables)
	}
	return d, nil
}

// Counts returns the flat counts results and scenario expectations use:
// "iptables/<table>" (rules) and "iptables/<table>/chains" for IPv4 (what
// iptables-save prints), and the same under "ip6tables/" for IPv6.
func (d *IPTablesDump) Counts() map[string]int {
	m := map[string]int{}
	d.V4.addCounts(m, "iptables/")
	d.V6.addCounts(m, "ip6tables/")
	return m
}

// Counts returns "<table>" (rules) and "<table>/chains" for each table.
func (c IPTablesCounts) Counts() map[string]int {
	m := map[string]int{}
	c.addCounts(m, "")
	return m
}

func (c IPTablesCounts) addCounts(m map[string]int, prefix string) {
	for name, t := range c.Tables {
		m[prefix+name] = t.Rules
		m[prefix+name+"/chains"] = t.Chains
	}
}

// ParseIPTablesSave counts the tables, chains and rules of iptables-save
// (or ip6tables-save) output. It refuses what iptables-save never prints:
// a rule or chain outside a table, a rule of an undeclared chain, a table
// without COMMIT.
func ParseIPTablesSave(text []byte) (IPTablesCounts, error) {
	tables, err := parseIPTablesSave(text)
	if err != nil {
		return IPTablesCounts{}, err
	}
	return countIPTables(tables), nil
}

// iptTable is one table of an iptables-save output, chains in the order
// printed and rules in order within their chain.
type iptTable struct {
	name   string
	chains []*iptChain
}

type iptChain struct {
	name   string
	policy string // "-" for a user-defined chain
	rules  []string
}

func parseIPTablesSave(text []byte) ([]iptTable, error) {
	var (
		tables []iptTable
		cur    *iptTable
		byName map[string]*iptChain
		seen   = map[string]bool{}
	)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			if cur != nil {
				return nil, fmt.Errorf("line %d: table %q starts before COMMIT of table %q", n, line[1:], cur.name)
			}
			name := line[1:]
			if name == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("line %d: bad table line %q", n, line)
			}
			if seen[name] {
				return nil, fmt.Errorf("line %d: table %q printed twice", n, name)
			}
			seen[name] = true
			tables = append(tables, iptTable{name: name})
			cur, byName = &tables[len(tables)-1], map[string]*iptChain{}
		case line == "COMMIT":
			if cur == nil {
				return nil, fmt.Errorf("line %d: COMMIT outside a table", n)
			}
			cur = nil
		case strings.HasPrefix(line, ":"):
			if cur == nil {
				return nil, fmt.Errorf("line %d: chain outside a table: %q", n, line)
			}
			f := strings.Fields(line[1:])
			if len(f) < 2 || len(f) > 3 {
				return nil, fmt.Errorf("line %d: bad chain line %q", n, line)
			}
			if byName[f[0]] != nil {
				return nil, fmt.Errorf("line %d: chain %s declared twice in table %s", n, f[0], cur.name)
			}
			c := &iptChain{name: f[0], policy: f[1]}
			cur.chains = append(cur.chains, c)
			byName[c.name] = c
		default:
			rule := line
			if strings.HasPrefix(rule, "[") { // iptables-save -c: "[pkts:bytes] -A ..."
				end := strings.IndexByte(rule, ']')
				if end < 0 {
					return nil, fmt.Errorf("line %d: bad counters in %q", n, line)
				}
				rule = strings.TrimLeft(rule[end+1:], " ")
			}
			if !strings.HasPrefix(rule, "-A ") {
				return nil, fmt.Errorf("line %d: unexpected line %q", n, line)
			}
			if cur == nil {
				return nil, fmt.Errorf("line %d: rule outside a table: %q", n, line)
			}
			f := strings.Fields(rule)
			if len(f) < 2 {
				return nil, fmt.Errorf("line %d: rule without a chain: %q", n, line)
			}
			c := byName[f[1]]
			if c == nil {
				return nil, fmt.Errorf("line %d: rule of undeclared chain %s in table %s", n, f[1], cur.name)
			}
			c.rules = append(c.rules, rule)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("table %s has no COMMIT", cur.name)
	}
	return tables, nil
}

func countIPTables(tables []iptTable) IPTablesCounts {
	c := IPTablesCounts{Tables: map[string]IPTablesTable{}}
	for _, t := range tables {
		tc := IPTablesTable{Chains: len(t.chains), ChainRules: map[string]int{}}
		for _, ch := range t.chains {
			tc.Rules += len(ch.rules)
			tc.ChainRules[ch.name] = len(ch.rules)
			switch {
			case strings.HasPrefix(ch.name, "KUBE-SVC-"):
				tc.SVC++
			case strings.HasPrefix(ch.name, "KUBE-SVL-"):
				tc.SVL++
			case strings.HasPrefix(ch.name, "KUBE-SEP-"):
				tc.SEP++
			case strings.HasPrefix(ch.name, "KUBE-FW-"):
				tc.FW++
			case strings.HasPrefix(ch.name, "KUBE-EXT-"):
				tc.EXT++
			}
		}
		c.Tables[t.name] = tc
	}
	return c
}

// Order determinism of the upstream iptables proxier (v1.37.1,
// pkg/proxy/iptables/proxier.go syncProxyRules), which decides what
// Normalize may sort:
//   - Chains: iptables-legacy-save prints user chains sorted by name,
//     iptables-nft-save in creation order, and creation order follows the
//     service map. Chains are sorted by name.
//   - Per service-port rules: the loop "for svcName, svc := range
//     proxier.svcPortMap" ranges over a Go map, so the order of the
//     per-service rules in the dispatch chains (nat KUBE-SERVICES and
//     KUBE-NODEPORTS; filter KUBE-SERVICES, KUBE-EXTERNAL-SERVICES,
//     KUBE-NODEPORTS and KUBE-PROXY-FIREWALL) differs between two proxiers,
//     and between two full syncs of one proxier. Those rules match disjoint
//     destination IP/port/protocol tuples, so their order carries no
//     meaning; kube-proxy itself relies on that. Normalize sorts each run
//     of consecutive per-service rules (comment "<ns>/<name>...") there
//     and keeps the rules around them in place (the nat KUBE-SERVICES jump
//     to KUBE-NODEPORTS must stay last).
//   - Inside KUBE-SVC-*/KUBE-SVL-* chains, endpoints come from
//     proxier.endpointsMap, which endpointsMapFromEndpointInfo
//     (pkg/proxy/endpointslicecache.go) sorts by Endpoint.String() ("ip:port",
//     string order, not numeric). So the probability cascade is the same for
//     two proxiers given the same API state, whatever the slice or update
//     order. Its order matters and is kept.
//   - Everything else (KUBE-SEP-*, KUBE-EXT-*, KUBE-FW-*, static chains)
//     is written in a fixed order and kept.
var iptDispatchChains = map[string]map[string]bool{
	"nat":    {"KUBE-SERVICES": true, "KUBE-NODEPORTS": true},
	"filter": {"KUBE-SERVICES": true, "KUBE-EXTERNAL-SERVICES": true, "KUBE-NODEPORTS": true, "KUBE-PROXY-FIREWALL": true},
}

// serviceRule matches a rule whose comment names a service port
// ("default/svc0:http cluster IP", unquoted "default/svc0:http").
var serviceRule = regexp.MustCompile(`-m comment --comment "?[^" /]+/[^" ]+`)

// NormalizeIPTablesSave returns a canonical text of iptables-save output:
// tables and chains sorted by name, counters and comment lines dropped,
// rules in order within their chain except runs of per-service rules in
// the dispatch chains, which are sorted (see the order notes above).
func NormalizeIPTablesSave(text []byte) (string, error) {
	tables, err := parseIPTablesSave(text)
	if err != nil {
		return "", err
	}
	return normalizeIPTables(tables), nil
}

func normalizeIPTables(tables []iptTable) string {
	var b strings.Builder
	ts := append([]iptTable(nil), tables...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	for _, t := range ts {
		fmt.Fprintf(&b, "*%s\n", t.name)
		chains := append([]*iptChain(nil), t.chains...)
		sort.Slice(chains, func(i, j int) bool { return chains[i].name < chains[j].name })
		for _, c := range chains {
			fmt.Fprintf(&b, ":%s %s\n", c.name, c.policy)
		}
		for _, c := range chains {
			rules := c.rules
			if iptDispatchChains[t.name][c.name] {
				rules = sortServiceRuns(rules)
			}
			for _, r := range rules {
				b.WriteString(r)
				b.WriteByte('\n')
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// sortServiceRuns sorts each maximal run of consecutive per-service rules.
func sortServiceRuns(rules []string) []string {
	out := append([]string(nil), rules...)
	for i := 0; i < len(out); {
		if !serviceRule.MatchString(out[i]) {
			i++
			continue
		}
		j := i
		for j < len(out) && serviceRule.MatchString(out[j]) {
			j++
		}
		sort.Strings(out[i:j])
		i = j
	}
	return out
}

// Normalize returns the canonical text of both families (see
// NormalizeIPTablesSave), IPv4 first, for comparing two dataplanes.
func (d *IPTablesDump) Normalize() string {
	return "# ipv4\n" + normalizeIPTables(d.v4) + "# ipv6\n" + normalizeIPTables(d.v6)
}

// IPTablesChainRules returns the rules of one chain of iptables-save text,
// in the order the kernel walks them, each as printed ("-A CHAIN ...").
// It is an error when the table or the chain is missing.
func IPTablesChainRules(text []byte, table, chain string) ([]string, error) {
	tables, err := parseIPTablesSave(text)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if t.name != table {
			continue
		}
		for _, c := range t.chains {
			if c.name == chain {
				return c.rules, nil
			}
		}
		return nil, fmt.Errorf("table %s has no chain %s", table, chain)
	}
	return nil, fmt.Errorf("no table %s", table)
}
