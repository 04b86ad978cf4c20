package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/reports"
)

// reportFormats are what kpsim report can write, and the file each goes
// to ("" for standard output).
var reportFormats = []struct{ name, file string }{
	{"summary", ""},
	{"markdown", "report.md"},
	{"html", "report.html"},
	{"perfdata", "perfdata.json"},
}

type reportOptions struct {
	formats  []string
	perfdata bool
}

func newReportCommand() *cobra.Command {
	o := reportOptions{}
	cmd := &cobra.Command{
		Use:   "report DIR...",
		Short: "Render saved runs as a summary, Markdown, HTML and PerfData",
		Long: `report reads DIR/result.json, written by kpsim run, and writes beside it
report.md (Markdown tables), report.html (one self-contained page with SVG
charts and the same tables) and, with --perfdata, perfdata.json
(ClusterLoader2's PerfData format, for perfdash). It prints the terminal
summary. A DIR may also name a result.json file directly.

It exits 2 when a result.json is missing or invalid.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, o)
		},
	}
	names := make([]string, len(reportFormats))
	for i, f := range reportFormats {
		names[i] = f.name
	}
	cmd.Flags().StringSliceVar(&o.formats, "format", []string{"summary", "markdown", "html"},
		"what to write, comma-separated: "+strings.Join(names, ", "))
	cmd.Flags().BoolVar(&o.perfdata, "perfdata", false, "also write DIR/perfdata.json (same as adding perfdata to --format)")
	return cmd
}

func runReport(stdout, stderr io.Writer, args []string, o reportOptions) error {
	want := map[string]bool{}
	for _, f := range o.formats {
		f = strings.TrimSpace(f)
		if !slices.ContainsFunc(reportFormats, func(rf struct{ name, file string }) bool { return rf.name == f }) {
			return badInput(fmt.Errorf("--format %q: want one or more of summary, markdown, html, perfdata", f))
		}
		want[f] = true
	}
	if o.perfdata {
		want["perfdata"] = true
	}
	var failed []error
	for _, arg := range args {
		if err := reportOne(stdout, arg, want); err != nil {
			if len(args) > 1 {
				// main prints only the error returned; with several
				// runs, say what went wrong with each.
				fmt.Fprintln(stderr, "kpsim:", err)
			}
			failed = append(failed, err)
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case len(args) == 1:
		return failed[0]
	}
	var ee *exitError
	code := exitBadInput
	for _, err := range failed {
		if errors.As(err, &ee) && ee.code == exitEnvironment {
			code = exitEnvironment
		}
	}
	return &exitError{code, fmt.Errorf("%d of %d runs could not be reported", len(failed), len(args))}
}

// resultPath turns a run directory (or a result.json) into the result
// file and the directory reports go to.
func resultPath(arg string) (file, dir string) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return arg, filepath.Dir(arg)
	}
	return filepath.Join(arg, "result.json"), arg
}

// readResult reads a run's result.json; anything wrong with it is bad
// input.
func readResult(arg string) (*reports.Result, string, error) {
	file, dir := resultPath(arg)
	r, err := reports.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", badInput(fmt.Errorf("%s: no result.json (is it a directory kpsim run wrote?): %w", arg, err))
		}
		return nil, "", badInput(err)
	}
	return r, dir, nil
}

func reportOne(stdout io.Writer, arg string, want map[string]bool) error {
	r, dir, err := readResult(arg)
	if err != nil {
		return err
	}
	for _, f := range reportFormats {
		if !want[f.name] {
			continue
		}
		// Render in memory first: a failed rendering leaves no half file.
		var buf bytes.Buffer
		switch f.name {
		case "summary":
			err = reports.WriteSummary(&buf, r)
		case "markdown":
			err = reports.WriteMarkdown(&buf, r)
		case "html":
			err = reports.WriteHTML(&buf, r)
		case "perfdata":
			err = reports.WritePerfData(&buf, r)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", dir, f.name, err)
		}
		if f.file == "" {
			if _, err := buf.WriteTo(stdout); err != nil {
				return err
			}
			continue
		}
		path := filepath.Join(dir, f.file)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return environment(fmt.Errorf("writing %s: %w", path, err))
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	}
	return nil
}
