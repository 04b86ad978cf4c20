package orchestrator

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/node"
	"github.com/kpsim/kpsim/proxier/rules"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// The after-churn oracle: the dataplane a proxier reached through a run's
// churn must equal what a fresh proxier of the same mode builds from the
// final API state in one full sync. The main node saves that state; a
// second node process (a clean network namespace) builds from it.

// unreachableChains, per normalized dump kind, drops the chains no packet
// can reach and returns them.
var unreachableChains = map[string]func(string) (string, []string){
	"iptables": rules.ReachableIPTables,
	"nft":      rules.StaleNFTChains,
}

// compareOracle diffs the main node's final normalized dataplane with the
// oracle's.
func compareOracle(dir string, m scenarios.ModeSpec) reports.Oracle {
	// The normalized dumps a mode leaves: IPVS mode also writes iptables
	// rules, compared like iptables mode's.
	kinds := []string{"iptables"}
	switch m.Mode {
	case scenarios.ModeNFTables:
		kinds = []string{"nft"}
	case scenarios.ModeIPVS:
		kinds = []string{"ipvs", "iptables"}
	}
	o := reports.Oracle{Checked: true}
	var diffs []string
	for _, kind := range kinds {
		end, fresh := m.Name+".end."+kind+".normalized.gz", m.Name+".oracle."+kind+".normalized.gz"
		o.Files = append(o.Files, end, fresh)
		got, err := readGzip(filepath.Join(dir, end))
		if err != nil {
			return reports.Oracle{Error: err.Error(), Files: o.Files}
		}
		want, err := readGzip(filepath.Join(dir, fresh))
		if err != nil {
			return reports.Oracle{Error: err.Error(), Files: o.Files}
		}
		// Compare what packets can reach: iptables chains nothing jumps
		// to (left by partial syncs) and nftables chains kube-proxy
		// flushed and deletes a second later are reported, not compared.
		// Those unreachable in the fresh dataplane too (iptables'
		// canaries) are by design; the leftovers are the rest.
		if prune := unreachableChains[kind]; prune != nil {
			var left, inFresh []string
			got, left = prune(got)
			want, inFresh = prune(want)
			for _, c := range left {
				if !slices.Contains(inFresh, c) {
					o.Unreachable++
					if len(o.UnreachableSample) < 5 {
						o.UnreachableSample = append(o.UnreachableSample, c)
					}
				}
			}
			o.UnreachableInFresh = len(inFresh)
		}
		// State packets wrote (nftables affinity-set elements, IPVS
		// connection counts) is kept out of the normalized dumps and
		// reported apart; the fresh proxier carried no traffic.
		if b, err := readGzip(filepath.Join(dir, m.Name+".end."+kind+".learned.gz")); err == nil {
			for _, l := range rules.ParseLearned(b) {
				o.Learned++
				if len(o.LearnedSample) < 5 {
					o.LearnedSample = append(o.LearnedSample, l)
				}
			}
		} else if !errors.Is(err, fs.ErrNotExist) { // iptables writes no learned file
			return reports.Oracle{Error: err.Error(), Files: o.Files}
		}
		if kind == "ipvs" {
			// IPVS mode keeps removed real servers at weight 0 until
			// their connections drain (graceful termination): they take
			// no new connections, so they are reported, not compared.
			var drained int
			got, drained = rules.WithoutWeightZero(got)
			want, _ = rules.WithoutWeightZero(want)
			o.Draining = drained
		}
		if d := rules.DiffNormalized(want, got); d != "" {
			diffs = append(diffs, kind+":\n"+d)
		}
		o.Lines += strings.Count(got, "\n")
	}
	o.Diff = strings.Join(diffs, "\n")
	o.Equal = o.Diff == ""
	return o
}

func readGzip(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	b, err := io.ReadAll(zr)
	return string(b), err
}

// runOracle starts the oracle node for mode entry m of point p and
// compares.
func (r *run) runOracle(p point, m scenarios.ModeSpec) reports.Oracle {
	state, err := os.ReadFile(node.FinalStatePath(p.dir, m.Name))
	if err != nil {
		return reports.Oracle{Error: "the run saved no final API state: " + err.Error()}
	}
	in := node.Input{Version: node.ProtocolVersion, ScenarioFile: p.file, ScenarioYAML: p.data, Mode: m.Name, OutDir: p.dir, OracleState: state}
	fmt.Fprintf(r.stderr, "%s: oracle: a fresh proxier from the final API state\n", m.Name)
	mr := r.startNode(p, in, m, m.Name+".oracle.node.log")
	if mr.Error != "" {
		return reports.Oracle{Error: "the oracle's proxier failed: " + mr.Error}
	}
	// A migration changes the mode whose rules the run ends with.
	return compareOracle(p.dir, p.s.FinalMode(m))
}

// nameSharedLeftovers adds to a mode's last migration the old mode's
// chains left in tables the new mode writes too (IPVS mode's iptables
// chains after a switch to iptables mode): the node names leftovers of
// the kinds only the old mode writes, and these are told apart only by
// the fresh proxier's dump, the oracle's: a chain of the end dump that the
// fresh proxier of the final mode does not create is the old mode's (the
// new mode's first sync was full, and a full sync leaves none of its own
// behind).
func nameSharedLeftovers(dir string, final scenarios.ModeSpec, mr *reports.ModeResult) {
	last := -1
	for i, lc := range mr.Lifecycle {
		if lc.Action == "migrate" && lc.Error == "" {
			last = i
		}
	}
	if last < 0 || final.Mode == scenarios.ModeNFTables {
		return
	}
	got, err := readGzip(filepath.Join(dir, final.Name+".end.iptables.normalized.gz"))
	if err != nil {
		return
	}
	want, err := readGzip(filepath.Join(dir, final.Name+".oracle.iptables.normalized.gz"))
	if err != nil {
		return
	}
	fresh := map[string]bool{}
	for _, c := range normalizedChains(want) {
		fresh[c] = true
	}
	lc := &mr.Lifecycle[last]
	n := 0
	for _, c := range normalizedChains(got) {
		if fresh[c] {
			continue
		}
		n++
		lc.Leftovers = append(lc.Leftovers, "iptables-"+final.Backend+": "+c+" (a fresh "+final.Mode+" proxier has no such chain)")
	}
	if n > 0 {
		if lc.LeftoverCounts == nil {
			lc.LeftoverCounts = map[string]int{}
		}
		lc.LeftoverCounts["iptables-"+final.Backend+"/chains"] += n
	}
}

// normalizedChains lists the chains of a normalized iptables dump as
// table/chain.
func normalizedChains(dump string) []string {
	var out []string
	table := ""
	for _, l := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":"):
			out = append(out, table+"/"+strings.Fields(l[1:])[0])
		}
	}
	return out
}
