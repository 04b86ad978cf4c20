package reports

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// glanceChart draws the glance table's timings: per mode, in the table's
// order from the top, the first sync and the partial-sync p50 on one log
// axis (they differ by orders of magnitude). Nil when no mode synced.
func glanceChart(r *Result) (*Chart, error) {
	ms := byModeRank(r)
	type dot struct {
		y     float64
		first float64
		p50   float64
	}
	var dots []dot
	labels := make([]string, len(ms))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, m := range ms {
		y := float64(len(ms) - 1 - i) // first mode at the top
		labels[len(ms)-1-i] = glanceLabel(m)
		d := dot{y: y}
		if f := m.ColdFirstSync(); f != nil && f.Seconds > 0 {
			d.first = f.Seconds
		}
		f := false
		d.p50 = Summarize(positiveFinite(m.SyncSeconds(&f))).P50
		for _, v := range []float64{d.first, d.p50} {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		dots = append(dots, d)
	}
	if math.IsInf(lo, 1) {
		return nil, nil
	}
	p := plot.New()
	p.X.Label.Text = "seconds (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = durationLogTicks
	// Room on the right for the legend.
	p.X.Min, p.X.Max = lo/2, hi*8
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.6, float64(len(ms))-0.4
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for k, series := range []struct {
		name string
		get  func(dot) float64
	}{{"first sync", func(d dot) float64 { return d.first }}, {"partial sync p50", func(d dot) float64 { return d.p50 }}} {
		var pts plotter.XYs
		for _, d := range dots {
			if v := series.get(d); v > 0 {
				pts = append(pts, plotter.XY{X: v, Y: d.y})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("glance chart: %w", err)
		}
		sc.Color = plotutil.Color(k)
		sc.Shape = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}}[k]
		sc.Radius = vg.Points(4)
		p.Add(sc)
		p.Legend.Add(series.name, sc)
	}
	svg, err := renderSVG(p, 6*vg.Inch, vg.Length(1.2+0.35*float64(len(ms)))*vg.Inch)
	if err != nil {
		return nil, err
	}
	return &Chart{Title: "At a glance", Caption: "Each mode's first sync (circle) and partial-sync p50 (triangle), kube-proxy's own durations, on a log axis; the table gives the figures.", SVG: svg}, nil
}
