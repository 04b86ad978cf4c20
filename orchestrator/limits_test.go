package orchestrator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/scenarios"
)

// devMachine is the development machine the model was fitted on, less
// generous: 4 GiB available.
var devMachine = machine{memAvailable: 4 << 30, binaryBytes: 140e6}

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
// machine.
func TestShippedScenariosFit(t *testing.T) {
	files, err := filepath.Glob("../scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := loadTestScenario(t, f, nil)
			if err := checkLimitsOn(f, s, s.Spec.Modes, placements(s, "host"), s.Spec.VMLane == scenarios.VMLaneBeside, devMachine); err != nil {
				t.Errorf("refused: %v", err)
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

func TestLimitsRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		m         machine
		placement map[string]string
		lanes     bool
		want      []string // substrings of the error; none: fits
	}{
		{name: "fits", m: devMachine},
		{
			name: "memory",
			m:    machine{memAvailable: 500e6},
			// iptables: 130 + 3000*95 KB + 30000*9.5 KB = 700 MB; the
			// largest fit in 500-67 MB is (433-130)/0.19 MB = 1594.
			want: []string{"mode iptables-legacy: its node needs an estimated 700 MB", "the largest Service count that fits is 1594", "mode nftables: its node needs an estimated 520 MB"},
		},
		{
			name: "memory unknown is not checked",
			m:    machine{},
		},
		{
			name:      "VM: guest memory",
			m:         machine{memAvailable: 8 << 30, binaryBytes: 300e6},
			placement: map[string]string{"iptables-legacy": "vm", "nftables": "host"},
			want:      []string{"mode iptables-legacy: its node needs an estimated 700 MB", "more than the 605 MB a 1024 MiB VM leaves it", "the largest Service count that fits is 2505"},
		},
		{
			name:      "VM: host memory for the guest",
			m:         machine{memAvailable: 1 << 30, binaryBytes: 100e6},
			placement: map[string]string{"iptables-legacy": "host", "nftables": "vm"},
			want:      []string{"a 1024 MiB VM needs about 1178 MB on the host"},
		},
		{
			name:      "VM after the host node: the larger of the two",
			m:         machine{memAvailable: 1700e6, binaryBytes: 100e6},
			placement: map[string]string{"iptables-legacy": "host", "nftables": "vm"},
		},
		{
			name:      "VM beside the host node: both at once",
			m:         machine{memAvailable: 1700e6, binaryBytes: 100e6},
			placement: map[string]string{"iptables-legacy": "host", "nftables": "vm"},
			lanes:     true,
			// 700 MB for the iptables node and 1178 MB for the VM.
			want: []string{"a 1024 MiB VM beside a host node (spec.vmLane: beside) needs about 1878 MB on the host"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.placement == nil {
				tc.placement = map[string]string{"iptables-legacy": "host", "nftables": "host"}
			}
			s := loadTestScenario(t, "limits.yaml", []byte(limitsScenario))
			err := checkLimitsOn("limits.yaml", s, s.Spec.Modes, tc.placement, tc.lanes, tc.m)
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
