package orchestrator

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/scenarios"
)

// devMachine is the development machine the model was fitted on, less
// generous: 4 GiB available.
var devMachine = machine{conntrackMax: 262144, conntrackNote: "(test)", memAvailable: 4 << 30, binaryBytes: 140e6}

func loadTestScenario(t *testing.T, file string, data []byte) *scenarios.Scenario {
	t.Helper()
	if data == nil {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	s, err := scenarios.Load(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func placements(s *scenarios.Scenario, where string) map[string]string {
	p := map[string]string{}
	for _, m := range s.Spec.Modes {
		p[m.Name] = where
		if m.Kernel == scenarios.KernelVM || m.Mode == scenarios.ModeIPVS {
			p[m.Name] = "vm"
		}
	}
	return p
}

// TestNodeMemoryCoversMeasured: the estimate is at least every peak RSS
// the model was fitted to.
func TestNodeMemoryCoversMeasured(t *testing.T) {
	big := scenarios.Size{Services: 2000, Endpoints: 20000, EndpointSlices: 2000}
	small := scenarios.Size{Services: 25, Endpoints: 120, EndpointSlices: 25}
	for _, tc := range []struct {
		name     string
		mode     string
		size     scenarios.Size
		measured int64
	}{
		{"2000x10 iptables (legacy, VM)", scenarios.ModeIPTables, big, 319e6},
		{"2000x10 iptables nft", scenarios.ModeIPTables, big, 310e6},
		{"2000x10 nftables", scenarios.ModeNFTables, big, 255e6},
		{"2000x10 ipvs (VM, sync only)", scenarios.ModeIPVS, big, 237e6},
		{"smoke", scenarios.ModeIPTables, small, 126e6},
		{"smoke nftables", scenarios.ModeNFTables, small, 126e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est := nodeMemory(tc.mode, tc.size)
			if est < tc.measured {
				t.Errorf("estimate %d MB below the measured %d MB", est/1e6, tc.measured/1e6)
			}
			// Conservative, not absurd (IPVS's figure is of a sync-only run).
			if est > 22*tc.measured/10 {
				t.Errorf("estimate %d MB more than 2.2 times the measured %d MB", est/1e6, tc.measured/1e6)
			}
		})
	}
	// Endpoints beyond 100 per Service add slices, and cost.
	wide := scenarios.Size{Services: 10, Endpoints: 10000, EndpointSlices: 1000}
	if nodeMemory(scenarios.ModeNFTables, wide) <= nodeMemory(scenarios.ModeNFTables, scenarios.Size{Services: 10, Endpoints: 10000, EndpointSlices: 10}) {
		t.Errorf("extra EndpointSlices cost nothing")
	}
}

func TestLargestFit(t *testing.T) {
	sz := scenarios.Size{Services: 2000, Endpoints: 20000, EndpointSlices: 2000}
	for _, avail := range []int64{300e6, 510e6, 1e9} {
		n := largestFit(scenarios.ModeIPTables, sz, avail)
		fit := scenarios.Size{Services: n, Endpoints: int64(n) * 10, EndpointSlices: int64(n)}
		over := scenarios.Size{Services: n + 1, Endpoints: int64(n+1) * 10, EndpointSlices: int64(n + 1)}
		if nodeMemory(scenarios.ModeIPTables, fit) > avail || nodeMemory(scenarios.ModeIPTables, over) <= avail {
			t.Errorf("avail %d MB: largest fit %d is not the largest", avail/1e6, n)
		}
	}
	if n := largestFit(scenarios.ModeIPTables, sz, 100e6); n != 0 {
		t.Errorf("below the base: largest fit %d, want 0", n)
	}
}

// TestShippedScenariosFit: every shipped scenario fits the development
// machine; 2000x10 warns about the VM's small conntrack table.
func TestShippedScenariosFit(t *testing.T) {
	files, err := filepath.Glob("../scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := loadTestScenario(t, f, nil)
			var warn bytes.Buffer
			if err := checkLimitsOn(&warn, f, s, s.Spec.Modes, placements(s, "host"), devMachine); err != nil {
				t.Errorf("refused: %v", err)
			}
			if filepath.Base(f) == "2000x10.yaml" && !strings.Contains(warn.String(), "conntrack") {
				t.Errorf("no warning about the VM's conntrack table: %q", warn.String())
			}
		})
	}
}

const limitsScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: limits}
spec:
  modes: [{mode: iptables, backend: legacy}, {mode: nftables}]
  serviceGroups: [{name: web, count: 3000, endpoints: 10}]
  steps:
    - {name: initial, sync: {}}
    - {name: probe, probe: {group: web, services: 100, connections: 1000}}
`

// autoScenario's second probe step leaves its count to the power
// calculation: 50 Services of 10 endpoints take thousands each.
const autoScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: auto}
spec:
  modes: [{mode: nftables}]
  serviceGroups: [{name: web, count: 100, endpoints: 10}]
  steps:
    - {name: probe, probe: {group: web, services: 2, connections: 1000}}
    - {name: probe-auto, probe: {group: web, services: 50}}
`

func TestLimitsRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		scenario  string
		m         machine
		placement map[string]string
		want      []string // substrings of the error; none: fits
	}{
		{name: "fits", m: devMachine},
		{
			name: "memory",
			m:    machine{conntrackMax: 262144, memAvailable: 500e6},
			// iptables: 130 + 3000*95 KB + 30000*9.5 KB = 700 MB; the
			// largest fit in 500-67 MB is (433-130)/0.19 MB = 1594.
			want: []string{"mode iptables-legacy: its node needs an estimated 700 MB", "the largest Service count that fits is 1594", "mode nftables: its node needs an estimated 520 MB"},
		},
		{
			name: "memory unknown is not checked",
			m:    machine{conntrackMax: 262144},
		},
		{
			name: "conntrack",
			m:    machine{conntrackMax: 65536, conntrackNote: "(test)", memAvailable: 4 << 30},
			// 100 x 1000 = 100,000 > 32768.
			want: []string{"spec.steps[1].probe.connections: Invalid value: 1000", "up to 100000 conntrack entries", "budget of 32768, half of nf_conntrack_max 65536", "the largest connections for this step that fits is 327"},
		},
		{
			name:      "automatic count over the budget",
			scenario:  autoScenario,
			m:         devMachine,
			placement: map[string]string{"nftables": "host"},
			want:      []string{"spec.steps[1].probe.connections: Invalid value: ", "automatic count: ", "Service ports: the probes would hold up to"},
		},
		{
			name:      "VM: guest memory",
			m:         machine{conntrackMax: 262144, memAvailable: 8 << 30, binaryBytes: 300e6},
			placement: map[string]string{"iptables-legacy": "vm", "nftables": "host"},
			want:      []string{"mode iptables-legacy: its node needs an estimated 700 MB", "more than the 605 MB a 1024 MiB VM leaves it", "the largest Service count that fits is 2505"},
		},
		{
			name:      "VM: host memory for the guest",
			m:         machine{conntrackMax: 262144, memAvailable: 1 << 30, binaryBytes: 100e6},
			placement: map[string]string{"iptables-legacy": "host", "nftables": "vm"},
			want:      []string{"a 1024 MiB VM needs about 1178 MB on the host"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.scenario == "" {
				tc.scenario = limitsScenario
			}
			if tc.placement == nil {
				tc.placement = map[string]string{"iptables-legacy": "host", "nftables": "host"}
			}
			s := loadTestScenario(t, "limits.yaml", []byte(tc.scenario))
			var warn bytes.Buffer
			err := checkLimitsOn(&warn, "limits.yaml", s, s.Spec.Modes, tc.placement, tc.m)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if KindOf(err) != Environment {
				t.Fatalf("got %v, want an Environment error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestMemAvailable(t *testing.T) {
	in := "MemTotal:       24684084 kB\nMemFree:         1000 kB\nMemAvailable:   22251732 kB\n"
	if got := memAvailable(strings.NewReader(in)); got != 22251732*1024 {
		t.Errorf("memAvailable = %d", got)
	}
	if got := memAvailable(strings.NewReader("MemTotal: 1 kB\n")); got != 0 {
		t.Errorf("without MemAvailable: %d, want 0", got)
	}
}

func TestGuestConntrackMax(t *testing.T) {
	for mib, want := range map[int]int64{1024: 8192, 256: 2048, 2048: 65536, 8192: 262144, 64: 1024} {
		if got := guestConntrackMax(mib); got != want {
			t.Errorf("%d MiB: %d, want %d", mib, got, want)
		}
	}
}
