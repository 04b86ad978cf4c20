package proxier

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/toolexec"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"
)

// Calibration kinds: the unit costs a proxier's sync time is made of.
// KernelKind* name the timed calls; CalibrationCPU is everything else,
// kube-proxy's own work (calibrate_ownwork.go).
// CalibrationTableRestore is named after the sync part it scales
// (PartIPTablesRestore): a kind named after a part scales that part alone.
const (
	CalibrationCPU          = "cpu"
	CalibrationTableRestore = PartIPTablesRestore
)

// tableRestoreServices and tableRestoreEndpoints size the table that
// CalibrationTableRestore restores: 400 Services of 4 endpoints, 5,200
// rules in 2,001 chains, as kube-proxy's iptables mode writes them.
const (
	tableRestoreServices  = 400
	tableRestoreEndpoints = 4
	tableRestoreShape     = "400 Services x 4 endpoints (5,200 rules in 2,001 chains)"
)

// tableRestoreRuns: the slowdown's interval narrows with the runs on each
// side. With 6, one slow run in the VM took the restore's low end to 7.9x
// against 10.6x (the estimate's range +38% of its centre, 2000x10); 10
// cost about 3 s more in the VM alone (0.7 s a run: the restore and its
// deletion).
const tableRestoreRuns = 10

