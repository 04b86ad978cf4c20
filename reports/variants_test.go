package reports

import (
	"fmt"
	"strings"
	"testing"
)

// variantResult builds a comparison of base and new over 5 runs of one
// entry: first syncs scaled by firstNew for new, partial syncs alike, and
// new's nftables rules given by rulesNew.
func variantResult(firstNew float64, rulesNew int) *Result {
	r := &Result{Variants: []Variant{{Name: "base", Binary: "bin/kpsim", Version: "v1.37.1"}, {Name: "new", Binary: "bin/kpsim-x", Version: "v1.36.3"}}}
	jitter := []float64{1.00, 1.04, 0.97, 1.02, 0.99}
	for run := 1; run <= 5; run++ {
		for _, v := range []string{"base", "new"} {
			scale, rules := 1.0, 2022
			if v == "new" {
				scale, rules = firstNew, rulesNew
			}
			j := jitter[run-1]
			// Alternate the jitter between the variants so equal scales
			// do not line up run by run.
			if v == "new" {
				j = jitter[5-run]
			}
			info := &VariantRun{Entry: "nftables", Variant: v, Run: run}
			r.Modes = append(r.Modes, ModeResult{Name: info.RunName(), Mode: "nftables", Variant: info,
				Syncs: []Sync{
					{Seconds: scale * j, Full: true, Merged: 1, Kernel: map[string]float64{"nft-transaction": 0.5 * scale * j}},
					{Seconds: 0.05 * j, Merged: 1}, {Seconds: 0.06 * j, Merged: 1},
				},
				RulesAfterFirstSync: map[string]int{"nftables/rules": rules, "nftables/chains": 100},
				Resources:           Resources{CPUSeconds: 2 * j, MaxRSSBytes: int64(100e6 * j)}})
		}
	}
	return r
}

func TestCompareVariants(t *testing.T) {
	rows := CompareVariants(variantResult(2, 1022))
	got := map[string]VariantRow{}
	for _, row := range rows {
		got[row.Metric] = row
	}
	first := got["first sync"]
	if !first.Significant() || first.Shift == nil || first.Shift.Low > 2 || first.Shift.High < 2 || len(first.Values) != 5 {
		t.Errorf("first sync twice as long: %+v, want a significant ratio near 2 over 5 runs a side", first)
	}
	for _, m := range []string{"partial sync (median of each run)", "kube-proxy cpu", "kube-proxy peak rss"} {
		if got[m].Significant() || !got[m].Tested {
			t.Errorf("%s unchanged: %+v, want a tested row with no significant difference", m, got[m])
		}
	}
	if part := got["first sync: nft-transaction"]; part.Tested || part.Shift == nil {
		t.Errorf("a part of the first sync: %+v, want a descriptive row with its ratio", part)
	}

	tables := variantTables(variantResult(2, 1022))
	counts := fmt.Sprint(tables[1].Rows)
	if !strings.Contains(counts, "[nftables nftables/rules 2022 1022 yes]") || !strings.Contains(counts, "[nftables nftables/chains 100 100 ]") {
		t.Errorf("count rows %s: want the rule count's exact difference and the equal chain count", counts)
	}
}

// TestCompareVariantsSame: a variant equal to its base (the same binary
// twice) shows no significant difference anywhere.
func TestCompareVariantsSame(t *testing.T) {
	for _, row := range CompareVariants(variantResult(1, 2022)) {
		if row.Significant() {
			t.Errorf("%s: %+v significant for equal variants", row.Metric, row.Shift)
		}
	}
}
