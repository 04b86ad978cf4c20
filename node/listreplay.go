package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/toolexec"
)

// kube-proxy's nftables mode lists its table's chains and sets at the start
// of every sync. From v1.37 it does so over netlink (NFTablesNetlink, on by
// default), inside its own process, where no timer can see it; v1.36 ran
// "nft --json --terse list table" (knftables' ListAll) instead. Listing is
// where upstream issue #139513 found a minute of a 16-minute sync at 44k
// Services. So at the end of a run kpsim makes the same calls itself on
// the table kube-proxy left, with the same library, and times them: an
// estimate of what each sync's listing costs at this size, measured by
// kpsim, not inside kube-proxy.

// listReplayRuns is how many times each listing is timed; the median is
// reported.
const listReplayRuns = 3

// kubeProxyTable is the table nftables mode programs (pkg/proxy/nftables).
const kubeProxyTable = "kube-proxy"

// replayListing times the listings against the node's kube-proxy table.
// A failure is recorded in the result's Error.
func replayListing(ctx context.Context, run toolexec.Runner) *reports.ListReplay {
	r := &reports.ListReplay{Runs: listReplayRuns, Method: reports.ListReplayMethod}
	if err := measureListing(ctx, run, r); err != nil {
		r.Error = err.Error()
	}
	return r
}

func measureListing(ctx context.Context, run toolexec.Runner, r *reports.ListReplay) error {
	nl, err := knftables.New(knftables.IPv4Family, kubeProxyTable, knftables.UseNetlink)
	if err != nil {
		return fmt.Errorf("listing replay: %w", err)
	}
	var chains, sets []string
	if r.NetlinkChainsSeconds, err = median(func() error {
		chains, err = nl.List(ctx, "chain")
		return err
	}); err != nil {
		return fmt.Errorf("listing replay: chains over netlink: %w", err)
	}
	if r.NetlinkSetsSeconds, err = median(func() error {
		sets, err = nl.List(ctx, "sets")
		return err
	}); err != nil {
		return fmt.Errorf("listing replay: sets over netlink: %w", err)
	}
	r.Chains, r.Sets = len(chains), len(sets)
	if r.NFTListTableSeconds, err = median(func() error {
		_, err := run.Run(ctx, toolexec.Command("nft", "--json", "--terse", "list", "table", "ip", kubeProxyTable))
		return err
	}); err != nil {
		return fmt.Errorf("listing replay: %w", err)
	}
	return nil
}

// median runs f listReplayRuns times and returns the median duration in
// seconds.
func median(f func() error) (float64, error) {
	var ds []time.Duration
	for range listReplayRuns {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2].Seconds(), nil
}