// CalibrationKind is one measured unit cost.
type CalibrationKind struct {
	// Op says what was timed.
	Op string `json:"op"`
	// Runs of it; Median, Min and Max seconds per operation.
	Runs   int     `json:"runs"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Samples are the runs' seconds per operation, in the order taken:
	// a slowdown's confidence interval is computed from them.
	Samples []float64 `json:"samples,omitempty"`
}

// Calibration is a set of unit costs measured in one place (the host, or
// a VM). Timings taken in a VM are scaled to a host estimate kind by kind
// with the ratio of two calibrations taken in the same run: under software
// emulation program starts slow down far more (about 35x measured here)
// than kernel work (8-10x), so one overall factor would mislead.
type Calibration struct {
	Kinds map[string]CalibrationKind `json:"kinds"`
	// Taken is when the calibration began.
	Taken time.Time `json:"taken"`
}

// Calibrate measures the unit costs in the calling process's network
// namespace. It changes only that namespace, and undoes what it does: an
// ipset set, an iptables chain, addresses on lo. Call it in a node
// process, before the proxier starts. backend selects the iptables
// binaries ("legacy" or "nft"). Kinds whose tool is missing are left out.
func Calibrate(ctx context.Context, tools toolexec.Runner, backend string) Calibration {
	c := Calibration{Kinds: map[string]CalibrationKind{}, Taken: time.Now()}
	if _, err := tools.LookPath("ipset"); err == nil {
		// What IPVS mode's syncs are made of: upstream's ipset interface
		// runs one "ipset add SET ENTRY -exist" program per entry.
		const set = "kpsim-calibrate"
		if _, err := tools.Run(ctx, toolexec.Command("ipset", "create", set, "hash:ip,port", "-exist")); err == nil {
			i := 0
			if k, err := timeRuns(ctx, "ipset add "+set+" 10.255.x.y,tcp:80 -exist (hash:ip,port; one program run, as kube-proxy's IPVS mode runs it per entry)", 30, 1, func() error {
				i++
				_, err := tools.Run(ctx, toolexec.Command("ipset", "add", set, calibrationAddr("10.255", i)+",tcp:80", "-exist"))
				return err
			}); err == nil {
				c.Kinds[KernelKindIPSet] = k
			}
			_, _ = tools.Run(ctx, toolexec.Command("ipset", "destroy", set))
		}
	}
	restore := "iptables-" + backend + "-restore"
	if _, err := tools.LookPath(restore); err == nil {
		var add, del strings.Builder
		add.WriteString("*nat\n:KPSIM-CALIBRATE - [0:0]\n")
		for i := range 50 {
			fmt.Fprintf(&add, "-A KPSIM-CALIBRATE -d %s/32 -p tcp --dport 80 -j RETURN\n", calibrationAddr("10.255", i))
		}
		add.WriteString("COMMIT\n")
		del.WriteString("*nat\n-X KPSIM-CALIBRATE\nCOMMIT\n")
		if k, err := timeRuns(ctx, restore+" --noflush: add a 50-rule chain, flush it, delete it (per program run)", 20, 3, func() error {
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
	// kube-proxy restores whole tables. A small restore's cost is mostly
	// the program's start, a whole table's mostly parsing and the kernel's
	// table replace, and emulation slows the two by different factors.
	// Measured here (2000x10, four idle runs): the 50-rule restore above
	// 10.7-13.8x slower in the VM, this table 11.0-11.7x, iptables-legacy's
	// first-sync restores of 64,000 rules 9.5-12.0x. The nft backend is left
	// out: at its speed a table this size would take seconds a run, and no
	// VM entry needs it yet.
	if backend == BackendLegacy {
		if _, err := tools.LookPath(restore); err == nil {
			add, del := tableRestoreInput(tableRestoreServices, tableRestoreEndpoints)
			if k, err := timeRuns(ctx, restore+" --noflush: a nat table of "+tableRestoreShape+" as kube-proxy writes it, then its deletion (per program run)", tableRestoreRuns, 2, func() error {
				for _, in := range []string{add, del} {
					if _, err := tools.Run(ctx, toolexec.Cmd{Name: restore, Args: []string{"--noflush"}, Stdin: in}); err != nil {
						return err
					}
				}
				return nil
			}); err == nil {
				c.Kinds[CalibrationTableRestore] = k
			}
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
	if k, err := calibrateOwnWork(ctx); err == nil {
		c.Kinds[CalibrationCPU] = k
	} else {
		klog.Background().Error(err, "Calibrating kube-proxy's own work")
	}
	return c
}

// tableRestoreInput is an iptables-restore input that adds nat chains
// shaped like kube-proxy's iptables mode for the given number of Services,
// each with the given number of endpoints (a dispatch rule per Service, a
// statistic rule per endpoint, a masquerade mark and a DNAT per endpoint
// chain), and the input that deletes them again. Addresses are in 10.254.0.0/16 (Services)
// and 10.253.0.0/16 (endpoints), in the calibrating node's namespace.
func tableRestoreInput(services, endpoints int) (add, del string) {
	var a, d, rules strings.Builder
	a.WriteString("*nat\n")
	d.WriteString("*nat\n")
	chain := func(name string) {
		fmt.Fprintf(&a, ":%s - [0:0]\n", name)
		fmt.Fprintf(&d, "-F %s\n", name)
	}
	const dispatch = "KPSIM-CAL-SERVICES"
	chain(dispatch)
	for i := range services {
		svc := fmt.Sprintf("KPSIM-CAL-SVC-%d", i)
		chain(svc)
		fmt.Fprintf(&rules, "-A %s -d %s/32 -p tcp -m comment --comment \"calibrate/svc-%d:http cluster IP\" -m tcp --dport 80 -j %s\n",
			dispatch, calibrationAddr("10.254", i), i, svc)
		for j := range endpoints {
			sep := fmt.Sprintf("KPSIM-CAL-SEP-%d-%d", i, j)
			chain(sep)
			ip := calibrationAddr("10.253", i*endpoints+j)
			if j < endpoints-1 {
				fmt.Fprintf(&rules, "-A %s -m comment --comment \"calibrate/svc-%d:http -> %s:8080\" -m statistic --mode random --probability %.10f -j %s\n",
					svc, i, ip, 1/float64(endpoints-j), sep)
			} else {
				fmt.Fprintf(&rules, "-A %s -m comment --comment \"calibrate/svc-%d:http -> %s:8080\" -j %s\n", svc, i, ip, sep)
			}
			fmt.Fprintf(&rules, "-A %s -s %s/32 -m comment --comment \"calibrate/svc-%d:http\" -j MARK --set-xmark 0x4000/0x4000\n", sep, ip, i)
			fmt.Fprintf(&rules, "-A %s -p tcp -m comment --comment \"calibrate/svc-%d:http\" -m tcp -j DNAT --to-destination %s:8080\n", sep, i, ip)
		}
	}
	a.WriteString(rules.String())
	a.WriteString("COMMIT\n")
	for _, line := range strings.Split(strings.TrimSuffix(d.String(), "\n"), "\n")[1:] {
		fmt.Fprintf(&d, "-X %s\n", strings.TrimPrefix(line, "-F "))
	}
	d.WriteString("COMMIT\n")
	return a.String(), d.String()
}

// calibrationAddr is the i-th address of the calibration's /16 net
// ("10.254"): net.(i/250).(i%250+1), so no address ends in 0 or 255.
func calibrationAddr(net string, i int) string {
	return fmt.Sprintf("%s.%d.%d", net, i/250, i%250+1)
}

// timeRuns times f runs times; each run is ops operations.
func timeRuns(ctx context.Context, op string, runs, ops int, f func() error) (CalibrationKind, error) {
	return sampleRuns(ctx, op, runs, func() (time.Duration, error) {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		return time.Since(start) / time.Duration(ops), nil
	})
}

// sampleRuns runs f runs times; each run's sample is the duration f
// returns.
func sampleRuns(ctx context.Context, op string, runs int, f func() (time.Duration, error)) (CalibrationKind, error) {
	xs := make([]float64, 0, runs)
	for range runs {
		if err := ctx.Err(); err != nil {
			return CalibrationKind{}, err
		}
		d, err := f()
		if err != nil {
			return CalibrationKind{}, err
		}
		xs = append(xs, d.Seconds())
	}
	sorted := slices.Sorted(slices.Values(xs))
	return CalibrationKind{Op: op, Runs: runs, Median: sorted[len(sorted)/2], Min: sorted[0], Max: sorted[len(sorted)-1], Samples: xs}, nil
}
