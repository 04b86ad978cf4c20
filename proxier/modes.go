package proxier

import (
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/scenarios"
)

// Modes Start accepts (Options.Mode), as kube-proxy spells them; package
// scenarios defines them.
const (
	ModeIPTables = scenarios.ModeIPTables
	ModeNFTables = scenarios.ModeNFTables
	// ModeIPVS is kube-proxy's IPVS mode (deprecated upstream since 1.35,
	// still shipped in 1.37). It needs a kernel with IP_VS, IP_SET and
	// dummy links: not the host here, so it normally runs in a VM node
	// (vm.Start).
	ModeIPVS = scenarios.ModeIPVS
)

// iptables backends (Options.Backend); package scenarios defines them.
const (
	BackendLegacy = scenarios.BackendLegacy
	BackendNFT    = scenarios.BackendNFT
)

// Package rules spells the backends too, since it may import only the
// standard library. This does not compile if the two spellings ever part:
// a map literal may not repeat a constant key.
var _ = map[bool]struct{}{false: {}, BackendLegacy == rules.BackendLegacy && BackendNFT == rules.BackendNFT: {}}
