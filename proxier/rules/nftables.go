package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/toolexec"
)

// NFTablesDump is the nftables ruleset of the current network namespace:
// the text of "nft list ruleset" and the JSON of "nft -j list ruleset",
// kept raw, and the counts parsed from the JSON.
type NFTablesDump struct {
	Text  []byte    `json:"-"`
	JSON  []byte    `json:"-"`
	Stats NFTCounts `json:"stats"`

	rs *nftRuleset
}

// NFTCounts counts an nftables ruleset. Totals are over every table (in a
// node process in nftables mode these are kube-proxy's "ip kube-proxy" and
// "ip6 kube-proxy").
type NFTCounts struct {
	// Tables sorted by family, then name.
	Tables []NFTTable `json:"tables"`
	Rules  int        `json:"rules"`
	Chains int        `json:"chains"`
	Sets   int        `json:"sets"`
	Maps   int        `json:"maps"`
	// SetElements and MapElements count the elements of named sets and of
	// named maps (verdict maps included). An element is one entry whatever
	// its shape: a concatenation "a . b", an interval or prefix, or a map
	// entry "key : value" counts as one. Anonymous sets inside rules are
	// part of their rule and not counted.
	SetElements int `json:"setElements"`
	MapElements int `json:"mapElements"`
	// NumgenRules counts the rules that pick with numgen: kube-proxy's
	// endpoint choice, "numgen random mod N" over an anonymous map. Since
	// v1.37 (PR #140723) a Service with one endpoint gets a plain
	// "dnat to" rule instead, so this is where the releases differ.
	NumgenRules int `json:"numgenRules"`
	// LearnedElements counts the elements of SetElements and MapElements
	// that packets added (see nftLearnedSet); Normalize leaves them out.
	LearnedElements int `json:"learnedElements,omitempty"`
}

// NFTTable counts one table.
type NFTTable struct {
	Family      string `json:"family"`
	Name        string `json:"name"`
	Rules       int    `json:"rules"`
	Chains      int    `json:"chains"`
	Sets        int    `json:"sets"`
	Maps        int    `json:"maps"`
	SetElements int    `json:"setElements"`
	MapElements int    `json:"mapElements"`
	NumgenRules int    `json:"numgenRules"`
	// LearnedElements is as in NFTCounts.
	LearnedElements int `json:"learnedElements,omitempty"`
	// ChainRules is the number of rules of each chain.
	ChainRules map[string]int `json:"chainRules"`
	// Elements is the number of elements of each named set and map.
	Elements map[string]int `json:"elements"`
}

// ReadNFTables runs "nft list ruleset" and "nft -j list ruleset" in the
// calling process's network namespace and parses the JSON.
func ReadNFTables(ctx context.Context, run toolexec.Runner) (*NFTablesDump, error) {
	text, err := run.Run(ctx, toolexec.Command("nft", "list", "ruleset"))
	if err != nil {
		return nil, fmt.Errorf("read nftables: %w", err)
	}
	js, err := run.Run(ctx, toolexec.Command("nft", "-j", "list", "ruleset"))
	if err != nil {
		return nil, fmt.Errorf("read nftables: %w", err)
	}
	rs, err := parseNFTJSON(js)
	if err != nil {
		return nil, fmt.Errorf("read nftables: output of nft -j list ruleset: %w", err)
	}
	return &NFTablesDump{Text: text, JSON: js, Stats: rs.counts(), rs: rs}, nil
}

// Counts returns the flat counts results and scenario expectations use:
// "nftables/rules", "nftables/chains", "nftables/setElements",
// "nftables/mapElements", "nftables/numgenRules".
func (d *NFTablesDump) Counts() map[string]int { return d.Stats.Flat() }

// Flat returns the counts under the scenario schema's names.
func (c NFTCounts) Flat() map[string]int {
	return map[string]int{
		"nftables/rules":       c.Rules,
		"nftables/chains":      c.Chains,
		"nftables/setElements": c.SetElements,
		"nftables/mapElements": c.MapElements,
		"nftables/numgenRules": c.NumgenRules,
	}
}

// ParseNFTJSON counts the output of "nft -j list ruleset".
func ParseNFTJSON(b []byte) (NFTCounts, error) {
	rs, err := parseNFTJSON(b)
	if err != nil {
		return NFTCounts{}, err
	}
	return rs.counts(), nil
}

type nftKey struct{ family, name string }

type nftRuleset struct {
	tables map[nftKey]*nftTable
}

