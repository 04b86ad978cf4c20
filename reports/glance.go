package reports

import (
	"fmt"
	"slices"
	"strings"
)

// The report leads with the answer: one line per mode with what a reader
// comparing modes asks first, nftables first (the default mode from
// v1.40), IPVS labelled as deprecated.

// ipvsDeprecation is upstream's timeline for IPVS mode (KEP-5495) and
// nftables mode (KEP-5343).
const ipvsDeprecation = "IPVS mode is deprecated: off by default from Kubernetes v1.40 and removed in v1.43 (KEP-5495); " +
	"nftables becomes kube-proxy's default mode in v1.40 (KEP-5343)."

// modeRank orders modes as the report shows them: nftables, iptables,
// IPVS.
func modeRank(mode string) int {
	switch mode {
	case "nftables":
		return 0
	case "iptables":
		return 1
	case "ipvs":
		return 2
	}
	return 3
}

// byModeRank returns the measured modes in report order, stable within a
// rank (the run's order).
func byModeRank(r *Result) []*ModeResult {
	ms := measured(r)
	slices.SortStableFunc(ms, func(a, b *ModeResult) int { return modeRank(a.Mode) - modeRank(b.Mode) })
	return ms
}

// glanceLabel is a mode's name, with IPVS marked deprecated.
func glanceLabel(m *ModeResult) string {
	l := modeLabel(m)
	if m.Mode == "ipvs" {
		l += " (deprecated)"
	}
	if pl := m.Placement; pl != nil && pl.Kernel == "vm" {
		l += " [VM]"
	}
	return l
}

// glanceTable is the report's first table.
func glanceTable(r *Result) reportTable {
	t := reportTable{
		Title: "At a glance",
		Lead:  "One line per mode, nftables first. Timings are kube-proxy's own; VM rows compare only with other VM rows.",
		Header: []string{"mode", "first sync", "partial p50", "rules", "kube-proxy cpu", "kube-proxy rss",
			"programming p50, end to end", "verdicts"},
	}
	ipvs := false
	for _, m := range byModeRank(r) {
		ipvs = ipvs || m.Mode == "ipvs"
		first := "-"
		if f := m.ColdFirstSync(); f != nil {
			first = seconds(f.Seconds)
		}
		f := false
		e2e := "-"
		if xs := m.EndToEndSeconds(); len(xs) > 0 {
			e2e = seconds(Summarize(xs).P50)
		}
		t.Rows = append(t.Rows, []string{glanceLabel(m), first, seconds(Summarize(m.SyncSeconds(&f)).P50),
			headlineRules(m.Rules), fmt.Sprintf("%.1fs", m.Resources.KubeProxyCPUSeconds()),
			fmt.Sprintf("%d MiB", m.Resources.MaxRSSBytes>>20), e2e, verdicts(r, m)})
	}
	if ipvs {
		t.Notes = append(t.Notes, ipvsDeprecation)
	}
	return t
}

// verdicts sums up a mode's expectations: "ok (5)", or what was missed.
func verdicts(r *Result, m *ModeResult) string {
	if m.Error != "" {
		return "FAILED: " + firstLine(m.Error)
	}
	ok := 0
	var missed []string
	for _, e := range r.Expectations {
		if e.Mode != m.Name {
			continue
		}
		if e.Passed {
			ok++
		} else {
			missed = append(missed, e.Name)
		}
	}
	switch {
	case len(missed) > 0:
		return fmt.Sprintf("MISSED %s (%d ok)", strings.Join(missed, ", "), ok)
	case ok == 0:
		return "no expectations"
	}
	return fmt.Sprintf("all %d ok", ok)
}
