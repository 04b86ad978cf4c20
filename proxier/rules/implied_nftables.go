package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"strings"
)

// nftables: kube-proxy writes "dnat to numgen random mod N map { 0 : addr
// . port, … }" (older releases: "numgen random mod N vmap { 0 : goto
// endpoint-… }" with the DNAT in the endpoint chain). The kernel
// (net/netfilter/nft_numgen.c, nft_ng_random_gen) computes
// reciprocal_scale(get_random_u32(), N) + offset = ⌊u·N/2³²⌋ + offset for a
// uniform 32-bit u, so key offset+j is drawn with probability
//
//	(⌈(j+1)·2³²/N⌉ - ⌈j·2³²/N⌉) / 2³²,
//
// exactly 1/N only when N divides 2³²; otherwise keys differ by one in 2³²
// (about 2.3e-10). A key missing from the map makes the lookup fail and
// the rule not apply: that mass is Unmatched.

// nftTableName is the table kube-proxy's nftables mode owns.
const nftTableName = "kube-proxy"

// ImpliedNFTables returns the shares implied by the service-* and local-*
// chains of kube-proxy's table of the given family ("ip" or "ip6", as
// iptables-save and ip6tables-save are per family) in an "nft -j list
// ruleset" dump, keyed by service ("ns/name:port", from the chain name
// service-HASH-ns/name/proto/port; plus LocalSuffix for local-* chains).
// The first rule of a chain that DNATs decides (nft's dnat is terminal);
// protocol matches in it are assumed to hold for the service's own
// traffic. See the numgen arithmetic above.
func ImpliedNFTables(dump []byte, family string) (map[string]ServiceShares, error) {
	rs, err := parseNFTJSON(dump)
	if err != nil {
		return nil, err
	}
	t := rs.tables[nftKey{family, nftTableName}]
	if t == nil {
		return nil, fmt.Errorf("no table %s %s", family, nftTableName)
	}
	out := map[string]ServiceShares{}
	for _, name := range sortedKeys(t.chains) {
		svc, local, ok := nftServiceChain(name)
		if !ok {
			continue
		}
		s, err := impliedNFTChain(t, name)
		if err != nil {
			return nil, fmt.Errorf("chain %s: %w", name, err)
		}
		if len(s.Endpoints) == 0 {
			continue
		}
		s.Service, s.Local = svc, local
		key := svc
		if local {
			key += LocalSuffix
		}
		if prev, ok := out[key]; ok {
			return nil, fmt.Errorf("chains %s and %s are both for %s", prev.Chain, name, key)
		}
		out[key] = s
	}
	return out, nil
}

// nftServiceChain parses "service-HASH-ns/name/proto/port" (or local-…)
// into "ns/name:port".
func nftServiceChain(chain string) (service string, local, ok bool) {
	rest, found := strings.CutPrefix(chain, "service-")
	if !found {
		if rest, found = strings.CutPrefix(chain, "local-"); !found {
			return "", false, false
		}
		local = true
	}
	_, rest, found = strings.Cut(rest, "-") // the hash has no "-"
	if !found {
		return "", false, false
	}
	f := strings.Split(rest, "/")
	if len(f) != 4 {
		return "", false, false
	}
	service = f[0] + "/" + f[1]
	if f[3] != "" {
		service += ":" + f[3]
	}
	return service, local, true
}

// nftExprRule is a rule's expressions, decoded lazily.
type nftExprRule struct {
	Expr []map[string]json.RawMessage `json:"expr"`
}

// impliedNFTChain computes one service chain's shares.
func impliedNFTChain(t *nftTable, name string) (ServiceShares, error) {
	s := ServiceShares{Chain: name}
	branches, err := nftChainBranches(t, name, true)
	if err != nil {
		return s, err
	}
	total := new(big.Rat)
	shares := map[string]*big.Rat{}
	var order []string
	for _, b := range branches {
		if shares[b.endpoint] == nil {
			shares[b.endpoint] = new(big.Rat)
			order = append(order, b.endpoint)
		}
		shares[b.endpoint].Add(shares[b.endpoint], b.p)
		total.Add(total, b.p)
	}
	for _, ep := range order {
		f, _ := shares[ep].Float64()
		s.Endpoints = append(s.Endpoints, EndpointShare{Endpoint: ep, Probability: f})
	}
	if len(order) > 0 {
		s.Unmatched, _ = new(big.Rat).Sub(big.NewRat(1, 1), total).Float64()
	}
	return s, nil
}

