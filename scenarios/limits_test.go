package scenarios

import "testing"

func TestConntrackPeak(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loads []ProbeLoad
		peak  int64
		at    int
	}{
		{"none", nil, 0, -1},
		{"one step adds up over its ports", []ProbeLoad{{Targets: 20, Connections: 2000}}, 40000, 0},
		{"steps add up", []ProbeLoad{{Targets: 2, Connections: 100}, {Step: 3, Targets: 1, Connections: 50}}, 250, 1},
		// 50,000 to one port: batches of 20,000 with a flush before the
		// second and third; the last leaves 10,000, the next port adds 5.
		{"flush every batch", []ProbeLoad{{Targets: 1, Connections: 100}, {Targets: 1, Connections: 50000}, {Targets: 1, Connections: 5}}, 20100, 1},
		{"after a flush only the rest counts", []ProbeLoad{{Targets: 1, Connections: 50000}, {Targets: 3, Connections: 5000}}, 25000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peak, at := ConntrackPeak(tc.loads, ProbeConntrackBatch)
			if peak != tc.peak || at != tc.at {
				t.Errorf("peak %d at %d, want %d at %d", peak, at, tc.peak, tc.at)
			}
		})
	}
}

func TestCheckConntrack(t *testing.T) {
	loads := []ProbeLoad{{Step: 1, Targets: 80, Connections: 1000}, {Step: 3, Targets: 60, Connections: 1000}, {Step: 4, Targets: 1, Connections: 100000}}
	m, ok := CheckConntrack(loads, 131072, ProbeConntrackBatch)
	if ok {
		t.Fatal("fits")
	}
	// 80,000 + 60 x 851 = 131,060 fits; 852 does not.
	if m.Load.Step != 3 || m.Peak != 140000 || m.Largest != 851 {
		t.Errorf("misfit %+v, want step 3, peak 140000, largest 851", m)
	}
	if _, ok := CheckConntrack(loads[:1], 131072, ProbeConntrackBatch); !ok {
		t.Error("80,000 entries do not fit 131,072")
	}
}
