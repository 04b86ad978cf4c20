package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/scenarios"
)

func newValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate SCENARIO...",
		Short: "Check scenario files without running anything",
		Long: `validate decodes each scenario file strictly, applies its defaults and
checks it, and prints every problem with file:line and field path. It exits 2
if any file is invalid. Nothing is created.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return validateFiles(cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
		},
	}
}

func validateFiles(stdout, stderr io.Writer, files []string) error {
	bad := 0
	for _, f := range files {
		s, err := scenarios.LoadFile(f)
		if err != nil {
			bad++
			fmt.Fprintln(stderr, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok: %s\n", f, summarize(s))
	}
	if bad > 0 {
		return badInput(fmt.Errorf("%d of %d scenario files invalid", bad, len(files)))
	}
	return nil
}

// summarize says in one line what a scenario will create and run.
func summarize(s *scenarios.Scenario) string {
	c := s.Counts()
	modes := make([]string, len(s.Spec.Modes))
	for i, m := range s.Spec.Modes {
		modes[i] = m.Name
	}
	return fmt.Sprintf("%s: %d services, %d endpoints (up to %d), %d steps, modes %v, seed %d",
		s.Metadata.Name, c.Start.Services, c.Start.Endpoints, c.Peak.Endpoints, len(s.Spec.Steps), modes, s.Spec.Seed)
}
