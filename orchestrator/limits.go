package orchestrator

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/scenarios"
)

// The node memory model: a node process's peak RSS from the scenario's
// size and mode,
//
//	base + perService*Services + perEndpoint*Endpoints + perService*extra EndpointSlices.
//
// Fitted to the maxRSSBytes of every result.json kept on the development
// machine (results/*/ and the /tmp/kp-*/ runs, every mode result):
//   - small scenarios (smoke, policies: 9-25 Services, up to ~120
//     endpoints): 85-126 MB in every mode, on the host and in the VM;
//     base is their maximum, rounded up: 130 MB.
//   - 2000 Services x 10 endpoints (2000x10.yaml: churn, 40,000 probes,
//     the dataplane read twice): iptables legacy 270-304 MB, iptables nft
//     275-310 MB, nftables 224-255 MB, iptables legacy in the VM 317-319
//     MB; IPVS in the VM (initial sync only) 237 MB.
//
// Above base that is up to 190 MB for iptables (and IPVS, which also
// runs iptables) and 130 MB for nftables. Every large run had 10
// endpoints per Service, so the data cannot split that between Services
// and endpoints; the model charges the whole of it to each:
// perService = 190 MB / 2000 and perEndpoint = 190 MB / 20000. For any
// real split with non-negative costs that is an upper bound (it doubles
// the estimate at the measured ratio: 510 MB for iptables at 2000x10
// against 319 MB measured); it can under-estimate only if memory grows
// faster than linearly with size.
const (
	memBase                = 130e6
	memPerServiceIPTables  = 190e6 / 2000
	memPerEndpointIPTables = 190e6 / 20000
	memPerServiceNFTables  = 130e6 / 2000
	memPerEndpointNFTables = 130e6 / 20000
)

// nodeMemory estimates the peak RSS in bytes of a node process of mode
// for a cluster of size sz.
func nodeMemory(mode string, sz scenarios.Size) int64 {
	perSvc, perEP := memPerServiceIPTables, memPerEndpointIPTables
	if mode == scenarios.ModeNFTables {
		perSvc, perEP = memPerServiceNFTables, memPerEndpointNFTables
	}
	extraSlices := max(sz.EndpointSlices-int64(sz.Services), 0)
	return int64(memBase + perSvc*float64(int64(sz.Services)+extraSlices) + perEP*float64(sz.Endpoints))
}

// largestFit is the most Services, at the scenario's endpoints and
// slices per Service, whose estimate fits in avail bytes (0 if none).
func largestFit(mode string, sz scenarios.Size, avail int64) int {
	if sz.Services == 0 {
		return 0
	}
	perService := float64(nodeMemory(mode, sz)-memBase) / float64(sz.Services)
	if float64(avail) <= memBase || perService <= 0 {
		return 0
	}
	return int((float64(avail) - memBase) / perService)
}

// Guest memory: kpsim run boots VMs with vm.Options' default.
const (
	guestMemoryMiB = 1024
	// guestOverhead is what the guest holds besides the node process:
	// kernel, modules and slab (100 MiB) and the root file system in RAM,
	// which is the kpsim binary (added at run time) plus tools and
	// libraries (60 MiB).
	guestOverhead = 160 << 20
	// qemuOverhead is qemu's own memory on the host beside the guest's.
	qemuOverhead = 100 << 20
	// orchestratorReserve is kept for kpsim run itself beside its node.
	orchestratorReserve = 64 << 20
)

// machine is what the limits depend on; readMachine fills it in.
type machine struct {
	// memAvailable is MemAvailable in bytes (0: unknown, not checked).
	memAvailable int64
	// binaryBytes is the kpsim binary's size: the guest holds it in RAM.
	binaryBytes int64
}

func readMachine() machine {
	var m machine
	if f, err := os.Open("/proc/meminfo"); err == nil {
		m.memAvailable = memAvailable(f)
		f.Close()
	}
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			m.binaryBytes = fi.Size()
		}
	}
	return m
}

// memAvailable parses MemAvailable from /proc/meminfo (bytes; 0 if absent).
func memAvailable(r io.Reader) int64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// checkLimits refuses, before anything is created, a scenario this
// machine cannot hold: node memory beyond what is available. It says why
// and the largest size that fits. (Conntrack needs no check: the prober
// flushes the node's table before its probes could hold more than half
// of nf_conntrack_max, netns.ProbeSpec.ConntrackBatch.)
//
// With lanes, a host node and the VM run at once: their needs add up.
func checkLimits(file string, s *scenarios.Scenario, modes []scenarios.ModeSpec, placement map[string]string, lanes bool) error {
	return checkLimitsOn(file, s, modes, placement, lanes, readMachine())
}

func checkLimitsOn(file string, s *scenarios.Scenario, modes []scenarios.ModeSpec, placement map[string]string, lanes bool, m machine) error {
	var errs []string
	var vm bool
	for _, md := range modes {
		if placement[md.Name] == "vm" {
			vm = true
		}
	}
	sz := s.Size()
	var hostNeed, hostNodes, vmNeed int64
	for _, md := range modes {
		est := nodeMemory(md.Mode, sz)
		if placement[md.Name] == "vm" {
			avail := int64(guestMemoryMiB)<<20 - guestOverhead - m.binaryBytes
			if est > avail {
				errs = append(errs, fmt.Sprintf("mode %s: its node needs an estimated %d MB (%d Services, %d endpoints, %d EndpointSlices), more than the %d MB a %d MiB VM leaves it; the largest Service count that fits is %d",
					md.Name, est/1e6, sz.Services, sz.Endpoints, sz.EndpointSlices, avail/1e6, guestMemoryMiB, largestFit(md.Mode, sz, avail)))
			}
			vmNeed = int64(guestMemoryMiB)<<20 + qemuOverhead
			continue
		}
		hostNodes = max(hostNodes, est)
		if m.memAvailable > 0 && est > m.memAvailable-orchestratorReserve {
			errs = append(errs, fmt.Sprintf("mode %s: its node needs an estimated %d MB (%d Services, %d endpoints, %d EndpointSlices), more than the %d MB this machine has available (MemAvailable, less %d MB for kpsim run); the largest Service count that fits is %d",
				md.Name, est/1e6, sz.Services, sz.Endpoints, sz.EndpointSlices, m.memAvailable/1e6, int64(orchestratorReserve)/1e6, largestFit(md.Mode, sz, m.memAvailable-orchestratorReserve)))
		}
	}
	// Nodes run one at a time, or a host node beside the VM with lanes; a
	// VM takes its whole memory on the host.
	hostNeed, what := max(hostNodes, vmNeed), fmt.Sprintf("a %d MiB VM", guestMemoryMiB)
	if lanes {
		hostNeed, what = hostNodes+vmNeed, fmt.Sprintf("a %d MiB VM beside a host node (spec.vmLane: beside)", guestMemoryMiB)
	}
	if vm && m.memAvailable > 0 && hostNeed > m.memAvailable-orchestratorReserve {
		errs = append(errs, fmt.Sprintf("%s needs about %d MB on the host, more than the %d MB available (MemAvailable, less %d MB for kpsim run)",
			what, hostNeed/1e6, m.memAvailable/1e6, int64(orchestratorReserve)/1e6))
	}
	if len(errs) > 0 {
		var b bytes.Buffer
		fmt.Fprintf(&b, "%s does not fit this machine:", file)
		for _, e := range errs {
			b.WriteString("\n  " + e)
		}
		return environment(errors.New(b.String()))
	}
	return nil
}
