package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// These commands are part of kpsim's design but not of this build. They
// say so plainly and exit 3 rather than pretend.

func notBuilt(name, what string) error {
	return environment(fmt.Errorf("%s is not built yet in this version of kpsim: %s", name, what))
}

func newReportCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "report DIR...",
		Short: "Render saved runs as tables, Markdown and HTML (not built yet)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return notBuilt("report", "it renders the result.json that kpsim run writes")
		},
	}
}

func newCompareCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "compare A B",
		Short: "Compare two saved runs with a significance test (not built yet)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return notBuilt("compare", "it compares two result.json files that kpsim run writes")
		},
	}
}
