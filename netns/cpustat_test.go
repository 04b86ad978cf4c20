package netns

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const procStat = `cpu  2133473 3588 535953 1251855 6341 0 32398 9848 0 0
cpu0 1073446 1874 250560 638566 1346 0 16136 4942 0 0
cpu1 1060027 1714 285392 613288 4995 7 16262 4905 0 0
cpu12 1 2 3 4
intr 68100362 0 0 0
ctxt 181437217
`

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cpu     int
		want    CPUTimes
		wantErr string
	}{
		{name: "cpu0", cpu: 0, want: CPUTimes{User: 1073446, Nice: 1874, System: 250560, Idle: 638566, IOWait: 1346, SoftIRQ: 16136, Steal: 4942}},
		{name: "cpu1 with irq", cpu: 1, want: CPUTimes{User: 1060027, Nice: 1714, System: 285392, Idle: 613288, IOWait: 4995, IRQ: 7, SoftIRQ: 16262, Steal: 4905}},
		// An old kernel's four fields; cpu1 is not a prefix match of cpu12.
		{name: "four fields", cpu: 12, want: CPUTimes{User: 1, Nice: 2, System: 3, Idle: 4}},
		{name: "no such cpu", cpu: 2, wantErr: "no line for cpu2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcStat([]byte(procStat), tc.cpu)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	for _, bad := range []string{"cpu0 1 2 3\n", "cpu0 1 2 x 4 5\n"} {
		if _, err := ParseProcStat([]byte(bad), 0); err == nil {
			t.Errorf("ParseProcStat(%q): no error", bad)
		}
	}
}

func TestCPUTimesArithmetic(t *testing.T) {
	a := CPUTimes{User: 10, Nice: 1, System: 20, Idle: 5, IOWait: 1, IRQ: 2, SoftIRQ: 30, Steal: 1}
	b := CPUTimes{User: 4, System: 5, Idle: 6, SoftIRQ: 10}
	d := a.Sub(b)
	if want := (CPUTimes{User: 6, Nice: 1, System: 15, Idle: 0, IOWait: 1, IRQ: 2, SoftIRQ: 20, Steal: 1}); d != want {
		t.Errorf("Sub = %+v, want %+v (a counter going back gives 0)", d, want)
	}
	if k := a.Kernel(); k != 52 {
		t.Errorf("Kernel = %d, want system+irq+softirq 52", k)
	}
	if tot := a.Total(); tot != 70 {
		t.Errorf("Total = %d, want 70", tot)
	}
	if s := d.Add(b); s.User != 10 || s.SoftIRQ != 30 {
		t.Errorf("Add = %+v", s)
	}
}

// TestReadCPUTimes reads this machine's own line: the CPU's time moves on.
func TestReadCPUTimes(t *testing.T) {
	c, err := lastAllowedCPU()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadCPUTimes(c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Total() == 0 {
		t.Errorf("cpu%d: %+v: no time at all", c, got)
	}
}

// TestPinProcess pins this test process (every thread) to one CPU and
// back; it changes nothing outside the process.
func TestPinProcess(t *testing.T) {
	c, err := lastAllowedCPU()
	if err != nil {
		t.Fatal(err)
	}
	before := threadCPUs(t)
	unpin, err := pinProcess(c)
	if err != nil {
		t.Fatal(err)
	}
	for tid, cpus := range threadCPUs(t) {
		if cpus != strconv.Itoa(c) {
			t.Errorf("thread %d while pinned: cpus %q, want %d", tid, cpus, c)
		}
	}
	if err := unpin(); err != nil {
		t.Fatal(err)
	}
	for tid, cpus := range threadCPUs(t) {
		if want, ok := before[tid]; ok && cpus != want {
			t.Errorf("thread %d after unpinning: cpus %q, want %q as before", tid, cpus, want)
		}
	}
	if _, err := pinProcess(maxCPUs); err == nil {
		t.Error("pinning to a CPU the process may not use: no error")
	}
}

// threadCPUs reads each thread's Cpus_allowed_list.
func threadCPUs(t *testing.T) map[int]string {
	t.Helper()
	tids, err := threadIDs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
		if err != nil {
			continue // the thread ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				out[tid] = strings.TrimSpace(v)
			}
		}
	}
	return out
}
