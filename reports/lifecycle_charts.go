package reports

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// markMeanings say what each of a watch's marks is, for the captions.
var markMeanings = map[string]string{
	"stop":       "stop (kube-proxy stopped)",
	"start":      "start (the new process started)",
	"first sync": "first sync (its first sync ended)",
	"programmed": "programmed (the first sync that covered every API change ended)",
	"tamper":     "tamper (the rules were changed)",
	"repaired":   "repaired (kube-proxy had put them back)",
	"cleanup":    "cleanup (kube-proxy --cleanup started)",
	"cleaned":    "cleaned (it ended)",
}

// lifecycleCharts draw, per lifecycle step with a watch, the share of its
// connections answered over time, with the step's moments marked.
func lifecycleCharts(r *Result) ([]Chart, error) {
	var charts []Chart
	for _, m := range measured(r) {
		for i := range m.Lifecycle {
			c, err := lifecycleChart(m, &m.Lifecycle[i])
			if err != nil {
				return nil, err
			}
			if c != nil {
				charts = append(charts, *c)
			}
		}
	}
	return charts, nil
}

func lifecycleChart(m *ModeResult, lc *Lifecycle) (*Chart, error) {
	w := lc.Watch
	if w == nil || w.BucketSeconds <= 0 {
		return nil, nil
	}
	ok, answered := shareSegments(w)
	if len(ok) == 0 {
		return nil, nil
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s", m.Name, stepLabel(lc))
	p.X.Label.Text = "seconds from the watch's start"
	p.X.Tick.Marker = secondTicks{}
	p.Y.Label.Text = "connections answered"
	p.Y.Tick.Marker = shareTicks{}
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = vg.Points(8)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	xMax := math.Max(float64(len(w.Buckets))*w.BucketSeconds, w.End.Sub(w.Start).Seconds())
	for _, s := range []struct {
		segs   []plotter.XYs
		name   string
		color  int
		dashes []vg.Length
	}{
		// Drawn first, so ok lies on top where the two are equal.
		{answered, "ok + stale (any endpoint)", 1, []vg.Length{vg.Points(4), vg.Points(2)}},
		{ok, "ok (an endpoint the API holds)", 0, nil},
	} {
		for i, seg := range s.segs {
			l, sc, err := plotter.NewLinePoints(seg)
			if err != nil {
				return nil, fmt.Errorf("lifecycle chart %s %s: %w", m.Name, lc.Step, err)
			}
			l.Color, sc.Color = plotutil.Color(s.color), plotutil.Color(s.color)
			l.Width = vg.Points(1.5)
			l.Dashes = s.dashes
			sc.Shape = draw.CircleGlyph{}
			sc.Radius = vg.Points(1.5)
			p.Add(l, sc)
			if i == 0 {
				p.Legend.Add(s.name, l, sc)
			}
		}
	}

	top, err := addMarks(p, w.Marks, xMax, 5*vg.Inch)
	if err != nil {
		return nil, fmt.Errorf("lifecycle chart %s %s: %w", m.Name, lc.Step, err)
	}
	p.X.Min, p.X.Max = 0, xMax
	p.Y.Min, p.Y.Max = 0, top
	p.Add(plotter.NewGrid())
	svg, err := renderSVG(p, 5*vg.Inch, 3.4*vg.Inch)
	if err != nil {
		return nil, err
	}

	var marks []string
	seen := map[string]bool{}
	for _, mk := range w.Marks {
		if !seen[mk.Name] {
			seen[mk.Name] = true
			if s, ok := markMeanings[mk.Name]; ok {
				marks = append(marks, s)
			} else {
				marks = append(marks, mk.Name)
			}
		}
	}
	caption := fmt.Sprintf("Step %s (%s, %s): the share of its probe connections answered, per %s of send time: one connection "+
		"at a time, %g/s, from the client pod to %d sampled Services' ClusterIPs, judged against the API at send time "+
		"(ok: an endpoint the API held; ok + stale also counts endpoints it no longer held; failed: no answer within 1 s). "+
		"Buckets without a connection are left out (gaps). In all %d sent, %d ok, %d stale, %d failed.",
		lc.Step, lc.Action, lc.Mode, seconds(w.BucketSeconds), w.Rate, len(w.Services), w.Sent, w.OK, w.Stale, w.Failed)
	if len(marks) > 0 {
		caption += " Vertical lines mark " + strings.Join(marks, ", ") + ", by kpsim's wall clock"
		switch {
		case seen["first sync"] || seen["programmed"]:
			caption += "; sync ends are bounded by 5 ms polling"
		case seen["repaired"]:
			caption += "; repaired is the first poll of the rules that saw them back, an upper bound"
		}
		caption += "."
	}
	return &Chart{
		Title:   fmt.Sprintf("Lifecycle %s: %s", m.Name, lc.Step),
		Caption: caption,
		SVG:     svg,
		Small:   true,
	}, nil
}

// shareSegments are a watch's shares answered per bucket, at the bucket's
// middle: ok, and ok + stale. They come in one segment per run of buckets
// that sent something: a bucket without a connection has no share, and
// is a gap, not 0%.
func shareSegments(w *Watch) (ok, answered []plotter.XYs) {
	gap := true
	for i, b := range w.Buckets {
		if b.Sent == 0 {
			gap = true
			continue
		}
		if gap {
			ok, answered = append(ok, nil), append(answered, nil)
			gap = false
		}
		x := (float64(i) + 0.5) * w.BucketSeconds
		n := float64(b.Sent)
		ok[len(ok)-1] = append(ok[len(ok)-1], plotter.XY{X: x, Y: float64(b.OK) / n})
		answered[len(answered)-1] = append(answered[len(answered)-1], plotter.XY{X: x, Y: float64(b.OK+b.Stale) / n})
	}
	return ok, answered
}

// addMarks draws a vertical line per mark, labelled above the shares
// (y 0-1); labels too close for one row go to rows above. It returns the
// y axis's top, with room for the labels.
func addMarks(p *plot.Plot, marks []WatchMark, xMax float64, width vg.Length) (float64, error) {
	const rowHeight, base = 0.09, 1.07
	if len(marks) == 0 {
		return 1.05, nil
	}
	sorted := slices.Clone(marks)
	slices.SortStableFunc(sorted, func(a, b WatchMark) int {
		switch {
		case a.Seconds < b.Seconds:
			return -1
		case a.Seconds > b.Seconds:
			return 1
		}
		return 0
	})
	style := text.Style{Color: color.Gray{Y: 0x40}, Font: p.X.Tick.Label.Font, Handler: plot.DefaultTextHandler,
		XAlign: text.XLeft, YAlign: text.YCenter}
	style.Font.Size = vg.Points(8)
	style.Font.Variant = "Sans"
	// Data units per point: the plot's width less the y axis, roughly.
	perPoint := xMax / float64(width-vg.Points(60))
	var rowEnds []float64 // the x where each row's last label ends
	labels := plotter.XYLabels{}
	for _, mk := range sorted {
		x := math.Min(math.Max(mk.Seconds, 0), xMax)
		row := 0
		for row < len(rowEnds) && x < rowEnds[row] {
			row++
		}
		end := x + perPoint*float64(style.Width(mk.Name)+vg.Points(14))
		if row == len(rowEnds) {
			rowEnds = append(rowEnds, end)
		} else {
			rowEnds[row] = end
		}
		y := base + rowHeight*float64(row)
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: y}})
		if err != nil {
			return 0, err
		}
		l.Color = color.Gray{Y: 0x80}
		l.Width = vg.Points(0.75)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: y})
		labels.Labels = append(labels.Labels, mk.Name)
	}
	ls, err := plotter.NewLabels(labels)
	if err != nil {
		return 0, err
	}
	for i := range ls.TextStyle {
		ls.TextStyle[i] = style
	}
	ls.Offset = vg.Point{X: vg.Points(2)}
	p.Add(ls)
	return base + rowHeight*(float64(len(rowEnds))-0.5), nil
}

// shareTicks marks a 0-1 axis at every quarter as percentages, and
// nothing above 1 (the marks' labels are there).
type shareTicks struct{}

func (shareTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for v := 0.0; v <= 1; v += 0.25 {
		if v >= lo && v <= hi {
			ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f%%", 100*v)})
		}
	}
	return ticks
}

// secondTicks marks a linear axis of seconds at a round step that gives
// at most 8 labelled ticks.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return nil
	}
	step := 0.5
	for _, s := range []float64{0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		step = s
		if (hi-lo)/s <= 8 {
			break
		}
	}
	for (hi-lo)/step > 8 {
		step *= 2
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}
