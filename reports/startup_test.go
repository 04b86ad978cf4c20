package reports

import (
	"strings"
	"testing"
	"time"
)

func TestTopologyLate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	zone := map[string]string{"topology.kubernetes.io/zone": "zone-a"}
	cases := []struct {
		name      string
		startup   *Startup
		syncs     []Sync
		late, ok  bool
		afterWant time.Duration
	}{
		{name: "no startup record", syncs: []Sync{{Start: at(0), End: at(100), Succeeded: true}}},
		{name: "node without zone", startup: &Startup{}, syncs: []Sync{{Start: at(0), End: at(100), Succeeded: true}}},
		{name: "zone before first sync", startup: &Startup{TopologyLabels: zone, TopologyReceived: at(-5)},
			syncs: []Sync{{Start: at(0), End: at(100), Succeeded: true}}},
		{name: "zone during first sync, repaired", startup: &Startup{TopologyLabels: zone, TopologyReceived: at(50)},
			syncs: []Sync{{Start: at(0), End: at(100), Succeeded: true}, {Start: at(1000), End: at(1080), Succeeded: true}},
			late:  true, ok: true, afterWant: 980 * time.Millisecond},
		{name: "failed sync before zone is not the first", startup: &Startup{TopologyLabels: zone, TopologyReceived: at(50)},
			syncs: []Sync{{Start: at(0), End: at(20)}, {Start: at(60), End: at(100), Succeeded: true}}},
		{name: "never repaired", startup: &Startup{TopologyLabels: zone, TopologyReceived: at(150)},
			syncs: []Sync{{Start: at(0), End: at(100), Succeeded: true}}, late: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := ModeResult{Name: "iptables-legacy", Startup: tc.startup, Syncs: tc.syncs}
			late, after, ok := m.TopologyLate()
			if late != tc.late || ok != tc.ok || after != tc.afterWant {
				t.Errorf("TopologyLate() = %v, %v, %v; want %v, %v, %v", late, after, ok, tc.late, tc.afterWant, tc.ok)
			}
			notes := startupNotes(&Result{Modes: []ModeResult{m}})
			if (len(notes) > 0) != tc.late {
				t.Fatalf("startupNotes = %q, want a note: %v", notes, tc.late)
			}
			if tc.late && !strings.Contains(notes[0], "zone=zone-a") {
				t.Errorf("note %q does not name the labels", notes[0])
			}
			// The same record for ServiceCIDRs counts in nftables mode only.
			if tc.startup != nil {
				cidrs := *tc.startup
				cidrs.TopologyLabels, cidrs.ServiceCIDRs, cidrs.ServiceCIDRsReceived = nil, []string{"10.96.0.0/16"}, tc.startup.TopologyReceived
				for _, mode := range []string{"iptables", "nftables"} {
					m := ModeResult{Name: mode, Mode: mode, Startup: &cidrs, Syncs: tc.syncs}
					late, after, ok := m.ServiceCIDRsLate()
					wantLate := tc.late && mode == "nftables"
					if late != wantLate || (wantLate && (ok != tc.ok || after != tc.afterWant)) {
						t.Errorf("%s: ServiceCIDRsLate() = %v, %v, %v; want late %v", mode, late, after, ok, wantLate)
					}
				}
			}
		})
	}
}

func TestStartupNoteNotHanded(t *testing.T) {
	m := ModeResult{Name: "nftables", Mode: "nftables", Startup: &Startup{TopologyNotHanded: map[string]string{"topology.kubernetes.io/zone": "zone-a"}}}
	notes := startupNotes(&Result{Modes: []ModeResult{m}})
	if len(notes) != 1 || !strings.Contains(notes[0], "not handed") || !strings.Contains(notes[0], "never did") {
		t.Errorf("startupNotes = %q, want one note that the labels were never handed", notes)
	}
}

func TestStartupNoteNodeEventsHeld(t *testing.T) {
	for _, held := range []int{0, 2} {
		m := ModeResult{Name: "iptables-legacy", Mode: "iptables", Startup: &Startup{NodeEventsHeld: held}}
		notes := startupNotes(&Result{Modes: []ModeResult{m}})
		if got := len(notes); got != min(held, 1) {
			t.Errorf("held %d: %d notes %q, want %d", held, got, notes, min(held, 1))
		}
		if held > 0 && len(notes) == 1 && !strings.Contains(notes[0], "2 Node event(s)") {
			t.Errorf("held %d: note %q does not give the count", held, notes[0])
		}
	}
}

// TestServiceCIDRsLateAfterMigration: a migrated nftables kube-proxy whose
// first sync came before its ServiceCIDRs is reported like a cold start,
// over its own process's syncs only.
func TestServiceCIDRsLateAfterMigration(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sync := func(start, end float64, process int) Sync {
		return Sync{Start: at(start), End: at(end), Succeeded: true, Merged: 1, Full: true, Process: process}
	}
	cidrs := []string{"10.96.0.0/16"}
	for _, tc := range []struct {
		name     string
		syncs    []Sync
		received float64
		notes    []string // substrings, one note each
	}{
		// Process 0 synced after 5 s, but it is not the migrated one.
		{"late, no later sync of the new process", []Sync{sync(0, 1, 0), sync(6, 7, 0), sync(10, 11, 1)}, 12,
			[]string{"nftables, step off-ipvs: the new kube-proxy's first sync began before it was handed the ServiceCIDRs (10.96.0.0/16)", "no later sync in this run had them"}},
		{"late, a later sync had them", []Sync{sync(10, 11, 1), sync(13, 14, 1)}, 12, []string{"here one ended 3s after the first"}},
		{"handed before the first sync", []Sync{sync(10, 11, 1)}, 9, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := tc.syncs[len(tc.syncs)-1]
			for _, s := range tc.syncs {
				if s.Process == 1 {
					first = s
					break
				}
			}
			m := ModeResult{Name: "nftables", Mode: "nftables", Syncs: tc.syncs, Lifecycle: []Lifecycle{{Step: "off-ipvs", Action: "migrate",
				FirstSync: &first, ServiceCIDRs: cidrs, ServiceCIDRsReceived: at(tc.received)}}}
			notes := startupNotes(&Result{Modes: []ModeResult{m}})
			if len(notes) != min(len(tc.notes), 1) {
				t.Fatalf("notes %q, want %d", notes, min(len(tc.notes), 1))
			}
			for _, w := range tc.notes {
				if !strings.Contains(notes[0], w) {
					t.Errorf("note %q does not say %q", notes[0], w)
				}
			}
		})
	}
}
