package reports

import (
	"bytes"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFitPowerLaw(t *testing.T) {
	xs := []float64{100, 500, 1000, 2000, 5000, 10000}
	noise := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name     string
		exponent float64
		jitter   float64 // multiplicative noise: y * exp(N(0, jitter))
		minR2    float64
		tol      float64
	}{
		{"linear", 1, 0, 1, 1e-9},
		{"quadratic", 2, 0, 1, 1e-9},
		{"n log n is a little over 1", 0, 0, 0.99, 0},
		{"square root", 0.5, 0, 1, 1e-9},
		{"constant", 0, 0, 1, 1e-12},
		{"linear with 5% noise", 1, 0.05, 0.99, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ys := make([]float64, len(xs))
			for i, x := range xs {
				ys[i] = 0.003 * math.Pow(x, tc.exponent) * math.Exp(tc.jitter*noise.NormFloat64())
				if strings.HasPrefix(tc.name, "n log n") {
					ys[i] = x * math.Log(x)
				}
			}
			f, err := FitPowerLaw(xs, ys)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.name, "n log n") {
				// d ln(x ln x) / d ln x = 1 + 1/ln x: 1.11 to 1.22 here.
				if f.Exponent < 1.1 || f.Exponent > 1.2 {
					t.Errorf("exponent %.3f, want between 1.1 and 1.2", f.Exponent)
				}
			} else if math.Abs(f.Exponent-tc.exponent) > tc.tol {
				t.Errorf("exponent %.6f, want %g ± %g", f.Exponent, tc.exponent, tc.tol)
			}
			if f.RSquared < tc.minR2-1e-9 || f.RSquared > 1+1e-9 {
				t.Errorf("R² %.6f, want at least %g", f.RSquared, tc.minR2)
			}
			if tc.jitter == 0 && !strings.HasPrefix(tc.name, "n log n") && math.Abs(f.Intercept-math.Log(0.003)) > 1e-9 {
				t.Errorf("intercept %.6f, want ln 0.003 = %.6f", f.Intercept, math.Log(0.003))
			}
			if f.Points != len(xs) {
				t.Errorf("%d points, want %d", f.Points, len(xs))
			}
		})
	}
	for _, bad := range []struct {
		name   string
		xs, ys []float64
	}{
		{"one size", []float64{100, 100}, []float64{1, 2}},
		{"zero value", []float64{100, 200}, []float64{0, 2}},
		{"lengths differ", []float64{100, 200}, []float64{1}},
		{"no points", nil, nil},
	} {
		if _, err := FitPowerLaw(bad.xs, bad.ys); err == nil {
			t.Errorf("%s: fitted", bad.name)
		}
	}
}

// sweepRuns are the ModeResults of a sweep of two entries: iptables on the
// host (three sizes, the last failed) and IPVS in a VM (capped above 10).
func sweepRuns() []ModeResult {
	run := func(entry, mode string, count int, first float64, rules map[string]int, vm bool) ModeResult {
		m := ModeResult{Name: entry + "@" + strconv.Itoa(count), Mode: mode, Sweep: &SweepRun{Entry: entry, Group: "svc", Count: count, Services: count, Endpoints: 2 * count, Dir: "svc-" + strconv.Itoa(count)},
			Syncs: []Sync{{Seconds: first, Full: true, Merged: 1, Succeeded: true}}, RulesAfterFirstSync: rules, Resources: Resources{MaxRSSBytes: int64(count) << 20}, Placement: &Placement{Kernel: "host"}}
		if vm {
			m.Placement = &Placement{Kernel: "vm", Accel: "tcg"}
			m.NativeEstimate = &NativeEstimate{FirstSync: [3]float64{first / 20, first / 30, first / 10}}
		}
		return m
	}
	failed := run("iptables-legacy", "iptables", 20, 0, nil, false)
	failed.Syncs, failed.Error = nil, "step initial: timeout"
	return []ModeResult{
		run("iptables-legacy", "iptables", 5, 0.05, map[string]int{"iptables/nat": 48, "iptables/filter": 15}, false),
		run("iptables-legacy", "iptables", 10, 0.1, map[string]int{"iptables/nat": 88, "iptables/filter": 15}, false),
		failed,
		run("ipvs", "ipvs", 5, 2, map[string]int{"ipvs/realServers": 10, "iptables/nat": 20}, true),
		run("ipvs", "ipvs", 10, 8, map[string]int{"ipvs/realServers": 20, "iptables/nat": 20}, true),
		{Name: "ipvs@20", Mode: "ipvs", Skipped: "above spec.sweep.maxCount[ipvs] = 10", Sweep: &SweepRun{Entry: "ipvs", Group: "svc", Count: 20, Dir: "svc-20"}},
	}
}

