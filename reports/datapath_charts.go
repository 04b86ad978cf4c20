package reports

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// dataPathCharts draw a sweep's data-path curves against Services (log
// x, linear y from 0): the rate ratio service/direct of every mode on one
// chart (a ratio within one node, so host and VM modes share it, the VM's
// marked), and the kernel CPU per connection through the Service (solid)
// and direct (dashed), host and VM apart. None without data-path points.
func dataPathCharts(r *Result) ([]Chart, error) {
	sw := r.Sweep
	if sw == nil {
		return nil, nil
	}
	var charts []Chart
	c, err := dataPathChart(sw, "", "connection rate through the Service / direct", []dataPathLine{
		{label: "per CPU-second", value: func(f *DataPathFigures) float64 { return f.CPURateRatio }},
		{label: "wall clock", dashed: true, value: func(f *DataPathFigures) float64 { return f.RateRatio }},
	}, 1)
	if err != nil {
		return nil, err
	}
	if c != nil {
		c.Title = "Data path: connection rate through the Service / direct, vs Services"
		c.Caption = "Each mode's new-connection rate through sampled Services' ClusterIPs divided by the rate straight to their endpoints' " +
			"pod IPs, in the same node and step, alternated in rounds, the dataplane pinned to one CPU (a closed loop keeps it busy): " +
			"below 1, a connection through the Service costs more. Solid: per second of the dataplane's own CPU time (what each kind " +
			"would reach on a CPU of its own); dashed: per wall-clock second, which other work on the machine disturbs. In iptables mode " +
			"the direct connections walk all of KUBE-SERVICES too. Group " + sw.Group + "; modes in a VM are marked [VM]."
		charts = append(charts, *c)
	}
	for _, kernel := range []string{"host", "vm"} {
		c, err := dataPathChart(sw, kernel, "kernel CPU per connection (µs)", []dataPathLine{
			{label: "via Service", value: func(f *DataPathFigures) float64 { return f.ServiceOwnKernelMicros }},
			{label: "direct", dashed: true, value: func(f *DataPathFigures) float64 { return f.DirectOwnKernelMicros }},
		}, 0)
		if err != nil {
			return nil, err
		}
		if c == nil {
			continue
		}
		c.Title = "Data path: kernel CPU per new connection vs Services, " + kernel
		c.Caption = "The dataplane process's kernel time per connection (its getrusage system time on the pinned CPU: both ends' " +
			"kernel work and the node's rules, softirqs included, never another process's), through the Service (solid) and straight " +
			"to the pod (dashed), at each size of group " + sw.Group + ". Where the dataplane had the CPU alone it agrees with the " +
			"CPU's system + irq + softirq time in /proc/stat (both in the table). A line that rises with Services is a " +
			"per-connection cost that grows with them."
		if kernel == "vm" {
			c.Title = "Data path: kernel CPU per new connection vs Services, in a VM"
			c.Caption = "VM timings (software emulation when the accelerator is tcg): comparable only with each other. " + c.Caption
		}
		charts = append(charts, *c)
	}
	return charts, nil
}

// dataPathLine is one line per mode of a data-path chart.
type dataPathLine struct {
	label  string
	dashed bool
	value  func(*DataPathFigures) float64
}

// dataPathChart draws lines for the modes that ran on kernel ("" for
// all), with a horizontal reference at ref when ref > 0.
func dataPathChart(sw *SweepResult, kernel, yLabel string, lines []dataPathLine, ref float64) (*Chart, error) {
	p := plot.New()
	p.X.Label.Text = "Services (log scale)"
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = countLogTicks, linearTicks{}
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = vg.Points(8)
	xlo, xhi, yhi := math.Inf(1), math.Inf(-1), 0.0
	drawn := 0
	for i := range sw.Modes {
		sm := &sw.Modes[i]
		if kernel != "" && sm.Kernel != kernel {
			continue
		}
		for _, ln := range lines {
			var pts plotter.XYs
			for _, pt := range sm.Points {
				if pt.DataPath == nil || pt.Error != "" || pt.Services <= 0 {
					continue
				}
				y := ln.value(pt.DataPath)
				if math.IsNaN(y) || math.IsInf(y, 0) {
					continue
				}
				pts = append(pts, plotter.XY{X: float64(pt.Services), Y: y})
				xlo, xhi, yhi = math.Min(xlo, float64(pt.Services)), math.Max(xhi, float64(pt.Services)), math.Max(yhi, y)
			}
			if len(pts) == 0 {
				continue
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, fmt.Errorf("data path chart, %s: %w", sm.Name, err)
			}
			l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
			l.Width = vg.Points(1.5)
			if ln.dashed {
				l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			}
			sc.Shape = plotutil.Shape(i)
			p.Add(l, sc)
			name := sm.Name
			if ln.label != "" {
				name += " " + ln.label
			}
			if kernel == "" && sm.Kernel == "vm" {
				name += " [VM]"
			}
			p.Legend.Add(name, l, sc)
			drawn++
		}
	}
	if drawn == 0 {
		return nil, nil
	}
	if ref > 0 {
		rl, err := plotter.NewLine(plotter.XYs{{X: xlo / 1.5, Y: ref}, {X: xhi * 1.5, Y: ref}})
		if err != nil {
			return nil, err
		}
		rl.Color = plotutil.Color(7)
		rl.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		rl.Width = vg.Points(0.75)
		p.Add(rl)
		yhi = math.Max(yhi, ref)
	}
	p.X.Min, p.X.Max = xlo/1.5, xhi*1.5
	p.Y.Min, p.Y.Max = 0, yhi*1.25
	if yhi <= 0 {
		p.Y.Max = 1
	}
	p.Add(plotter.NewGrid())
	p.Legend.ThumbnailWidth = vg.Points(24)
	svg, err := renderSVG(p, 7*vg.Inch, 4.5*vg.Inch)
	if err != nil {
		return nil, err
	}
	return &Chart{SVG: svg, Small: true}, nil
}

// linearTicks labels a linear axis at 1, 2 or 5 times a power of ten,
// about five labels over the range.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: fmt.Sprintf("%g", lo)}}
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%g", math.Round(v/step)*step)})
	}
	return ticks
}
