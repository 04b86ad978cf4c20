package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/proxier"
)

func newModesCommand() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "modes",
		Short: "List the proxy modes this machine can run, and why not",
		Long: `modes checks, for each kube-proxy mode and iptables backend, the kernel
options it needs (from /proc/config.gz or /boot/config-*) and the tools it
runs (on PATH), and says what is missing and how to get it. It only reads.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			printModes(cmd.OutOrStdout(), proxier.ProbeHost(), verbose)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show how each answer was obtained")
	return cmd
}

func printModes(w io.Writer, h *proxier.Host, verbose bool) {
	fmt.Fprintf(w, "kernel %s, root: %v\n", h.KernelRelease, h.Root)
	table := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off))
	table.Header([]string{"mode", "backend", "runs here", "why not", "fix"})
	var evidence []string
	for _, mb := range [][2]string{{"iptables", "legacy"}, {"iptables", "nft"}, {"nftables", ""}, {"ipvs", "legacy"}, {"ipvs", "nft"}} {
		a := h.Check(mb[0], mb[1])
		ok := "no"
		if a.OK {
			ok = "yes"
		}
		backend := a.Backend
		if backend == "" {
			backend = "-"
		}
		_ = table.Append([]string{a.Mode, backend, ok, a.Reason, a.Fix})
		for _, e := range a.Evidence {
			evidence = append(evidence, fmt.Sprintf("  %s/%s: %s", a.Mode, backend, e))
		}
	}
	_ = table.Render()
	if verbose {
		fmt.Fprintln(w, "how this was obtained:")
		fmt.Fprintln(w, strings.Join(evidence, "\n"))
	}
}
