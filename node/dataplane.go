package node

import (
	"context"
	"fmt"
	"maps"

	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/scenarios"
)

// readDataplane counts the node's rules with the standard tools and saves
// the raw dumps as <mode>.<when>.* in the run directory.
func (n *node) readDataplane(ctx context.Context, when string) (map[string]int, error) {
	var dumps []rules.Dump
	switch n.ms.Mode {
	case scenarios.ModeIPTables:
		d, err := rules.ReadIPTables(ctx, n.tools, n.ms.Backend)
		if err != nil {
			return nil, fmt.Errorf("reading iptables rules (%s): %w", when, err)
		}
		dumps = append(dumps, d)
	case scenarios.ModeNFTables:
		d, err := rules.ReadNFTables(ctx, n.tools)
		if err != nil {
			return nil, fmt.Errorf("reading nftables rules (%s): %w", when, err)
		}
		dumps = append(dumps, d)
	case scenarios.ModeIPVS:
		// The IPVS dump holds the iptables rules IPVS mode writes too.
		d, err := rules.ReadIPVS(ctx, n.tools, n.ms.Backend)
		if err != nil {
			return nil, fmt.Errorf("reading IPVS, ipset and iptables state (%s): %w", when, err)
		}
		dumps = append(dumps, d)
	default:
		return nil, fmt.Errorf("no dataplane reader for mode %s", n.ms.Mode)
	}
	counts := map[string]int{}
	for _, d := range dumps {
		maps.Copy(counts, d.Counts())
	}
	if n.outDir != "" {
		name := n.ms.Name + "." + when
		if err := rules.SaveDumps(n.outDir, name, dumps...); err != nil {
			return counts, err
		}
		n.res.Dumps = append(n.res.Dumps, name+".*")
	}
	return counts, nil
}
