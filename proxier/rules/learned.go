package rules

import (
	"fmt"
	"slices"
	"strings"
)

// State learned from traffic: what packets wrote into the dataplane, as
// opposed to what the proxier programmed. Two proxiers given the same API
// state program the same dataplane, but only the one that carried traffic
// learned anything, so Normalize leaves learned state out and each dump's
// Learned lists it apart, for reports to show it ("not compared").
//
// What each dump can hold:
//   - nftables: the elements of the ClientIP session-affinity sets, which
//     the "update @affinity-… { ip saddr }" rule fills (nftLearnedSet).
//     Counter values in rules are traffic too; canonicalize drops them.
//   - IPVS: the active and inactive connection counts of each real server
//     in /proc/net/ip_vs. Persistence ("persistent <timeout> <mask>") is
//     the virtual server's configuration and stays in Normalize; the
//     templates persistence learns and the connections themselves are in
//     /proc/net/ip_vs_conn, which is not read.
//   - iptables: nothing. The ClientIP affinity of "-m recent --set" and
//     "--rcheck" learns into /proc/net/xt_recent/<chain>, which is not
//     read; iptables-save is run without -c, and the chain policy counters
//     it prints anyway are dropped by Normalize.
//   - conntrack is in no dump.

// Learned is nil: an iptables-save dump holds no learned state (see above).
func (d *IPTablesDump) Learned() []string { return nil }

// Learned lists the real servers with connections, one a line, sorted:
//
//	<virtual server key> -> <address:port> activeConns <n> inactiveConns <n>
//	TCP 10.96.0.11:80 -> 10.244.1.10:8080 activeConns 2 inactiveConns 5
//
// The iptables part holds none (IPTablesDump.Learned).
func (d *IPVSDump) Learned() []string {
	var out []string
	for _, s := range d.Services {
		for _, dst := range s.Dests {
			if dst.ActiveConns == 0 && dst.InactiveConns == 0 {
				continue
			}
			out = append(out, fmt.Sprintf("%s -> %s activeConns %d inactiveConns %d", s.Key(), dst.Address, dst.ActiveConns, dst.InactiveConns))
		}
	}
	slices.Sort(out)
	return out
}

// learnedText is the content of a <name>.<kind>.learned.gz file: one line
// each, newline-terminated; empty when nothing was learned.
func learnedText(lines []string) []byte {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// ParseLearned reads back the content of a <name>.<kind>.learned.gz file
// SaveDumps wrote (gunzipped): the Learned lines, nil when it is empty.
func ParseLearned(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
