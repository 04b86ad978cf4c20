package reports

import (
	"fmt"
)

// distributionTable shows each probe step's share tests with the power
// they had: a pass from a test that could not have seen the skew says
// little, and the reader must see that beside the verdict.
func distributionTable(r *Result) reportTable {
	t := reportTable{
		Title: "Traffic distribution",
		Lead: "Per probe step: the per-Service test (Holm-corrected) and the test pooled by chain position, " +
			"each with its power to flag the design's skew at the connections it had.",
		Header: []string{"mode", "step", "services x connections", "per-Service verdict", "power (+20% on one endpoint)",
			"pooled verdict", "power (+2% at one position)"},
	}
	low := false
	for _, m := range byModeRank(r) {
		for _, sd := range m.Distributions {
			rep := sd.Report
			if rep == nil || len(rep.Services) == 0 {
				continue
			}
			tested, flagged := 0, 0
			for _, s := range rep.Services {
				if s.Verdict != VerdictUntested {
					tested++
				}
				if s.Verdict == VerdictSkewed || s.Verdict == VerdictRules {
					flagged++
				}
			}
			verdict := fmt.Sprintf("pass (%d tested)", tested)
			if flagged > 0 {
				verdict = fmt.Sprintf("FLAGGED %d of %d", flagged, tested)
			}
			pooled := "-"
			if p := rep.Pooled; p != nil {
				pooled = fmt.Sprintf("%s (p %.3g, Bonferroni-adjusted %.3g)", p.Verdict, p.PValue, p.AdjustedPValue)
			}
			sp, pp := powerCell(sd.ServicePower), powerCell(sd.PooledPower)
			low = low || (sd.ServicePower > 0 && sd.ServicePower < 0.9) || (sd.PooledPower > 0 && sd.PooledPower < 0.9)
			t.Rows = append(t.Rows, []string{glanceLabel(m), sd.Step, fmt.Sprintf("%d x %d", tested, sd.Connections),
				verdict, sp, pooled, pp})
		}
	}
	if low {
		t.Notes = append(t.Notes, "A power below 0.9 means the test would often miss the skew it is designed for: "+
			"read a pass there as 'no large skew seen', not as evidence of an even spread. More connections per Service "+
			"raise it: leave probe.connections out for the count that gives the test probe.powerFor names (service, pooled "+
			"or both) power 0.9.")
	}
	return t
}

// powerCell writes a power, marking the ones below the design's 0.9.
func powerCell(p float64) string {
	switch {
	case p <= 0:
		return "-"
	case p < 0.9:
		return fmt.Sprintf("%.2g (low)", p)
	}
	return fmt.Sprintf("%.2f", p)
}