type nftBranch struct {
	endpoint string
	p        *big.Rat
}

// nftChainBranches returns the endpoints the first DNAT (or numgen vmap)
// rule of chain name reaches, with their probabilities. follow allows one
// level of goto/jump to endpoint chains.
func nftChainBranches(t *nftTable, name string, follow bool) ([]nftBranch, error) {
	c := t.chains[name]
	if c == nil {
		return nil, fmt.Errorf("no chain %s", name)
	}
	for _, raw := range c.rules {
		var r nftExprRule
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		for _, e := range r.Expr {
			if d, ok := e["dnat"]; ok {
				return nftDNATBranches(d)
			}
			if v, ok := e["vmap"]; ok && follow {
				return nftVmapBranches(t, v)
			}
		}
	}
	return nil, nil
}

// nftNumgenMap is {"key": {"numgen": …}, "data": {"set": [[key, value], …]}}.
type nftNumgenMap struct {
	Key struct {
		Numgen *struct {
			Mode   string `json:"mode"`
			Mod    uint32 `json:"mod"`
			Offset uint32 `json:"offset"`
		} `json:"numgen"`
	} `json:"key"`
	Data struct {
		Set [][2]json.RawMessage `json:"set"`
	} `json:"data"`
}

// numgenDraw is a checked "numgen random mod N offset O" expression.
type numgenDraw struct{ mod, offset uint32 }

func newNumgenDraw(m *nftNumgenMap) (numgenDraw, error) {
	ng := m.Key.Numgen
	if ng == nil {
		return numgenDraw{}, errors.New("map key is not numgen")
	}
	if ng.Mode != "random" {
		return numgenDraw{}, fmt.Errorf("numgen mode %q is not random", ng.Mode)
	}
	if ng.Mod == 0 {
		return numgenDraw{}, errors.New("numgen mod 0")
	}
	return numgenDraw{ng.Mod, ng.Offset}, nil
}

// share returns the probability that the draw yields key, nil when it
// never does: key = j + offset (in u32 arithmetic, as the kernel adds)
// with j < N, drawn with probability (⌈(j+1)2³²/N⌉ - ⌈j2³²/N⌉)/2³². It is
// computed per key, not for every j, as N may be up to 2³² - 1.
func (g numgenDraw) share(key uint64) *big.Rat {
	if key > 1<<32-1 {
		return nil
	}
	j := uint64(uint32(key) - g.offset)
	n := uint64(g.mod)
	if j >= n {
		return nil
	}
	const two32 = uint64(1) << 32
	ceilDiv := func(a, b uint64) uint64 { return (a + b - 1) / b }
	// (j+1)·2³² fits in uint64 for N ≤ 2³².
	cnt := ceilDiv((j+1)*two32, n) - ceilDiv(j*two32, n)
	return new(big.Rat).SetFrac(new(big.Int).SetUint64(cnt), new(big.Int).SetUint64(two32))
}

