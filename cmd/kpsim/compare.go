package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/reports"
)

type compareOptions struct {
	pairs    []string
	markdown bool
	alpha    float64
}

func newCompareCommand() *cobra.Command {
	o := compareOptions{}
	cmd := &cobra.Command{
		Use:   "compare A B | compare RUN",
		Short: "Compare two saved runs, or the variants of one run, with a significance test",
		Long: `compare reads A/result.json and B/result.json (directories kpsim run wrote,
or the files themselves) and, for every mode entry in both, shows B against A:
sync durations (all syncs and partial ones), end-to-end network programming
latency, the first sync, kube-proxy's mean programming latency and the rule
counts. Sync and latency samples get a two-sided Mann-Whitney U test; a
change with p >= --alpha is shown as "~", as benchstat does.

Mode entries pair by name; --pair iptables-legacy=iptables-nft pairs entries
named differently (A's name first). It warns when the runs' kernels or CPU
counts differ: timings from different machines are not comparable.

With one RUN made with variants (kpsim run --variants), it compares every
variant with the first, per mode entry and metric: the ratio of medians
with its 95% confidence interval (Hodges-Lehmann) and a Mann-Whitney test
over the runs, Holm-corrected, and the exact rule and object counts.

It exits 2 when a result.json is missing or invalid, a --pair names a
mode entry a run lacks, or a single RUN has no variants.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				r, _, err := readResult(args[0])
				if err != nil {
					return err
				}
				if err := reports.WriteVariants(cmd.OutOrStdout(), r, o.markdown); err != nil {
					return badInput(err)
				}
				return nil
			}
			return runCompare(cmd.OutOrStdout(), args[0], args[1], o)
		},
	}
	cmd.Flags().StringArrayVar(&o.pairs, "pair", nil, "A_MODE=B_MODE: compare mode entry A_MODE of A with B_MODE of B (repeatable)")
	cmd.Flags().BoolVar(&o.markdown, "markdown", false, "write Markdown instead of terminal tables")
	cmd.Flags().Float64Var(&o.alpha, "alpha", reports.DefaultAlpha, "significance level of the test")
	return cmd
}

func runCompare(stdout io.Writer, argA, argB string, o compareOptions) error {
	opts := reports.CompareOptions{Pairs: map[string]string{}, Alpha: o.alpha}
	if o.alpha <= 0 || o.alpha >= 1 {
		return badInput(fmt.Errorf("--alpha %v: want a level between 0 and 1, e.g. 0.05", o.alpha))
	}
	for _, p := range o.pairs {
		a, b, ok := strings.Cut(p, "=")
		a, b = strings.TrimSpace(a), strings.TrimSpace(b)
		if !ok || a == "" || b == "" {
			return badInput(fmt.Errorf("--pair %q: want A_MODE=B_MODE, e.g. iptables-legacy=iptables-nft", p))
		}
		if prev, dup := opts.Pairs[a]; dup {
			return badInput(fmt.Errorf("--pair %q: %s is already paired with %s", p, a, prev))
		}
		opts.Pairs[a] = b
	}
	ra, _, err := readResult(argA)
	if err != nil {
		return err
	}
	rb, _, err := readResult(argB)
	if err != nil {
		return err
	}
	c, err := reports.Compare(ra, rb, opts)
	if err != nil {
		return badInput(err)
	}
	if o.markdown {
		return reports.WriteComparisonMarkdown(stdout, c)
	}
	return reports.WriteComparison(stdout, c)
}
