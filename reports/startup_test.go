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
