package reports

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// syncTimeChart stacks each mode's classes of syncs by part, as shares of
// the mean sync (the bar's label carries the mean itself): modes differ
// by orders of magnitude, and the question is where each one's time goes.
func syncTimeChart(r *Result) ([]Chart, error) {
	type bar struct {
		label string
		split SyncSplit
	}
	var bars []bar
	parts := map[string]float64{}
	for _, m := range measured(r) {
		for _, sp := range SyncSplits(m) {
			class, _, _ := strings.Cut(sp.Class, " ") // first, full, partial
			bars = append(bars, bar{fmt.Sprintf("%s %s %s", m.Name, class, seconds(sp.Mean)), sp})
			for p := range sp.Parts {
				parts[p] = 1
			}
		}
	}
	if len(bars) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.X.Label.Text = "share of the mean sync (label: mode, syncs, mean)"
	// The legend goes right of the bars, past 1.
	p.X.Min, p.X.Max = 0, 1.45
	p.X.Tick.Marker = shareTicks{}
	// Bars from the top in table order: the nominal axis counts upwards.
	labels := make([]string, len(bars))
	for i, b := range bars {
		labels[len(bars)-1-i] = b.label
	}
	p.NominalY(labels...)
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(4)
	width := vg.Points(14)
	var below *plotter.BarChart
	for _, part := range SortedParts(parts) {
		vals := make(plotter.Values, len(bars))
		for j, b := range bars {
			vals[len(bars)-1-j] = b.split.Share(part)
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("sync time chart, %s: %w", part, err)
		}
		bc.Horizontal = true
		bc.LineStyle.Width = 0
		bc.Color = partColor(part)
		if below != nil {
			bc.StackOn(below)
		}
		below = bc
		p.Add(bc)
		name := part
		if part == PartRest {
			name = "rest (kube-proxy's own work)"
		}
		p.Legend.Add(name, bc)
	}
	p.Y.Min, p.Y.Max = -0.5, float64(len(bars))-0.5
	// Tall enough for the bars and for the legend's lines.
	height := max(1.2+0.32*float64(len(bars)), 0.8+0.2*float64(len(parts)))
	svg, err := renderSVG(p, 9*vg.Inch, vg.Length(height)*vg.Inch)
	if err != nil {
		return nil, err
	}
	return []Chart{{
		Title:   "Where sync time goes",
		Caption: SyncTimeMethod,
		SVG:     svg,
	}}, nil
}

// partColors keep a part's colour the same in every chart; rest is grey.
var partColors = map[string]color.Color{
	"nft-list":         color.RGBA{0xd6, 0x27, 0x28, 0xff},
	"nft-transaction":  color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	"nft":              color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	"iptables-save":    color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	"iptables-restore": color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	"iptables":         color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	"ipset":            color.RGBA{0x94, 0x67, 0xbd, 0xff},
	"ipvs":             color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	PartRest:           color.RGBA{0xb0, 0xb0, 0xb0, 0xff},
}

func partColor(part string) color.Color {
	if c, ok := partColors[part]; ok {
		return c
	}
	return color.RGBA{0xe3, 0x77, 0xc2, 0xff}
}
