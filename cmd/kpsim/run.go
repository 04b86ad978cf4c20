package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/orchestrator"
)

func newRunCommand() *cobra.Command {
	var o orchestrator.Options
	cmd := &cobra.Command{
		Use:   "run SCENARIO",
		Short: "Run a scenario against the production proxiers",
		Long: `run loads and validates SCENARIO, checks this machine can run each mode,
snapshots the host namespace, then runs every mode in its own node process (a
new network and mount namespace) with the fake cluster, fake pods and the
upstream proxier, and writes result.json, the dataplane dumps and each node's
log to the run directory. It prints a summary table and exits 1 when an
expectation of the scenario was missed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr())
			defer stop()
			o.Stderr = cmd.ErrOrStderr()
			res, dir, err := orchestrator.Run(ctx, args[0], o)
			if res == nil {
				return err
			}
			// The summary on stdout, report.md and report.html beside the
			// result (kpsim report renders them again from result.json).
			if rerr := reportOne(cmd.OutOrStdout(), dir, map[string]bool{"summary": true, "markdown": true, "html": true}); rerr != nil && err == nil {
				err = rerr
			}
			fmt.Fprintf(cmd.OutOrStdout(), "result: %s\n", filepath.Join(dir, "result.json"))
			return err
		},
	}
	cmd.Flags().StringSliceVar(&o.Modes, "modes", nil, "mode entries to run, by entry name (iptables-legacy) or mode (iptables: every iptables entry, or with --kernel host|vm the entries the scenario places there, if any); default: the scenario's")
	cmd.Flags().StringSliceVar(&o.Backends, "iptables-backend", nil, "run every iptables mode entry with each of these backends (legacy, nft) instead of the scenario's")
	cmd.Flags().StringVar(&o.Out, "out", "", "run directory (default results/<run-id>)")
	cmd.Flags().StringVar(&o.Kernel, "kernel", "auto", "where nodes run: auto (each mode entry's kernel field: by default the host, or a VM for a mode the host kernel lacks), host, or vm (every mode in a VM, so the modes share one kernel)")
	return cmd
}
