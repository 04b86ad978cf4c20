package reports

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is one figure of the HTML report: an SVG document without XML
// prologue, ready to be inlined, and a caption that says how its data was
// obtained.
type Chart struct {
	Title   string
	Caption string
	SVG     []byte
	// Small charts are one of a series, shown side by side.
	Small bool
}

// maxShareCharts bounds the per-endpoint charts: a reader compares a few
// Services by eye; the statistics cover all of them.
const maxShareCharts = 6

// Charts draws a run's figures: the sync-time distribution per mode, the
// end-to-end latency samples per mode, the per-endpoint shares of up to
// six probed Services, the connections answered through each lifecycle
// step and a sweep's curves. A figure with no data is left out.
func Charts(r *Result) (_ []Chart, err error) {
	// gonum/plot panics on some degenerate inputs (a log axis whose range
	// reaches 0); a report must fail with an error, never crash.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("drawing charts: %v", p)
		}
	}()
	var charts []Chart
	for _, f := range []func(*Result) ([]Chart, error){syncChart, syncTimeChart, latencyChart, shareCharts, lifecycleCharts, sweepCharts, dataPathCharts} {
		cs, err := f(r)
		if err != nil {
			return nil, err
		}
		charts = append(charts, cs...)
	}
	return charts, nil
}

// measured returns the modes that ran (not skipped).
func measured(r *Result) []*ModeResult {
	var ms []*ModeResult
	for i := range r.Modes {
		if r.Modes[i].Skipped == "" {
			ms = append(ms, &r.Modes[i])
		}
	}
	return ms
}

func positiveFinite(xs []float64) []float64 {
	var out []float64
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}