type nftTable struct {
	key    nftKey
	chains map[string]*nftChain
	sets   map[string]*nftSet // sets and maps
}

type nftChain struct {
	// head is the chain object with its handle removed.
	head  json.RawMessage
	rules []json.RawMessage // rule objects without handle, in order
}

type nftSet struct {
	isMap bool
	// learned: packets add the elements (nftLearnedSet), not the proxier.
	learned bool
	head    json.RawMessage // the set/map object without handle and elem
	elems   []json.RawMessage
}

// nftLearnedSet says whether the elements of a set or map are state
// learned from traffic rather than programmed: it is declared with the
// flags "dynamic" (a set the packet path writes with "update @set" or "add
// @set"; nft gives the flag to a set such a statement names, as upstream's
// comment at the declaration notes) and "timeout" (what it learns
// expires). kube-proxy declares exactly these sets so: the per-endpoint
// ClientIP session-affinity sets affinity-<hash>-<ns/name/proto/port>__<ip/port>
// (v1.37.1 pkg/proxy/nftables/proxier.go syncProxyRules, "Generate the
// per-endpoint affinity sets": Flags DynamicFlag, TimeoutFlag and Timeout
// StickyMaxAgeSeconds), which the endpoint chain's first rule fills with
// "update @affinity-... { ip saddr }". It never adds an element to them, so
// a fresh proxier's are empty and a node's hold the clients it saw.
//
// A set that is dynamic without a timeout is not taken as learned: kube-proxy
// declares none, and its elements staying in the comparison shows them.
//
// flags is the set object's "flags": a list of names, or a single name as
// older nft printed a set with one flag (src/json.c set_print_json).
func nftLearnedSet(flags json.RawMessage) bool {
	var names []string
	if err := json.Unmarshal(flags, &names); err != nil {
		var one string
		if json.Unmarshal(flags, &one) != nil {
			return false
		}
		names = []string{one}
	}
	dynamic, timeout := false, false
	for _, n := range names {
		dynamic = dynamic || n == "dynamic"
		timeout = timeout || n == "timeout"
	}
	return dynamic && timeout
}

// nftObject holds the fields every table/chain/rule/set object has.
type nftObject struct {
	Family string            `json:"family"`
	Table  string            `json:"table"`
	Name   string            `json:"name"`
	Chain  string            `json:"chain"`
	Elem   []json.RawMessage `json:"elem"`
	// Flags are a set's or map's flags (see nftLearnedSet).
	Flags json.RawMessage `json:"flags"`
}

