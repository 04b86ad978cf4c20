package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/netns"
)

func newCleanupCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what a crashed run could leave behind",
		Long: `cleanup removes leftovers of crashed runs: named network namespaces and
temporary or VM work directories whose names start with kpsim-. Network
namespaces of a run normally vanish with its node process; this is for the
rest. It is idempotent and prints what it removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			removed, err := netns.Cleanup()
			for _, r := range removed {
				fmt.Fprintln(cmd.OutOrStdout(), "removed", r)
			}
			if err != nil {
				return environment(fmt.Errorf("cleanup: %w", err))
			}
			if len(removed) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to clean up")
			}
			return nil
		},
	}
}
