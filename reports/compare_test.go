package reports

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// syntheticRun is a run of one or more modes whose syncs are drawn from
// lognormal distributions with the given medians.
func syntheticRun(id string, seed uint64, kernel string, modes map[string]float64) *Result {
	rng := rand.New(rand.NewPCG(seed, 17))
	r := &Result{SchemaVersion: SchemaVersion, RunID: id,
		Scenario:    ScenarioInfo{Name: "synthetic", Seed: 1, SHA256: "abc"},
		Environment: Environment{KernelRelease: kernel, Kernel: "host", CPUs: 2, KubeProxyVersion: "v1.37.1", GoVersion: "go1.26.8"}}
	names := make([]string, 0, len(modes))
	for n := range modes {
		names = append(names, n)
	}
	// Map order must not change the draws.
	slices.Sort(names)
	for _, name := range names {
		med := modes[name]
		m := ModeResult{Name: name, Mode: strings.SplitN(name, "-", 2)[0], Rules: map[string]int{"iptables/nat": 64008}}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i, x := range lognormal(rng, 30, med) {
			m.Syncs = append(m.Syncs, Sync{Start: t0, Seconds: x, Full: i == 0, Merged: 1, Succeeded: true})
		}
		for _, x := range lognormal(rng, 10, 2*med) {
			m.EndToEnd = append(m.EndToEnd, LatencySample{Seconds: x})
		}
		r.Modes = append(r.Modes, m)
	}
	return r
}

func metric(t *testing.T, mc ModeComparison, name string) MetricComparison {
	t.Helper()
	for _, m := range mc.Metrics {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no metric %q in %+v", name, mc)
	return MetricComparison{}
}

func TestCompareSignificantDifference(t *testing.T) {
	a := syntheticRun("a", 1, "6.18", map[string]float64{"iptables-legacy": 0.3})
	b := syntheticRun("b", 2, "6.18", map[string]float64{"iptables-legacy": 0.9})
	c, err := Compare(a, b, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Modes) != 1 || !c.SameMachine() {
		t.Fatalf("got %d pairs, same machine %v", len(c.Modes), c.SameMachine())
	}
	m := metric(t, c.Modes[0], "sync, all")
	if !m.Tested || !m.Significant || m.P >= 0.001 || m.Delta < 1 {
		t.Errorf("a tripled sync time: %+v, want significant with delta > +100%%", m)
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, c); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), machineWarning) {
		t.Error("warned about different machines for one machine")
	}
	if !strings.Contains(out.String(), "p=0.000 n=30+30") {
		t.Errorf("no p-value and n in:\n%s", out.String())
	}
}

// TestCompareSameDistribution compares runs drawn from one distribution
// with many seeds: about 5% of them may look different, and those show a
// delta; the others show ~.
func TestCompareSameDistribution(t *testing.T) {
	const trials = 400
	significant := 0
	for seed := range uint64(trials) {
		a := syntheticRun("a", 2*seed+100, "6.18", map[string]float64{"nftables": 0.15})
		b := syntheticRun("b", 2*seed+101, "6.18", map[string]float64{"nftables": 0.15})
		c, err := Compare(a, b, CompareOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := metric(t, c.Modes[0], "sync, all")
		if m.Significant {
			significant++
		}
		if seed == 0 {
			var out bytes.Buffer
			if err := WriteComparison(&out, c); err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, "sync, all") && strings.Contains(line, " ~ ") == m.Significant {
					t.Errorf("significant %v, but the row reads %q", m.Significant, line)
				}
			}
		}
	}
	rate := float64(significant) / trials
	t.Logf("%d of %d comparisons of one distribution significant (%.3f)", significant, trials, rate)
	// Binomial(400, 0.05): sd 0.011.
	if rate > 0.085 || rate < 0.015 {
		t.Errorf("false-positive rate %.3f, want near 0.05", rate)
	}
}

func TestComparePairsAndWarnings(t *testing.T) {
	a := syntheticRun("a", 1, "6.18", map[string]float64{"iptables-legacy": 0.3, "nftables": 0.2})
	b := syntheticRun("b", 2, "6.1.0-vm", map[string]float64{"iptables-nft": 0.3, "nftables": 0.2})

	c, err := Compare(a, b, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Modes) != 1 || c.Modes[0].A != "nftables" || strings.Join(c.OnlyA, ",") != "iptables-legacy" || strings.Join(c.OnlyB, ",") != "iptables-nft" {
		t.Errorf("pairing by name: %+v, only A %v, only B %v", c.Modes, c.OnlyA, c.OnlyB)
	}
	if c.SameMachine() {
		t.Error("different kernels look like one machine")
	}
	var out bytes.Buffer
	if err := WriteComparisonMarkdown(&out, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), machineWarning) || !strings.Contains(out.String(), "kernel: 6.18 vs 6.1.0-vm") {
		t.Errorf("no loud warning about the kernels:\n%s", out.String())
	}

	c, err = Compare(a, b, CompareOptions{Pairs: map[string]string{"iptables-legacy": "iptables-nft"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Modes) != 2 || c.Modes[0].A != "iptables-legacy" || c.Modes[0].B != "iptables-nft" || len(c.OnlyA)+len(c.OnlyB) != 0 {
		t.Errorf("explicit pair: %+v, only A %v, only B %v", c.Modes, c.OnlyA, c.OnlyB)
	}
	if got := metric(t, c.Modes[0], "rules iptables/nat"); got.A != 64008 || got.Tested {
		t.Errorf("rules: %+v", got)
	}

	for _, pairs := range []map[string]string{{"ipvs": "nftables"}, {"nftables": "ipvs"}, {"iptables-legacy": "nftables", "nftables": "nftables"}} {
		if _, err := Compare(a, b, CompareOptions{Pairs: pairs}); err == nil {
			t.Errorf("pairs %v: no error", pairs)
		}
	}
}

func TestCompareRealRuns(t *testing.T) {
	r := testResult(t)
	c, err := Compare(r, r, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Modes) != 4 {
		t.Fatalf("%d pairs, want 4", len(c.Modes))
	}
	for _, mc := range c.Modes {
		for _, m := range mc.Metrics {
			if m.Significant || (m.NA > 0 && m.Delta != 0) {
				t.Errorf("%s %s: a run differs from itself: %+v", mc.A, m.Name, m)
			}
		}
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "skipped in A") {
		t.Errorf("the skipped mode is not explained:\n%s", out.String())
	}
}