func parseNFTJSON(b []byte) (*nftRuleset, error) {
	var top struct {
		NFTables *[]map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if top.NFTables == nil {
		return nil, errors.New(`no "nftables" array`)
	}
	rs := &nftRuleset{tables: map[nftKey]*nftTable{}}
	table := func(i int, family, name string) (*nftTable, error) {
		k := nftKey{family, name}
		t := rs.tables[k]
		if t == nil {
			return nil, fmt.Errorf("nftables[%d]: table %s %s is not listed before its content", i, family, name)
		}
		return t, nil
	}
	for i, item := range *top.NFTables {
		if len(item) != 1 {
			return nil, fmt.Errorf("nftables[%d]: want one object kind, have %d", i, len(item))
		}
		for kind, raw := range item {
			if kind == "metainfo" {
				continue
			}
			var o nftObject
			if err := json.Unmarshal(raw, &o); err != nil {
				if kind != "table" && kind != "chain" && kind != "rule" && kind != "set" && kind != "map" {
					continue // other object kinds (counter, quota, flowtable...) are not counted
				}
				return nil, fmt.Errorf("nftables[%d]: %s: %w", i, kind, err)
			}
			switch kind {
			case "table":
				k := nftKey{o.Family, o.Name}
				if rs.tables[k] != nil {
					return nil, fmt.Errorf("nftables[%d]: table %s %s listed twice", i, o.Family, o.Name)
				}
				rs.tables[k] = &nftTable{key: k, chains: map[string]*nftChain{}, sets: map[string]*nftSet{}}
			case "chain":
				t, err := table(i, o.Family, o.Table)
				if err != nil {
					return nil, err
				}
				if t.chains[o.Name] != nil {
					return nil, fmt.Errorf("nftables[%d]: chain %s listed twice in table %s %s", i, o.Name, o.Family, o.Table)
				}
				t.chains[o.Name] = &nftChain{head: canonicalJSON(raw, "handle")}
			case "rule":
				t, err := table(i, o.Family, o.Table)
				if err != nil {
					return nil, err
				}
				c := t.chains[o.Chain]
				if c == nil {
					return nil, fmt.Errorf("nftables[%d]: rule of unlisted chain %s in table %s %s", i, o.Chain, o.Family, o.Table)
				}
				c.rules = append(c.rules, canonicalJSON(raw, "handle", "family", "table", "chain"))
			case "set", "map":
				t, err := table(i, o.Family, o.Table)
				if err != nil {
					return nil, err
				}
				if t.sets[o.Name] != nil {
					return nil, fmt.Errorf("nftables[%d]: set or map %s listed twice in table %s %s", i, o.Name, o.Family, o.Table)
				}
				s := &nftSet{isMap: kind == "map", learned: nftLearnedSet(o.Flags), head: canonicalJSON(raw, "handle", "elem")}
				for _, e := range o.Elem {
					s.elems = append(s.elems, canonicalJSON(e))
				}
				t.sets[o.Name] = s
			}
		}
	}
	return rs, nil
}

// canonicalJSON re-encodes raw with object keys sorted (encoding/json sorts
// map keys), without the given top-level keys and with counter values
// zeroed at any depth, so that equal objects have equal bytes.
func canonicalJSON(raw json.RawMessage, drop ...string) json.RawMessage {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return raw // already decoded once; not reached in practice
	}
	if m, ok := v.(map[string]any); ok {
		for _, k := range drop {
			delete(m, k)
		}
	}
	v = canonicalize(v)
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// canonicalize drops the packet and byte values of counter statements and
// element counters, which change with traffic, and sorts the elements of
// anonymous sets and maps in rules ({"set": [...]}), which nft prints in
// the kernel's order.
func canonicalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "counter" {
				if c, ok := e.(map[string]any); ok {
					delete(c, "packets")
					delete(c, "bytes")
				}
			}
			x[k] = canonicalize(e)
			if arr, ok := x[k].([]any); ok && k == "set" {
				sortByJSON(arr)
			}
		}
	case []any:
		for i := range x {
			x[i] = canonicalize(x[i])
		}
	}
	return v
}

func sortByJSON(arr []any) {
	keys := make([]string, len(arr))
	for i, e := range arr {
		b, _ := json.Marshal(e)
		keys[i] = string(b)
	}
	idx := make([]int, len(arr))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
	sorted := make([]any, len(arr))
	for i, j := range idx {
		sorted[i] = arr[j]
	}
	copy(arr, sorted)
}

func (rs *nftRuleset) sortedTables() []*nftTable {
	ts := make([]*nftTable, 0, len(rs.tables))
	for _, t := range rs.tables {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].key.family != ts[j].key.family {
			return ts[i].key.family < ts[j].key.family
		}
		return ts[i].key.name < ts[j].key.name
	})
	return ts
}

func (rs *nftRuleset) counts() NFTCounts {
	c := NFTCounts{Tables: []NFTTable{}}
	for _, t := range rs.sortedTables() {
		tc := NFTTable{Family: t.key.family, Name: t.key.name, Chains: len(t.chains),
			ChainRules: map[string]int{}, Elements: map[string]int{}}
		for name, ch := range t.chains {
			tc.Rules += len(ch.rules)
			tc.ChainRules[name] = len(ch.rules)
			for _, r := range ch.rules {
				// A numgen expression is {"numgen": {...}} in nft's JSON.
				if bytes.Contains(r, []byte(`"numgen"`)) {
					tc.NumgenRules++
				}
			}
		}
		for name, s := range t.sets {
			tc.Elements[name] = len(s.elems)
			if s.learned {
				tc.LearnedElements += len(s.elems)
			}
			if s.isMap {
				tc.Maps++
				tc.MapElements += len(s.elems)
			} else {
				tc.Sets++
				tc.SetElements += len(s.elems)
			}
		}
		c.Tables = append(c.Tables, tc)
		c.Rules += tc.Rules
		c.Chains += tc.Chains
		c.Sets += tc.Sets
		c.Maps += tc.Maps
		c.SetElements += tc.SetElements
		c.MapElements += tc.MapElements
		c.NumgenRules += tc.NumgenRules
		c.LearnedElements += tc.LearnedElements
	}
	return c
}

