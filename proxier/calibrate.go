package proxier

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/kpsim/kpsim/toolexec"
	"github.com/vishvananda/netlink"
)

// Calibration kinds: the unit costs a proxier's sync time is made of.
// KernelKind* name the timed calls; CalibrationCPU is everything else.
const CalibrationCPU = "cpu"

// CalibrationKind is one measured unit cost.
type CalibrationKind struct {
	// Op says what was timed.
	Op string `json:"op"`
	// Runs of it; Median, Min and Max seconds per operation.
	Runs   int     `json:"runs"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Calibration is a set of unit costs measured in one place (the host, or
// a VM). Timings taken in a VM are scaled to a host estimate kind by kind
// with the ratio of two calibrations taken in the same run: under software
// emulation program starts slow down far more (about 35x measured here)
// than kernel work (8-10x), so one overall factor would mislead.
type Calibration struct {
	Kinds map[string]CalibrationKind `json:"kinds"`
}

// Calibrate measures the unit costs in the calling process's network
// namespace. It changes only that namespace, and undoes what it does: an
// ipset set, an iptables chain, addresses on lo. Call it in a node
// process, before the proxier starts. backend selects the iptables
// binaries ("legacy" or "nft"). Kinds whose tool is missing are left out.
func Calibrate(ctx context.Context, tools toolexec.Runner, backend string) Calibration {
	c := Calibration{Kinds: map[string]CalibrationKind{}}
	if _, err := tools.LookPath("ipset"); err == nil {
		// Upstream's ipset interface runs one ipset program per call.
		if k, err := timeRuns(ctx, "ipset create + destroy (2 program runs)", 10, 2, func() error {
			if _, err := tools.Run(ctx, toolexec.Command("ipset", "create", "kpsim-calibrate", "hash:ip")); err != nil {
				return err
			}
			_, err := tools.Run(ctx, toolexec.Command("ipset", "destroy", "kpsim-calibrate"))
			return err
		}); err == nil {
			c.Kinds[KernelKindIPSet] = k
		}
	}
	restore := "iptables-" + backend + "-restore"
	if _, err := tools.LookPath(restore); err == nil {
		var add, del strings.Builder
		add.WriteString("*nat\n:KPSIM-CALIBRATE - [0:0]\n")
		for i := range 50 {
			fmt.Fprintf(&add, "-A KPSIM-CALIBRATE -d 10.255.%d.%d/32 -p tcp --dport 80 -j RETURN\n", i/250, i%250+1)
		}
		add.WriteString("COMMIT\n")
		del.WriteString("*nat\n-X KPSIM-CALIBRATE\nCOMMIT\n")
		if k, err := timeRuns(ctx, restore+" --noflush: add a 50-rule chain, flush it, delete it (per program run)", 10, 3, func() error {
			for _, in := range []string{add.String(), "*nat\n-F KPSIM-CALIBRATE\nCOMMIT\n", del.String()} {
				if _, err := tools.Run(ctx, toolexec.Cmd{Name: restore, Args: []string{"--noflush"}, Stdin: in}); err != nil {
					return err
				}
			}
			return nil
		}); err == nil {
			c.Kinds[KernelKindIPTables] = k
		}
	}
	// IPVS calls are netlink round trips; addresses on lo are the
	// netlink round trips every kernel has.
	if lo, err := netlink.LinkByName("lo"); err == nil {
		if k, err := timeRuns(ctx, "netlink RTM_NEWADDR + RTM_DELADDR on lo (2 round trips)", 200, 2, func() error {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(127, 255, 0, 7), Mask: net.CIDRMask(32, 32)}}
			if err := netlink.AddrAdd(lo, a); err != nil {
				return err
			}
			return netlink.AddrDel(lo, a)
		}); err == nil {
			c.Kinds[KernelKindIPVS] = k
		}
	}
	buf := make([]byte, 4<<20)
	if k, err := timeRuns(ctx, "sha256 of 4 MiB (CPU work, the proxier's own share)", 10, 1, func() error {
		sha256.Sum256(buf)
		return nil
	}); err == nil {
		c.Kinds[CalibrationCPU] = k
	}
	return c
}

// timeRuns times f runs times; each run is ops operations.
func timeRuns(ctx context.Context, op string, runs, ops int, f func() error) (CalibrationKind, error) {
	xs := make([]float64, 0, runs)
	for range runs {
		if err := ctx.Err(); err != nil {
			return CalibrationKind{}, err
		}
		start := time.Now()
		if err := f(); err != nil {
			return CalibrationKind{}, err
		}
		xs = append(xs, time.Since(start).Seconds()/float64(ops))
	}
	sort.Float64s(xs)
	return CalibrationKind{Op: op, Runs: runs, Median: xs[len(xs)/2], Min: xs[0], Max: xs[len(xs)-1]}, nil
}
