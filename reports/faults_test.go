package reports

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/scenarios"
)

func TestFaultExpectations(t *testing.T) {
	m := ModeResult{Name: "iptables-legacy", Mode: scenarios.ModeIPTables,
		KubeProxyTotals: Totals{RestoreFailures: 1},
		Faults: []FaultResult{
			{Where: "restore-fails", Kind: "command", Target: "iptables-restore", Armed: 2, Injected: 2},
			{Where: "spec.faults[0]", Kind: "api", Target: "endpointslices (list)", Armed: 2, Injected: 1},
			{Where: "spec.faults[1]", Kind: "api", Target: "services (every verb)", Delayed: 4},
		}}
	got := map[string]Expectation{}
	for _, e := range faultExpectations(&m) {
		got[e.Name] = e
	}
	for name, passed := range map[string]bool{
		"fault restore-fails: command iptables-restore":       true,
		"fault spec.faults[0]: api endpointslices (list)":     false, // one error never met
		"kube-proxy counted the failed iptables-restore runs": false, // 1 counted < 2 injected
	} {
		e, ok := got[name]
		if !ok {
			t.Errorf("no expectation %q (got %v)", name, got)
			continue
		}
		if e.Passed != passed {
			t.Errorf("%s: passed %v, want %v (%+v)", name, e.Passed, passed, e)
		}
	}
	if len(got) != 3 {
		t.Errorf("got %d fault expectations, want 3: a delay-only fault has nothing to count", len(got))
	}

	r := &Result{Modes: []ModeResult{m}}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Faults", "command iptables-restore", "1 iptables-restore", "**faults**:"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}
