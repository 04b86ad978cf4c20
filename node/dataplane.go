package node

import (
	"context"
	"fmt"
	"maps"

	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/scenarios"
)

// readDump reads the dataplane of the mode kube-proxy runs now with the
// standard tools.
func (n *node) readDump(ctx context.Context) (rules.Dump, error) {
	switch n.ms.Mode {
	case scenarios.ModeIPTables:
		d, err := rules.ReadIPTables(ctx, n.tools, n.ms.Backend)
		if err != nil {
			return nil, fmt.Errorf("reading iptables rules: %w", err)
		}
		return d, nil
	case scenarios.ModeNFTables:
		d, err := rules.ReadNFTables(ctx, n.tools)
		if err != nil {
			return nil, fmt.Errorf("reading nftables rules: %w", err)
		}
		return d, nil
	case scenarios.ModeIPVS:
		// The IPVS dump holds the iptables rules IPVS mode writes too.
		d, err := rules.ReadIPVS(ctx, n.tools, n.ms.Backend)
		if err != nil {
			return nil, fmt.Errorf("reading IPVS, ipset and iptables state: %w", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("no dataplane reader for mode %s", n.ms.Mode)
}

// readDataplane counts the node's rules with the standard tools and saves
// the raw dumps as <entry>.<when>.* in the run directory.
func (n *node) readDataplane(ctx context.Context, when string) (map[string]int, error) {
	d, err := n.readDump(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, when)
	}
	counts := maps.Clone(d.Counts())
	if n.outDir != "" {
		name := n.ms.Name + "." + when
		if err := rules.SaveDumps(n.outDir, name, d); err != nil {
			return counts, err
		}
		n.res.Dumps = append(n.res.Dumps, name+".*")
	}
	return counts, nil
}
