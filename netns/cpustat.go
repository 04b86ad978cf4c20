package netns

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// UserHZ is the unit of /proc/stat's CPU times: USER_HZ, 100 on every
// Linux architecture kpsim runs on (x86-64, arm64), whatever the kernel's
// own tick rate (CONFIG_HZ).
const UserHZ = 100

// CPUTimes is one CPU's line of /proc/stat: how long it spent in each
// state since boot, in USER_HZ ticks (1/100 s). Under tick-based
// accounting (CONFIG_TICK_CPU_ACCOUNTING, without
// CONFIG_IRQ_TIME_ACCOUNTING, as on this machine's kernel) each timer
// tick charges its whole length to the state the CPU was in when it
// fired, so short states are counted by sampling: the error of a total is
// about the square root of its ticks.
type CPUTimes struct {
	User    uint64 `json:"user"`
	Nice    uint64 `json:"nice"`
	System  uint64 `json:"system"`
	Idle    uint64 `json:"idle"`
	IOWait  uint64 `json:"iowait"`
	IRQ     uint64 `json:"irq"`
	SoftIRQ uint64 `json:"softirq"`
	Steal   uint64 `json:"steal"`
}

// Kernel is the time spent in the kernel: system, irq and softirq.
func (c CPUTimes) Kernel() uint64 { return c.System + c.IRQ + c.SoftIRQ }

// Total is the time in every state.
func (c CPUTimes) Total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// Sub is c - o, field by field (o read earlier). A counter that went
// backwards (it never should) gives 0.
func (c CPUTimes) Sub(o CPUTimes) CPUTimes {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return CPUTimes{d(c.User, o.User), d(c.Nice, o.Nice), d(c.System, o.System), d(c.Idle, o.Idle),
		d(c.IOWait, o.IOWait), d(c.IRQ, o.IRQ), d(c.SoftIRQ, o.SoftIRQ), d(c.Steal, o.Steal)}
}

// Add is c + o, field by field.
func (c CPUTimes) Add(o CPUTimes) CPUTimes {
	return CPUTimes{c.User + o.User, c.Nice + o.Nice, c.System + o.System, c.Idle + o.Idle,
		c.IOWait + o.IOWait, c.IRQ + o.IRQ, c.SoftIRQ + o.SoftIRQ, c.Steal + o.Steal}
}

// ReadCPUTimes reads CPU cpu's line of /proc/stat (not namespaced: the
// same in every namespace).
func ReadCPUTimes(cpu int) (CPUTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	return ParseProcStat(data, cpu)
}

// ParseProcStat returns CPU cpu's line ("cpuN user nice system idle
// iowait irq softirq steal ...") of /proc/stat text. Kernels before 2.6.11
// print fewer fields; those missing are 0, but the first four are
// required. guest and guest_nice (already counted in user and nice) are
// ignored.
func ParseProcStat(data []byte, cpu int) (CPUTimes, error) {
	want := "cpu" + strconv.Itoa(cpu)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != want {
			continue
		}
		if len(f) < 5 {
			return CPUTimes{}, fmt.Errorf("/proc/stat: line %q: want at least 4 times", sc.Text())
		}
		var v [8]uint64
		for i := 1; i < len(f) && i <= len(v); i++ {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return CPUTimes{}, fmt.Errorf("/proc/stat: %s field %d: %w", want, i, err)
			}
			v[i-1] = n
		}
		return CPUTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
	}
	if err := sc.Err(); err != nil {
		return CPUTimes{}, fmt.Errorf("/proc/stat: %w", err)
	}
	return CPUTimes{}, fmt.Errorf("/proc/stat: no line for %s", want)
}