// nftDNATBranches decodes a dnat statement: a fixed address, or a numgen
// map of address . port (or address) values.
func nftDNATBranches(raw json.RawMessage) ([]nftBranch, error) {
	var d struct {
		Addr json.RawMessage `json:"addr"`
		Port json.RawMessage `json:"port"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("dnat: %w", err)
	}
	var addr string
	if json.Unmarshal(d.Addr, &addr) == nil {
		ep, err := nftEndpoint(d.Addr, d.Port)
		if err != nil {
			return nil, err
		}
		return []nftBranch{{ep, big.NewRat(1, 1)}}, nil
	}
	var wrap struct {
		Map *nftNumgenMap `json:"map"`
	}
	if err := json.Unmarshal(d.Addr, &wrap); err != nil || wrap.Map == nil {
		return nil, fmt.Errorf("dnat address %s is neither an address nor a numgen map", d.Addr)
	}
	keys, err := newNumgenKeys(wrap.Map)
	if err != nil {
		return nil, err
	}
	var out []nftBranch
	for _, kv := range wrap.Map.Data.Set {
		p, err := keys.share(kv[0])
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue // a key numgen never draws
		}
		var cc struct {
			Concat []json.RawMessage `json:"concat"`
		}
		var ep string
		if json.Unmarshal(kv[1], &cc) == nil && len(cc.Concat) == 2 {
			ep, err = nftEndpoint(cc.Concat[0], cc.Concat[1])
		} else {
			ep, err = nftEndpoint(kv[1], d.Port)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, nftBranch{ep, p})
	}
	return out, nil
}

// nftVmapBranches decodes "numgen random mod N vmap { j : goto chain }"
// and follows each chain to its DNAT.
func nftVmapBranches(t *nftTable, raw json.RawMessage) ([]nftBranch, error) {
	var m nftNumgenMap
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("vmap: %w", err)
	}
	if m.Key.Numgen == nil {
		return nil, nil // a vmap on something else (e.g. addresses) is not a split
	}
	keys, err := newNumgenKeys(&m)
	if err != nil {
		return nil, err
	}
	var out []nftBranch
	for _, kv := range m.Data.Set {
		p, err := keys.share(kv[0])
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		var verdict map[string]struct {
			Target string `json:"target"`
		}
		if err := json.Unmarshal(kv[1], &verdict); err != nil {
			return nil, fmt.Errorf("vmap verdict %s: %w", kv[1], err)
		}
		target := verdict["goto"].Target
		if target == "" {
			target = verdict["jump"].Target
		}
		if target == "" {
			return nil, fmt.Errorf("vmap verdict %s is not a goto or jump", kv[1])
		}
		sub, err := nftChainBranches(t, target, false)
		if err != nil {
			return nil, err
		}
		if len(sub) != 1 {
			return nil, fmt.Errorf("endpoint chain %s: want one DNAT destination, have %d", target, len(sub))
		}
		out = append(out, nftBranch{sub[0].endpoint, new(big.Rat).Mul(p, sub[0].p)})
	}
	return out, nil
}

// numgenKeys looks up the keys of one numgen map.
type numgenKeys struct {
	draw numgenDraw
	seen map[uint64]bool
}

func newNumgenKeys(m *nftNumgenMap) (*numgenKeys, error) {
	g, err := newNumgenDraw(m)
	if err != nil {
		return nil, err
	}
	return &numgenKeys{draw: g, seen: map[uint64]bool{}}, nil
}

// share decodes a map key and returns its probability: nil when numgen
// never draws it or it is not a number. A key listed twice is an error
// (nft refuses it; counting it twice would make the shares sum over 1).
func (k *numgenKeys) share(raw json.RawMessage) (*big.Rat, error) {
	var key uint64
	if json.Unmarshal(raw, &key) != nil {
		return nil, nil
	}
	if k.seen[key] {
		return nil, fmt.Errorf("map key %d listed twice", key)
	}
	k.seen[key] = true
	return k.draw.share(key), nil
}

// nftEndpoint formats an address and a port (JSON string and number) as
// host:port.
func nftEndpoint(addrRaw, portRaw json.RawMessage) (string, error) {
	var addr string
	if err := json.Unmarshal(addrRaw, &addr); err != nil {
		return "", fmt.Errorf("dnat address %s: %w", addrRaw, err)
	}
	if len(portRaw) == 0 {
		return "", fmt.Errorf("dnat to %s has no port", addr)
	}
	var port uint16
	if err := json.Unmarshal(portRaw, &port); err != nil {
		return "", fmt.Errorf("dnat port %s: %w", portRaw, err)
	}
	return net.JoinHostPort(addr, strconv.Itoa(int(port))), nil
}
