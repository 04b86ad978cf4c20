package reports

import (
	"bufio"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// WriteHTML writes a run's report as one self-contained HTML page: the
// Markdown report's facts and tables, and the charts as inline SVG. It
// loads nothing: no scripts, stylesheets, fonts or images from elsewhere,
// so it can be archived as a CI artifact and opened offline.
func WriteHTML(w io.Writer, r *Result) error {
	charts, err := Charts(r)
	if err != nil {
		return err
	}
	data := htmlData{
		Title:  fmt.Sprintf("kpsim run %s: %s", r.RunID, r.Scenario.Name),
		Facts:  reportFacts(r),
		Note:   comparabilityNote,
		Tables: reportTables(r),
		Method: notesFor(r),
	}
	lead, err := glanceChart(r)
	if err != nil {
		return err
	}
	if lead != nil {
		data.LeadChart = &htmlChart{Title: lead.Title, Caption: lead.Caption, SVG: template.HTML(lead.SVG)}
	}
	for _, c := range charts {
		data.Charts = append(data.Charts, htmlChart{
			Title:   c.Title,
			Caption: c.Caption,
			// The SVG is drawn by vgsvg from our own plot, which escapes
			// every text it draws.
			SVG:   template.HTML(c.SVG),
			Small: c.Small,
		})
	}
	bw := bufio.NewWriter(w)
	if err := htmlTemplate.Execute(bw, data); err != nil {
		return fmt.Errorf("rendering html report: %w", err)
	}
	return bw.Flush()
}

type htmlData struct {
	// LeadChart goes beside the first table (At a glance).
	LeadChart *htmlChart
	Title     string
	Facts     []fact
	Note      string
	Tables    []reportTable
	Charts    []htmlChart
	Method    []methodNote
}

type htmlChart struct {
	Title, Caption string
	SVG            template.HTML
	Small          bool
}

var htmlTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"firstLine": firstLine,
	"restLines": func(s string) string {
		_, rest, _ := strings.Cut(s, "\n")
		return rest
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 75em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.facts dt { font-weight: bold; }
dl.facts dd { margin: 0; font-family: ui-monospace, monospace; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; overflow-wrap: anywhere; }
td { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
/* The page fits a 1400-pixel window: long cells wrap instead of widening it. */
.lead { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.lead table { flex: 0 1 auto; }
.lead figure.chart.small { flex: 1 1 24em; margin: 0; }
details { margin: 1em 0; }
summary { cursor: pointer; font-weight: bold; }
tbody tr:nth-child(even) { background: #fafafa; }
.note { color: #555; }
figure { margin: 1.5em 0; }
figure svg { max-width: 100%; height: auto; }
/* The charts are laid out with Liberation Sans metrics; Arimo, Arial and Helvetica share them. */
figure svg text { font-family: "Liberation Sans", Arimo, Arial, Helvetica, sans-serif !important; }
figcaption { max-width: 50em; color: #444; font-size: 0.9em; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
figure.chart { flex: 1 1 100%; }
figure.chart.small { flex: 1 1 26em; max-width: 36em; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<dl class="facts">
{{range .Facts}}<dt>{{.Name}}</dt><dd>{{.Value}}</dd>
{{end}}</dl>
<p class="note">{{.Note}}</p>
{{range $i, $t := .Tables}}{{with $t}}
{{if .Folded}}<details><summary>{{.Title}}</summary>{{else}}<h2>{{.Title}}</h2>{{end}}
{{with .Lead}}<p>{{.}}</p>
{{end}}{{if and (eq $i 0) $.LeadChart}}<div class="lead">{{end}}<table>
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
{{if and (eq $i 0) $.LeadChart}}<figure class="chart small">
{{$.LeadChart.SVG}}
<figcaption>{{$.LeadChart.Caption}}</figcaption>
</figure></div>{{end}}
{{range .Notes}}<p class="note">{{firstLine .}}</p>{{with restLines .}}<pre>{{.}}</pre>{{end}}
{{end}}{{if .Folded}}</details>{{end}}{{end}}{{end}}
{{if .Charts}}<h2>Charts</h2>
<div class="charts">
{{range .Charts}}<figure class="chart{{if .Small}} small{{end}}">
{{.SVG}}
<figcaption><strong>{{.Title}}.</strong> {{.Caption}}</figcaption>
</figure>
{{end}}</div>
{{end}}
<h2>How these numbers were obtained</h2>
<ul>
{{range .Method}}<li><strong>{{.What}}</strong>: {{.How}}</li>
{{end}}</ul>
</body>
</html>
`))