func TestNewSweepResult(t *testing.T) {
	sr := NewSweepResult("svc", []int{5, 10, 20}, sweepRuns(), map[string]int{"ipvs": 10})
	if len(sr.Modes) != 2 {
		t.Fatalf("%d modes, want 2", len(sr.Modes))
	}
	ipt, ipvs := sr.Modes[0], sr.Modes[1]
	if ipt.Name != "iptables-legacy" || ipt.Kernel != "host" || len(ipt.Points) != 3 || ipt.Points[2].Error == "" {
		t.Errorf("iptables entry: %+v", ipt)
	}
	if ipvs.Kernel != "vm" || ipvs.MaxCount != 10 || len(ipvs.Points) != 2 {
		t.Errorf("ipvs entry: %+v", ipvs)
	}
	if want := []SweepSkip{{Count: 20, Reason: "above spec.sweep.maxCount[ipvs] = 10"}}; !cmp.Equal(ipvs.Skipped, want) {
		t.Errorf("ipvs skipped %+v, want %+v", ipvs.Skipped, want)
	}
	if e := ipvs.Points[1].FirstSyncHostEstimate; e == nil || math.Abs(e[0]-0.4) > 1e-12 {
		t.Errorf("ipvs host estimate %v, want 0.4 first", e)
	}
	// The failed point is not fitted: first sync doubles with the size
	// over the two good points (exponent 1), nat rules grow by 40 per 5.
	fits := map[string]SweepFit{}
	for _, f := range ipt.Fits {
		fits[f.Metric] = f
	}
	approx := cmpopts.EquateApprox(0, 1e-9)
	for metric, want := range map[string]float64{"firstSync": 1, "peakRSS": 1, "rules/iptables/filter": 0, "rules/iptables/nat": math.Log(88.0/48) / math.Log(2)} {
		f, ok := fits[metric]
		if !ok {
			t.Errorf("no %s fit in %+v", metric, ipt.Fits)
			continue
		}
		if !cmp.Equal(f.Exponent, want, approx) || f.Points != 2 {
			t.Errorf("%s: exponent %g over %d points, want %g over 2", metric, f.Exponent, f.Points, want)
		}
	}
	if f := ipvs.Fit("firstSync"); f == nil || !cmp.Equal(f.Exponent, 2.0, approx) {
		t.Errorf("ipvs first sync fit %+v, want exponent 2", f)
	}
	if got := ipvs.HeadlineRuleKind(); got != "ipvs/realServers" {
		t.Errorf("ipvs headline rules %q", got)
	}
}

// TestSweepResultRoundTrip writes a sweep's result and reads it back: the
// schema keeps every field, and results without a sweep keep none.
func TestSweepResultRoundTrip(t *testing.T) {
	r := &Result{SchemaVersion: SchemaVersion, RunID: "kpsim-sweep", Modes: sweepRuns()}
	r.Sweep = NewSweepResult("svc", []int{5, 10, 20}, r.Modes, map[string]int{"ipvs": 10})
	path := filepath.Join(t.TempDir(), "result.json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip differs (-wrote +read):\n%s", diff)
	}
	// An older result (no sweep) still reads, with no sweep.
	old, err := ReadFile(filepath.Join("testdata", "2000x10.result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if old.Sweep != nil || old.Modes[0].Sweep != nil {
		t.Error("a result without a sweep read as one")
	}
}

func TestSweepReports(t *testing.T) {
	r := &Result{SchemaVersion: SchemaVersion, RunID: "kpsim-sweep", Modes: sweepRuns()}
	r.Sweep = NewSweepResult("svc", []int{5, 10, 20}, r.Modes, map[string]int{"ipvs": 10})
	var md, sum bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteSummary(&sum, r); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"markdown": md.String(), "summary": sum.String()} {
		for _, want := range []string{"Sweep: cost by size of group svc", "Sweep: growth exponents", "skipped: above spec.sweep.maxCount[ipvs] = 10",
			"first sync (VM timing)", "host est.", "iptables-legacy@20 failed: step initial: timeout", "least squares"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	charts, err := Charts(r)
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, c := range charts {
		titles = append(titles, c.Title)
	}
	// Host and VM timings on separate axes; rule counts share theirs.
	want := []string{"First sync vs Services, host", "First sync vs Services, in a VM", "Rules vs Services"}
	if !cmp.Equal(titles[len(titles)-3:], want) {
		t.Errorf("chart titles %q, want them to end with %q", titles, want)
	}
	last := charts[len(charts)-1]
	for _, s := range []string{"slope 1.00", "ipvs ipvs/realServers [VM]"} {
		if !bytes.Contains(last.SVG, []byte(s)) {
			t.Errorf("rules chart legend lacks %q", s)
		}
	}
}
