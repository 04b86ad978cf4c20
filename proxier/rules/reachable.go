package rules

import (
	"sort"
	"strings"
)

// ReachableIPTables splits a normalized iptables dump (NormalizeIPTablesSave)
// into the part packets can reach and the chains they cannot: a chain is
// reachable when a built-in chain (one with a policy) jumps or goes to it,
// directly or through other reachable chains. It returns the dump without
// unreachable chains (their declarations and rules) and their names as
// "table/CHAIN", sorted.
//
// kube-proxy's iptables proxier leaves the chains of removed endpoints
// behind after partial syncs and deletes them in a later full sync; they
// hold rules but nothing jumps to them. The oracle compares the reachable
// parts (what the dataplane does) and reports such leftovers separately.
func ReachableIPTables(normalized string) (kept string, unreachable []string) {
	lines := strings.Split(normalized, "\n")
	type table struct {
		// start is the *name line, end its COMMIT line, or len(lines)
		// when the text ends without COMMIT.
		start, end int
		reach      map[string]bool
	}
	var tables []table
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "*") {
			continue
		}
		t := table{start: i, end: len(lines)}
		for j := i + 1; j < len(lines); j++ {
			if lines[j] == "COMMIT" {
				t.end = j
				break
			}
		}
		edges := map[string][]string{}
		var roots []string
		for _, l := range lines[t.start+1 : t.end] {
			switch {
			case strings.HasPrefix(l, ":"):
				f := strings.Fields(l[1:])
				if len(f) >= 2 && f[1] != "-" {
					roots = append(roots, f[0])
				}
			case strings.HasPrefix(l, "-A "):
				f := strings.Fields(l)
				for k := 2; k+1 < len(f); k++ {
					if f[k] == "-j" || f[k] == "-g" || f[k] == "--jump" || f[k] == "--goto" {
						edges[f[1]] = append(edges[f[1]], f[k+1])
					}
				}
			}
		}
		t.reach = map[string]bool{}
		for len(roots) > 0 {
			c := roots[len(roots)-1]
			roots = roots[:len(roots)-1]
			if t.reach[c] {
				continue
			}
			t.reach[c] = true
			roots = append(roots, edges[c]...)
		}
		tables = append(tables, t)
		i = t.end
	}

	var out []string
	ti := 0
	for i, l := range lines {
		for ti < len(tables) && i > tables[ti].end {
			ti++
		}
		if ti < len(tables) && i > tables[ti].start && i < tables[ti].end {
			t := tables[ti]
			name := strings.TrimPrefix(lines[t.start], "*")
			var chain string
			switch {
			case strings.HasPrefix(l, ":"):
				if f := strings.Fields(l[1:]); len(f) > 0 {
					chain = f[0]
					if !t.reach[chain] {
						unreachable = append(unreachable, name+"/"+chain)
					}
				}
			case strings.HasPrefix(l, "-A "):
				if f := strings.Fields(l); len(f) > 1 {
					chain = f[1]
				}
			}
			if chain != "" && !t.reach[chain] {
				continue
			}
		}
		out = append(out, l)
	}
	sort.Strings(unreachable)
	return strings.Join(out, "\n"), unreachable
}

// StaleNFTChains removes from a normalized nftables dump (NormalizeNFTJSON)
// the chains that are empty and that no rule or map element jumps or goes
// to, and returns the rest and the chains removed, sorted. kube-proxy's
// nftables mode flushes a chain it no longer needs at once and deletes it
// in a sync at least a second later (staleChains), so a dataplane after
// churn may hold such chains for a while; nothing can reach them.
func StaleNFTChains(normalized string) (string, []string) {
	lines := strings.SplitAfter(normalized, "\n")
	isTop := func(l string) bool { return l != "" && !strings.HasPrefix(l, " ") }
	empty := map[int]string{} // line index -> chain name
	for i, l := range lines {
		rest, ok := strings.CutPrefix(l, "chain ")
		if !ok || (i+1 < len(lines) && !isTop(lines[i+1]) && lines[i+1] != "") {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		empty[i] = name
	}
	var stale []string
	var b strings.Builder
	for i, l := range lines {
		if name, ok := empty[i]; ok && !strings.Contains(normalized, `"target":"`+name+`"`) {
			stale = append(stale, name)
			continue
		}
		b.WriteString(l)
	}
	sort.Strings(stale)
	return b.String(), stale
}
