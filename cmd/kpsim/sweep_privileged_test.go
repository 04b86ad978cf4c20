package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/reports"
)

// TestPrivilegedSweep runs a tiny sweep through kpsim run (iptables legacy
// and nftables on the host, 5, 10 and 20 Services of 2 endpoints, the
// first sync only) and checks the sweep's results: every size ran in its
// own node with the resized cluster, iptables nat rules grow by exactly the
// same number per Service (derived from the first two sizes, checked at
// the third and against the saved dump), nftables stops at its cap, and
// result.json holds the fitted exponents.
func TestPrivilegedSweep(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "nft")
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := runCLI(&out, &errOut, "run", "testdata/sweep.yaml", "--kernel", "host", "--out", dir); err != nil {
		t.Fatalf("run failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	r, err := reports.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Host.Checked || !r.Host.Unchanged {
		t.Errorf("host check: %+v", r.Host)
	}
	var names []string
	for _, m := range r.Modes {
		names = append(names, m.Name)
		if m.Error != "" {
			t.Errorf("%s failed: %s", m.Name, m.Error)
		}
	}
	if got, want := strings.Join(names, " "), "iptables-legacy@5 iptables-legacy@10 iptables-legacy@20 nftables@5 nftables@10 nftables@20"; got != want {
		t.Fatalf("runs %s, want %s", got, want)
	}
	sw := r.Sweep
	if sw == nil || len(sw.Modes) != 2 {
		t.Fatalf("sweep result: %+v", sw)
	}
	ipt, nft := sw.Modes[0], sw.Modes[1]
	if len(ipt.Points) != 3 || len(nft.Points) != 2 {
		t.Fatalf("iptables %d points, nftables %d: want 3 and 2", len(ipt.Points), len(nft.Points))
	}
	if len(nft.Skipped) != 1 || nft.Skipped[0].Count != 20 || !strings.Contains(nft.Skipped[0].Reason, "maxCount[nftables] = 10") || nft.MaxCount != 10 {
		t.Errorf("nftables at 20: skipped %+v, max %d; want skipped above maxCount 10", nft.Skipped, nft.MaxCount)
	}
	for _, sm := range sw.Modes {
		for _, p := range sm.Points {
			if p.Services != p.Count || p.Endpoints != 2*p.Count || p.Placement != "host" || p.FirstSyncSeconds <= 0 || p.PeakRSSBytes <= 0 {
				t.Errorf("%s: %+v: want count Services, 2 endpoints each, on the host, a first sync and a peak RSS", p.Run, p)
			}
		}
	}

	// nat rules are a fixed part plus the same number per Service (its
	// service, endpoint and jump rules): derive both from 5 and 10.
	nat := func(i int) int { return ipt.Points[i].Rules["iptables/nat"] }
	perService := (nat(1) - nat(0)) / 5
	if perService <= 0 || (nat(1)-nat(0))%5 != 0 {
		t.Fatalf("nat rules %d at 5 and %d at 10 do not grow by a whole number per Service", nat(0), nat(1))
	}
	fixed := nat(0) - 5*perService
	t.Logf("nat rules: %d, %d, %d at 5, 10, 20 Services: %d fixed + %d per Service", nat(0), nat(1), nat(2), fixed, perService)
	if want := fixed + 20*perService; nat(2) != want {
		t.Errorf("nat rules at 20 Services: %d, want %d (%d fixed + %d per Service, from the sizes 5 and 10)", nat(2), want, fixed, perService)
	}
	// The count agrees with the dump the node saved for that size.
	dump, err := readGzip(filepath.Join(dir, "svc-20", "iptables-legacy.first-sync.iptables-save.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if got := natRules(dump); got != nat(2) {
		t.Errorf("svc-20's saved dump holds %d nat rules, result.json says %d", got, nat(2))
	}
	if doc, err := os.ReadFile(filepath.Join(dir, "svc-20", "scenario.yaml")); err != nil || !strings.Contains(string(doc), "count: 20") {
		t.Errorf("svc-20/scenario.yaml (%v) does not hold the resized group:\n%s", err, doc)
	}

	// The fitted exponents: nat rules follow fixed + perService*n exactly,
	// so the fit must be the fit of those values.
	var xs, ys []float64
	for _, n := range []int{5, 10, 20} {
		xs, ys = append(xs, float64(n)), append(ys, float64(fixed+perService*n))
	}
	want, err := reports.FitPowerLaw(xs, ys)
	if err != nil {
		t.Fatal(err)
	}
	got := ipt.Fit("rules/iptables/nat")
	if got == nil || math.Abs(got.Exponent-want.Exponent) > 1e-9 || got.Points != 3 {
		t.Errorf("nat rules fit %+v, want exponent %.6f over 3 points", got, want.Exponent)
	}
	if got.Exponent <= 0.5 || got.Exponent >= 1 {
		t.Errorf("nat rules exponent %.3f: a fixed part plus a linear part grows with an exponent just under 1", got.Exponent)
	}
	t.Logf("nat rules exponent %.4f (R² %.4f)", got.Exponent, got.RSquared)
	for _, sm := range sw.Modes {
		for _, metric := range []string{reports.SweepFirstSync, reports.SweepPeakRSS} {
			if f := sm.Fit(metric); f == nil || f.Points != len(sm.Points) || math.IsNaN(f.Exponent) {
				t.Errorf("%s: %s fit %+v, want one over %d points", sm.Name, metric, f, len(sm.Points))
			}
		}
	}
	if f := nft.Fit("rules/nftables/rules"); f == nil || f.Exponent <= 0 {
		t.Errorf("nftables rules fit %+v, want a growing count", f)
	}
	if !strings.Contains(out.String(), "Sweep: growth exponents") {
		t.Errorf("the summary has no sweep table:\n%s", out.String())
	}
}

// natRules counts the rules (-A lines) of the nat table in an
// iptables-save dump.
func natRules(dump string) int {
	n, inNat := 0, false
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			inNat = line == "*nat"
		case inNat && strings.HasPrefix(line, "-A "):
			n++
		}
	}
	return n
}

func readGzip(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(zr)
	return string(b), err
}