func syncChart(r *Result) ([]Chart, error) {
	p := plot.New()
	p.Title.Text = "Sync duration, empirical CDF"
	p.X.Label.Text = "sync duration (log scale)"
	p.Y.Label.Text = "share of syncs at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = durationLogTicks
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(8)
	p.Legend.YOffs = vg.Points(8)
	var ns []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, m := range measured(r) {
		xs := positiveFinite(m.SyncSeconds(nil))
		if len(xs) == 0 {
			continue
		}
		sort.Float64s(xs)
		lo, hi = math.Min(lo, xs[0]), math.Max(hi, xs[len(xs)-1])
		pts := make(plotter.XYs, 0, len(xs)+1)
		pts = append(pts, plotter.XY{X: xs[0], Y: 0})
		for j, x := range xs {
			pts = append(pts, plotter.XY{X: x, Y: float64(j+1) / float64(len(xs))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("sync chart, %s: %w", m.Name, err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", m.Name, len(xs)), l)
		ns = append(ns, fmt.Sprintf("%s %d", m.Name, len(xs)))
	}
	if len(ns) == 0 {
		return nil, nil
	}
	// An explicit positive range: with one sync (or equal ones) plot would
	// widen a zero-width range by ±1, past 0 on a log axis.
	p.X.Min, p.X.Max = lo/1.5, hi*1.5
	p.Add(plotter.NewGrid())
	svg, err := renderSVG(p, 7*vg.Inch, 4*vg.Inch)
	if err != nil {
		return nil, err
	}
	return []Chart{{
		Title: "Sync time distribution",
		Caption: "Every sync of each mode's proxier, first full sync included (syncs per mode: " + strings.Join(ns, ", ") +
			"). A step rises by 1/n at each sync's duration; a curve further left is faster. " +
			"Durations are exact: the change of kube-proxy's kubeproxy_sync_proxy_rules_duration_seconds " +
			"histogram sum between polls 5 ms apart; syncs that ended between the same two polls share their summed duration evenly.",
		SVG: svg,
	}}, nil
}

func latencyChart(r *Result) ([]Chart, error) {
	p := plot.New()
	p.Title.Text = "End-to-end network programming latency"
	p.Y.Label.Text = "API write to dataplane (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = durationLogTicks
	var names []string
	total := 0
	for _, m := range measured(r) {
		xs := positiveFinite(m.EndToEndSeconds())
		if len(xs) == 0 {
			continue
		}
		i := len(names)
		names = append(names, fmt.Sprintf("%s (n=%d)", m.Name, len(xs)))
		total += len(xs)
		pts := make(plotter.XYs, len(xs))
		for j, x := range xs {
			// A fixed spread keeps equal values apart and the figure
			// reproducible.
			pts[j] = plotter.XY{X: float64(i) + float64(j%9-4)*0.04, Y: x}
		}
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("latency chart, %s: %w", m.Name, err)
		}
		s.Color = plotutil.Color(i)
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(2.5)
		p.Add(s)
		med := Summarize(xs).P50
		ml, err := plotter.NewLine(plotter.XYs{{X: float64(i) - 0.25, Y: med}, {X: float64(i) + 0.25, Y: med}})
		if err != nil {
			return nil, err
		}
		ml.Color = plotutil.Color(i)
		ml.Width = vg.Points(2)
		p.Add(ml)
	}
	if len(names) == 0 {
		return nil, nil
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Y.Min, p.Y.Max = p.Y.Min/1.25, p.Y.Max*1.25
	p.Add(plotter.NewGrid())
	svg, err := renderSVG(p, 7*vg.Inch, 4*vg.Inch)
	if err != nil {
		return nil, err
	}
	return []Chart{{
		Title: "End-to-end latency samples",
		Caption: fmt.Sprintf("Each dot is one sampled mutation (%d in all; the bar is each mode's median): "+
			"the time from the EndpointSlice write (the last-change-trigger-time kpsim stamps) until real connections "+
			"to the ClusterIP first reach the new endpoint, or stop reaching a removed one. Resolution is one probe "+
			"batch (about 2-3 ms). Samples that never settled or were superseded by a later change are left out. "+
			"Dots are spread sideways only to keep them apart.", total),
		SVG: svg,
	}}, nil
}

// probeKey names a probed Service port.
type probeKey struct{ Service, Port string }

func shareCharts(r *Result) ([]Chart, error) {
	modes := measured(r)
	// The Services are the first ones probed, in the order of the first
	// mode that probed anything; each mode's last probe of a port counts.
	var keys []probeKey
	seen := map[probeKey]bool{}
	for _, m := range modes {
		for _, pr := range m.Probes {
			k := probeKey{pr.Service, pr.Port}
			if !seen[k] && len(keys) < maxShareCharts && pr.OK > 0 {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			break
		}
	}
	var charts []Chart
	for _, k := range keys {
		c, err := shareChart(modes, k)
		if err != nil {
			return nil, err
		}
		if c != nil {
			charts = append(charts, *c)
		}
	}
	return charts, nil
}

func shareChart(modes []*ModeResult, k probeKey) (*Chart, error) {
	type series struct {
		name  string
		probe *Probe
	}
	var ss []series
	for _, m := range modes {
		var last *Probe
		for i := range m.Probes {
			if pr := &m.Probes[i]; pr.Service == k.Service && pr.Port == k.Port && pr.OK > 0 {
				last = pr
			}
		}
		if last != nil {
			ss = append(ss, series{m.Name, last})
		}
	}
	if len(ss) == 0 {
		return nil, nil
	}
	// Categories: the expected endpoints, then anything else that replied.
	expected := append([]string(nil), ss[0].probe.Expected...)
	sort.Strings(expected)
	cats := append([]string(nil), expected...)
	isCat := map[string]bool{}
	for _, c := range cats {
		isCat[c] = true
	}
	var extra []string
	for _, s := range ss {
		for ep := range s.probe.Endpoints {
			if !isCat[ep] {
				isCat[ep] = true
				extra = append(extra, ep)
			}
		}
	}
	sort.Strings(extra)
	cats = append(cats, extra...)
	if len(cats) == 0 {
		return nil, nil
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s port %s", k.Service, k.Port)
	p.Y.Label.Text = "share of replies"
	p.Legend.Top = true
	p.Legend.Left = false
	barWidth := vg.Points(math.Max(2, math.Min(12, 300/float64(len(cats)*len(ss)))))
	var legend []string
	for i, s := range ss {
		vals := make(plotter.Values, len(cats))
		for j, c := range cats {
			vals[j] = float64(s.probe.Endpoints[c]) / float64(s.probe.OK)
		}
		b, err := plotter.NewBarChart(vals, barWidth)
		if err != nil {
			return nil, fmt.Errorf("share chart %s, %s: %w", k.Service, s.name, err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(len(ss)-1)/2) * barWidth
		p.Add(b)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", s.name, s.probe.OK), b)
		legend = append(legend, fmt.Sprintf("%s %d of %d", s.name, s.probe.OK, s.probe.Sent))
	}
	if len(expected) > 0 {
		even := 1 / float64(len(expected))
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: even}, {X: float64(len(cats)) - 0.5, Y: even}})
		if err != nil {
			return nil, err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Width = vg.Points(1)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("even share 1/%d", len(expected)), l)
	}
	labels := make([]string, len(cats))
	for j, c := range cats {
		labels[j] = shortEndpoint(c, len(extra) == 0 && samePort(cats))
		if !containsString(expected, c) {
			labels[j] += " (stray)"
		}
	}
	p.NominalX(labels...)
	if len(cats) > 12 || len(extra) > 0 || !samePort(cats) {
		p.X.Tick.Label.Rotation = math.Pi / 4
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	// Room above the bars for the legend.
	p.Y.Min, p.Y.Max = 0, p.Y.Max*(1.25+0.1*float64(len(ss)))
	svg, err := renderSVG(p, 5*vg.Inch, 3.4*vg.Inch)
	if err != nil {
		return nil, err
	}
	return &Chart{
		Title: "Per-endpoint shares: " + k.Service + " " + k.Port,
		Caption: fmt.Sprintf("Replies per endpoint as a share of the successful connections (%s), from real connections "+
			"from a fake client pod through the node's kernel to the Service's ClusterIP (step %q). The dashed line is "+
			"the even share each of the %d endpoints would get if traffic were spread uniformly; with n replies a share "+
			"varies by about sqrt(share*(1-share)/n) by chance alone. Labels are the endpoints' last address octet%s.",
			strings.Join(legend, ", "), ss[0].probe.Step, len(expected), portNote(cats)),
		SVG:   svg,
		Small: true,
	}, nil
}

// shortEndpoint turns 10.244.11.140:8080 into .140:8080, or .140
// without the port.
func shortEndpoint(ep string, noPort bool) string {
	host, port := splitEndpoint(ep)
	if noPort {
		port = ""
	}
	if i := strings.LastIndex(host, "."); i >= 0 {
		return host[i:] + port
	}
	return ep
}

// splitEndpoint splits address:port (IPv4 only; an IPv6 endpoint stays
// whole).
func splitEndpoint(ep string) (host, port string) {
	if i := strings.LastIndex(ep, ":"); i >= 0 && !strings.Contains(ep[:i], ":") {
		return ep[:i], ep[i:]
	}
	return ep, ""
}

func portNote(eps []string) string {
	if samePort(eps) {
		_, port := splitEndpoint(eps[0])
		return " (all on port " + strings.TrimPrefix(port, ":") + ")"
	}
	return " and port"
}

func samePort(eps []string) bool {
	for _, ep := range eps {
		_, port := splitEndpoint(ep)
		if _, first := splitEndpoint(eps[0]); port == "" || port != first {
			return false
		}
	}
	return true
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// renderSVG draws p and returns the SVG element alone, for inlining.
func renderSVG(p *plot.Plot, w, h vg.Length) ([]byte, error) {
	// Liberation Sans has the metrics of Arial and Helvetica, which the
	// page's stylesheet names as fallbacks: text laid out here keeps its
	// width in a browser that lacks the Liberation fonts.
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("rendering chart %q: %w", p.Title.Text, err)
	}
	out := buf.Bytes()
	if i := bytes.Index(out, []byte("<svg")); i >= 0 {
		out = out[i:]
	}
	return out, nil
}

// logTicks marks a log axis at 1, 2 and 5 of every decade, labelled by
// label (unlabelled minor ticks at the others).
type logTicks struct{ label func(float64) string }

// durationLogTicks marks a log axis of seconds, labelled as durations.
var durationLogTicks = logTicks{label: seconds}

func (l logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= 0 || hi < lo {
		return nil
	}
	var ticks []plot.Tick
	labelled := 0
	for d := math.Floor(math.Log10(lo)); d <= math.Ceil(math.Log10(hi)); d++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, d)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = l.label(v)
				labelled++
			}
			ticks = append(ticks, t)
		}
	}
	if labelled < 2 {
		// A narrow range: label every tick, or the bounds when no tick
		// falls inside.
		for i := range ticks {
			ticks[i].Label = l.label(ticks[i].Value)
		}
		if len(ticks) < 2 {
			ticks = []plot.Tick{{Value: lo, Label: l.label(lo)}, {Value: hi, Label: l.label(hi)}}
		}
	}
	return ticks
}