// Order determinism of the upstream nftables proxier (v1.37.1,
// pkg/proxy/nftables/proxier.go syncProxyRules), which decides what
// Normalize may sort:
//   - Per-service dispatch is done with named verdict maps and sets
//     (service-ips, service-nodeports, cluster-ips, no-endpoint-services,
//     firewall-ips, ...): elements of a set have no order, and nft prints
//     them in the kernel's order (hash or tree), so elements are sorted.
//   - Chains, sets and maps are objects of the table with no order of
//     their own (nft prints them in creation order, which follows the Go
//     map "for svcName, svc := range proxier.svcPortMap"); they are sorted
//     by name.
//   - Rules keep their order within a chain. In a service-* chain the
//     endpoint vmap ("numgen random mod N vmap { 0 : goto endpoint-..., }")
//     is built from proxier.endpointsMap, sorted by Endpoint.String()
//     (pkg/proxy/endpointslicecache.go), so index i names the same endpoint
//     in two proxiers given the same API state; the rule is kept as is.
//   - Rule handles, set and chain handles and counter values are removed.
//   - The elements of sets packets fill (nftLearnedSet: the ClientIP
//     affinity sets) are state learned from traffic: Normalize keeps the
//     set's declaration and leaves its elements out; Learned lists them.
//
// Only the "ip kube-proxy" and "ip6 kube-proxy" tables are normalized.
var nftKubeProxyTables = []nftKey{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}

// NormalizeNFTJSON returns a canonical text of the kube-proxy tables of
// "nft -j list ruleset" output (see the order notes above): one line per
// table, chain header, rule, set or map header and element, in canonical
// JSON. Elements learned from traffic are left out (see LearnedNFTJSON).
func NormalizeNFTJSON(b []byte) (string, error) {
	rs, err := parseNFTJSON(b)
	if err != nil {
		return "", err
	}
	return rs.normalize(), nil
}

func (rs *nftRuleset) normalize() string {
	var b strings.Builder
	for _, k := range nftKubeProxyTables {
		t := rs.tables[k]
		if t == nil {
			continue
		}
		fmt.Fprintf(&b, "table %s %s\n", k.family, k.name)
		for _, name := range sortedKeys(t.chains) {
			c := t.chains[name]
			fmt.Fprintf(&b, "chain %s %s\n", name, c.head)
			for _, r := range c.rules {
				fmt.Fprintf(&b, "  rule %s\n", r)
			}
		}
		for _, name := range sortedKeys(t.sets) {
			s := t.sets[name]
			kind := "set"
			if s.isMap {
				kind = "map"
			}
			fmt.Fprintf(&b, "%s %s %s\n", kind, name, s.head)
			if s.learned {
				continue // listed by learned
			}
			elems := make([]string, len(s.elems))
			for i, e := range s.elems {
				elems[i] = string(e)
			}
			sort.Strings(elems)
			for _, e := range elems {
				fmt.Fprintf(&b, "  elem %s\n", e)
			}
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Normalize returns the canonical text of the kube-proxy tables (see
// NormalizeNFTJSON), for comparing two dataplanes.
func (d *NFTablesDump) Normalize() string { return d.rs.normalize() }

// Learned lists the elements of the kube-proxy tables that packets added
// (see LearnedNFTJSON).
func (d *NFTablesDump) Learned() []string { return d.rs.learned() }

// LearnedNFTJSON lists the elements of the kube-proxy tables of "nft -j
// list ruleset" output that packets added (nftLearnedSet), which
// NormalizeNFTJSON leaves out, sorted, one a line:
//
//	<family> <table> <set|map> <name> <element in canonical JSON>
//	ip kube-proxy set affinity-…__10.244.5.10/8080 {"elem":{"expires":10791,"timeout":10800,"val":"10.180.0.2"}}
func LearnedNFTJSON(b []byte) ([]string, error) {
	rs, err := parseNFTJSON(b)
	if err != nil {
		return nil, err
	}
	return rs.learned(), nil
}

func (rs *nftRuleset) learned() []string {
	var out []string
	for _, k := range nftKubeProxyTables {
		t := rs.tables[k]
		if t == nil {
			continue
		}
		for name, s := range t.sets {
			if !s.learned {
				continue
			}
			kind := "set"
			if s.isMap {
				kind = "map"
			}
			for _, e := range s.elems {
				out = append(out, fmt.Sprintf("%s %s %s %s %s", k.family, k.name, kind, name, e))
			}
		}
	}
	sort.Strings(out)
	return out
}
