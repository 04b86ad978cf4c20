package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/orchestrator"
	"github.com/kpsim/kpsim/scenarios"
)

func newRunCommand() *cobra.Command {
	var o orchestrator.Options
	var variants []string
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
			var err error
			if o.Variants, err = parseVariants(variants); err != nil {
				return err
			}
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
	cmd.Flags().StringSliceVar(&variants, "variants", nil, "NAME=BINARY,...: compare kpsim binaries built against different kube-proxy code (make variant), e.g. base=bin/kpsim,new=bin/kpsim-v1.36.3: every mode runs with each in turn, alternating, --repeat times; replaces the scenario's spec.variants")
	cmd.Flags().IntVar(&o.Repeat, "repeat", 0, "runs of each mode per variant (default: the scenario's spec.repeat, else 5)")
	cmd.Flags().StringVar(&o.VMLane, "vm-lane", "", "when entries placed in a VM run: after (the host's entries, one entry at a time) or beside (a lane of VM entries at the same time as the host's: faster, but the lanes share the CPUs and the report says what it cost); default: the scenario's spec.vmLane, else after")
	cmd.Flags().IntVar(&o.TwinRepeats, "twin-repeats", 0, "time N more first syncs of each twin entry (the same mode and backend on the host and in a VM, as iptables-legacy and iptables-legacy-vm), each by a fresh proxier in a node of its own after a calibration there, so that the native estimate's check compares medians rather than single first syncs and scales each by the machine's speed when it ran (in the emulated VM each costs a boot, a calibration and a first sync)")
	cmd.Flags().StringVar(&o.Kernel, "kernel", "auto", "where nodes run: auto (each mode entry's kernel field: by default the host, or a VM for a mode the host kernel lacks), host, or vm (every mode in a VM, so the modes share one kernel)")
	return cmd
}

// parseVariants turns --variants NAME=BINARY values into variants; the
// orchestrator checks names and binaries.
func parseVariants(vals []string) ([]scenarios.Variant, error) {
	var out []scenarios.Variant
	for _, v := range vals {
		name, binary, ok := strings.Cut(v, "=")
		if !ok || name == "" || binary == "" {
			return nil, badInput(fmt.Errorf("--variants %q: want NAME=BINARY, e.g. new=bin/kpsim-v1.36.3", v))
		}
		out = append(out, scenarios.Variant{Name: name, Binary: binary})
	}
	return out, nil
}
