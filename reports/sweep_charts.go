package reports

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// sweepCharts draws a sweep's curves on log-log axes, one line per mode
// entry with its fitted exponent in the legend: first sync against
// Services, host and VM on separate charts (a VM timing is not a host
// timing), and the headline rule count against Services.
func sweepCharts(r *Result) ([]Chart, error) {
	sw := r.Sweep
	if sw == nil {
		return nil, nil
	}
	var charts []Chart
	for _, kernel := range []string{"host", "vm"} {
		c, err := sweepChart(sw, sweepSeries{
			kernel: kernel,
			metric: func(*SweepMode) string { return SweepFirstSync },
			value:  func(p SweepPoint, _ string) float64 { return p.FirstSyncSeconds },
			yLabel: "first sync (log scale)",
			yTicks: durationLogTicks,
		})
		if err != nil || c == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		c.Title = "First sync vs Services, " + kernel
		c.Caption = "Each mode's first full sync at each size of group " + sw.Group + " (kube-proxy's own sync duration histogram), " +
			"on log-log axes: a line's slope is the growth exponent, fitted by " + sw.FitMethod
		if kernel == "vm" {
			c.Title = "First sync vs Services, in a VM"
			c.Caption = "VM timings, measured in a qemu guest (software emulation when the accelerator is tcg): comparable only with each other, " +
				"so drawn apart from the host's. " + c.Caption
		}
		charts = append(charts, *c)
	}
	c, err := sweepChart(sw, sweepSeries{
		metric: func(sm *SweepMode) string { return SweepRulesPrefix + sm.HeadlineRuleKind() },
		value: func(p SweepPoint, metric string) float64 {
			return float64(p.Rules[strings.TrimPrefix(metric, SweepRulesPrefix)])
		},
		label:  func(sm *SweepMode) string { return sm.HeadlineRuleKind() },
		yLabel: "rules after the first sync (log scale)",
		yTicks: countLogTicks,
	})
	if err != nil {
		return nil, err
	}
	if c != nil {
		c.Title = "Rules vs Services"
		c.Caption = "Each mode's headline dataplane count right after its first sync (iptables nat rules, nftables rules, IPVS real servers), " +
			"counted from the saved dumps, at each size of group " + sw.Group + ", log-log axes. Slopes fitted by " + sw.FitMethod
		for _, sm := range sw.Modes {
			if sm.Kernel == "vm" {
				c.Caption += " Counts do not depend on where the node ran, so modes that ran in a VM (marked [VM]) share these axes."
				break
			}
		}
		charts = append(charts, *c)
	}
	return charts, nil
}

// sweepSeries selects what one sweep chart draws.
type sweepSeries struct {
	// kernel, when set, keeps only the modes that ran there.
	kernel string
	metric func(*SweepMode) string
	value  func(SweepPoint, string) float64
	// label, when set, adds to a mode's legend entry.
	label  func(*SweepMode) string
	yLabel string
	yTicks plot.Ticker
}

func sweepChart(sw *SweepResult, s sweepSeries) (*Chart, error) {
	p := plot.New()
	p.X.Label.Text = "Services (log scale)"
	p.Y.Label.Text = s.yLabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = countLogTicks, s.yTicks
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(8)
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	lines := 0
	for i := range sw.Modes {
		sm := &sw.Modes[i]
		if s.kernel != "" && sm.Kernel != s.kernel {
			continue
		}
		metric := s.metric(sm)
		var pts plotter.XYs
		for _, pt := range sm.Points {
			if y := s.value(pt, metric); pt.Error == "" && y > 0 && pt.Services > 0 {
				pts = append(pts, plotter.XY{X: float64(pt.Services), Y: y})
				xlo, xhi = math.Min(xlo, float64(pt.Services)), math.Max(xhi, float64(pt.Services))
				ylo, yhi = math.Min(ylo, y), math.Max(yhi, y)
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("sweep chart, %s: %w", sm.Name, err)
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		name := sm.Name
		if s.label != nil {
			name += " " + s.label(sm)
		}
		if s.kernel == "" && sm.Kernel == "vm" {
			name += " [VM]"
		}
		if f := sm.Fit(metric); f != nil && f.Points >= 2 {
			name += fmt.Sprintf(": slope %.2f (R² %.3f, n=%d)", f.Exponent, f.RSquared, f.Points)
		} else {
			name += ": one point, no slope"
		}
		p.Legend.Add(name, l, sc)
		lines++
	}
	if lines == 0 {
		return nil, nil
	}
	// Explicit positive ranges: a single size would otherwise widen to
	// ±1 around it, past 0 on a log axis.
	p.X.Min, p.X.Max = xlo/1.5, xhi*1.5
	p.Y.Min, p.Y.Max = ylo/1.5, yhi*3 // room for the legend above the lines
	p.Add(plotter.NewGrid())
	svg, err := renderSVG(p, 7*vg.Inch, 4.5*vg.Inch)
	if err != nil {
		return nil, err
	}
	return &Chart{SVG: svg, Small: true}, nil
}

// countLogTicks marks a log axis of counts, labelled 500, 2k, 10k.
var countLogTicks = logTicks{label: shortCount}

// shortCount writes 1500 as 1.5k and 2000000 as 2M.
func shortCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case v >= 1e3:
		return fmt.Sprintf("%gk", math.Round(v/1e2)/10)
	}
	return fmt.Sprintf("%g", math.Round(v*10)/10)
}
