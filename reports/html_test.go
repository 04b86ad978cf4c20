package reports

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func renderHTML(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, testResult(t)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// wantCharts is the test result's figure count: the glance chart beside
// the first table, sync distribution, end-to-end latency, and per-endpoint
// shares of 6 Services.
const wantCharts = 9

func TestWriteHTMLStructure(t *testing.T) {
	page := renderHTML(t)
	if got := strings.Count(page, "<svg"); got != wantCharts {
		t.Errorf("%d <svg> elements, want %d", got, wantCharts)
	}
	if got := strings.Count(page, "</svg>"); got != wantCharts {
		t.Errorf("%d </svg>, want %d", got, wantCharts)
	}
	if got := strings.Count(page, "<figcaption>"); got != wantCharts {
		t.Errorf("%d captions, want %d", got, wantCharts)
	}
	for _, want := range []string{"<!DOCTYPE html>", "<style>", "<table>", "iptables-legacy", "nftables",
		"How these numbers were obtained", "Sync time distribution", "End-to-end latency samples", "Per-endpoint shares", "<path"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<?xml") {
		t.Error("an SVG kept its XML prologue, which is invalid inside HTML")
	}
	// Self-contained: nothing is loaded from elsewhere. The SVG namespace
	// names (xmlns) are identifiers, not references.
	external := regexp.MustCompile(`(?i)<script|<link|<iframe|<img|\b(src|href|xlink:href)\s*=|url\(|@import`)
	if m := external.FindString(page); m != "" {
		t.Errorf("page references something outside itself: %q", m)
	}
	withoutNS := regexp.MustCompile(`xmlns(:xlink)?="http://www.w3.org/[^"]*"`).ReplaceAllString(page, "")
	if loc := regexp.MustCompile(`(?i)(https?|ftp|file)://`).FindStringIndex(withoutNS); loc != nil {
		i := loc[0]
		t.Errorf("page holds a URL: %q", withoutNS[max(0, i-40):min(len(withoutNS), i+60)])
	}
}

func TestWriteHTMLEmptyResult(t *testing.T) {
	var buf bytes.Buffer
	r := &Result{RunID: "empty", Modes: []ModeResult{{Name: "ipvs", Mode: "ipvs", Skipped: "no IPVS"}}}
	if err := WriteHTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "<svg") {
		t.Error("a run without measurements has charts")
	}
}

// TestWriteHTMLInChromium loads the page in headless Chromium and checks
// that the browser's DOM holds every chart.
func TestWriteHTMLInChromium(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("headless browser check needs %s (apt-get install chromium): %v", chromium, err)
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, []byte(renderHTML(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile")}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", "file://"+page)...)
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	if got := strings.Count(string(dom), "<svg"); got != wantCharts {
		t.Errorf("the browser's DOM has %d <svg> elements, want %d", got, wantCharts)
	}
	checkSweepInChromium(ctx, t, dir, chromium, args)
	if got := strings.Count(string(dom), "<figcaption>"); got != wantCharts {
		t.Errorf("the browser's DOM has %d captions, want %d", got, wantCharts)
	}
	if !strings.Contains(string(dom), "<table>") {
		t.Error("the browser's DOM has no table")
	}

	png := filepath.Join(dir, "report.png")
	cmd = exec.CommandContext(ctx, chromium, append(args, "--screenshot="+png, "--window-size=1200,3000", "file://"+page)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, stderr.String())
	}
	st, err := os.Stat(png)
	if err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot %s missing or nearly empty (%v)", png, err)
	}
	if keep := os.Getenv("KPSIM_SCREENSHOT"); keep != "" {
		data, _ := os.ReadFile(png)
		_ = os.WriteFile(keep, data, 0o644)
	}

	// The page fits a 1400-pixel-wide window, even with a dozen modes
	// side by side (a sweep's or a comparison's runs are columns of the
	// rules table).
	wide := testResult(t)
	base := slices.Clone(wide.Modes)
	for i := 0; len(wide.Modes) < 12; i++ {
		m := base[i%len(base)]
		m.Name = fmt.Sprintf("%s@variant-%d", m.Name, i)
		wide.Modes = append(wide.Modes, m)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, wide); err != nil {
		t.Fatal(err)
	}
	for name, page := range map[string]string{"the test result": renderHTML(t), "12 modes": buf.String()} {
		w := pageWidth(ctx, t, dir, chromium, args, page)
		t.Logf("%s: %d pixels wide at a 1400-pixel window", name, w)
		if w > 1400 {
			t.Errorf("%s: at a 1400-pixel window the page is %d pixels wide: it scrolls sideways", name, w)
		}
	}
}

