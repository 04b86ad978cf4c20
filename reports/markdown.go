package reports

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// WriteMarkdown writes a run's report as GitHub-flavoured Markdown: the
// environment, the per-mode tables, the rule counts, the expectations and
// how every figure was obtained.
func WriteMarkdown(w io.Writer, r *Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# kpsim run %s: %s\n\n", mdEscape(r.RunID), mdEscape(r.Scenario.Name))
	for _, f := range reportFacts(r) {
		fmt.Fprintf(bw, "- **%s**: %s\n", f.Name, mdEscape(f.Value))
	}
	fmt.Fprintf(bw, "\n%s\n", comparabilityNote)
	writeMarkdownTables(bw, reportTables(r))
	writeMarkdownMethod(bw, r)
	return bw.Flush()
}

// writeMarkdownTables writes each table under a heading, with its lead
// and notes.
func writeMarkdownTables(bw io.Writer, tables []reportTable) {
	for _, t := range tables {
		if t.Folded {
			fmt.Fprintf(bw, "\n<details><summary>%s</summary>\n\n", mdEscape(t.Title))
		} else {
			fmt.Fprintf(bw, "\n## %s\n\n", t.Title)
		}
		if t.Lead != "" {
			fmt.Fprintf(bw, "%s\n\n", mdEscape(t.Lead))
		}
		writeMarkdownTable(bw, t.Header, t.Rows)
		for _, n := range t.Notes {
			head, rest, multi := strings.Cut(n, "\n")
			fmt.Fprintf(bw, "\n%s\n", mdEscape(head))
			if multi {
				fmt.Fprintf(bw, "\n```\n%s\n```\n", strings.TrimRight(rest, "\n"))
			}
		}
		if t.Folded {
			fmt.Fprint(bw, "\n</details>\n")
		}
	}
}

// WriteVariants writes a comparison of variants (kpsim compare RUN): as
// terminal tables, or Markdown.
func WriteVariants(w io.Writer, r *Result, markdown bool) error {
	tables := variantTables(r)
	if tables == nil {
		return fmt.Errorf("run %s compared no variants: kpsim compare needs two runs, or one run with variants", r.RunID)
	}
	if !markdown {
		return writeTables(w, tables)
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# kpsim run %s: %s, variants\n", mdEscape(r.RunID), mdEscape(r.Scenario.Name))
	writeMarkdownTables(bw, tables)
	return bw.Flush()
}

func writeMarkdownMethod(w io.Writer, r *Result) {
	fmt.Fprint(w, "\n## How these numbers were obtained\n\n")
	for _, n := range notesFor(r) {
		fmt.Fprintf(w, "- **%s**: %s\n", n.What, n.How)
	}
}

// writeMarkdownTable writes a pipe table with padded columns, so the
// source reads as well as the rendering.
func writeMarkdownTable(w io.Writer, header []string, rows [][]string) {
	cells := make([][]string, 0, len(rows)+1)
	cells = append(cells, header)
	cells = append(cells, rows...)
	width := make([]int, len(header))
	for _, row := range cells {
		for i := range header {
			if i < len(row) {
				width[i] = max(width[i], 3, utf8.RuneCountInString(mdCell(row[i])))
			}
		}
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString("|")
		for i := range header {
			c := ""
			if i < len(row) {
				c = mdCell(row[i])
			}
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + " |")
		}
		fmt.Fprintln(w, b.String())
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, row := range rows {
		line(row)
	}
}

// mdCell makes text safe inside a table cell: one line, no bare pipes.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return mdEscape(s)
}

// mdEscape keeps characters of measured text (mode names, errors) from
// being read as Markdown table syntax or HTML.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
