package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/proxier"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the kube-proxy release kpsim was built against",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "kube-proxy (k8s.io/kubernetes) %s\n", proxier.KubernetesVersion())
		},
	}
}