// pageWidth lays page out in a 1400-pixel-wide window and returns its
// document's width. A test copy of the page writes it into the DOM (the
// report itself carries no script).
func pageWidth(ctx context.Context, t *testing.T, dir, chromium string, args []string, page string) int {
	t.Helper()
	probe := filepath.Join(dir, "width.html")
	measure := `<script>document.body.setAttribute("data-width", document.documentElement.scrollWidth)</script></body>`
	if err := os.WriteFile(probe, []byte(strings.Replace(page, "</body>", measure, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, chromium, append(args, "--window-size=1400,1000", "--dump-dom", "file://"+probe)...)
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`data-width="(\d+)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatal("the width probe wrote nothing")
	}
	w, _ := strconv.Atoi(string(m[1]))
	return w
}

// A run with a single sync (or all syncs equal) once made gonum/plot
// panic on the log axis; it must render.
func TestChartsSingleSync(t *testing.T) {
	r := &Result{SchemaVersion: SchemaVersion, Modes: []ModeResult{{Name: "nftables", Mode: "nftables", Syncs: []Sync{{Seconds: 0.05, Full: true, Merged: 1}}}}}
	charts, err := Charts(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) == 0 || !bytes.Contains(charts[0].SVG, []byte("<svg")) {
		t.Errorf("no sync chart: %+v", charts)
	}
}

// sweepPages are a real sweep run (iptables-legacy and nftables at 5, 10
// and 20 Services, nftables capped at 10), and the same with nftables
// marked as run in a VM, with the sweep charts each must show: VM timings
// get their own first-sync chart.
func sweepPages(t *testing.T) map[string][]string {
	t.Helper()
	r, err := ReadFile(filepath.Join("testdata", "sweep.result.json"))
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string][]string{}
	render := func(name string, r *Result, want []string) {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, r); err != nil {
			t.Fatal(err)
		}
		pages[buf.String()] = want
	}
	render("host", r, []string{"First sync vs Services, host", "Rules vs Services"})
	for i := range r.Modes {
		if strings.HasPrefix(r.Modes[i].Name, "nftables") && r.Modes[i].Skipped == "" {
			r.Modes[i].Placement = &Placement{Kernel: "vm", Accel: "tcg"}
		}
	}
	r.Sweep = NewSweepResult(r.Sweep.Group, r.Sweep.Counts, r.Modes, map[string]int{"nftables": 10})
	render("vm", r, []string{"First sync vs Services, host", "First sync vs Services, in a VM", "Rules vs Services"})
	return pages
}

func TestWriteHTMLSweep(t *testing.T) {
	for page, want := range sweepPages(t) {
		for _, title := range want {
			if strings.Count(page, "<strong>"+title+".</strong>") != 1 {
				t.Errorf("page lacks chart %q", title)
			}
		}
		if got := strings.Count(page, "vs Services"); got < len(want) {
			t.Errorf("%d sweep charts, want %d", got, len(want))
		}
		for _, s := range []string{"Sweep: growth exponents", "skipped: above spec.sweep.maxCount[nftables] = 10", "slope"} {
			if !strings.Contains(page, s) {
				t.Errorf("page lacks %q", s)
			}
		}
	}
}

// checkSweepInChromium loads the sweep pages in the browser and counts
// their sweep charts in its DOM.
func checkSweepInChromium(ctx context.Context, t *testing.T, dir, chromium string, args []string) {
	t.Helper()
	i := 0
	for page, want := range sweepPages(t) {
		i++
		path := filepath.Join(dir, fmt.Sprintf("sweep-%d.html", i))
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", "file://"+path)...)
		cmd.Stderr = &stderr
		dom, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
		}
		for _, title := range want {
			if !strings.Contains(string(dom), "<strong>"+title+".</strong>") {
				t.Errorf("the browser's DOM lacks the sweep chart %q", title)
			}
		}
		if got, n := strings.Count(string(dom), "<svg"), strings.Count(page, "<svg"); got != n || n < len(want) {
			t.Errorf("the browser's DOM has %d <svg> elements, the page %d, want at least %d sweep charts", got, n, len(want))
		}
	}
}
