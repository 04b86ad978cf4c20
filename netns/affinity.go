package netns

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pinning a whole process to one CPU.
//
// sched_setaffinity acts on one thread; a Go process has many, and new
// ones inherit the mask of the thread that creates them. pinProcess sets
// every thread's mask, again until no new thread appears; a thread the Go
// runtime starts while it is pinned is pinned too, since its creator was.
// The returned function gives every thread its mask back (threads born
// while pinned get the mask the calling thread had), again until no new
// thread appears.

// maxCPUs is how many CPUs a unix.CPUSet holds (glibc's CPU_SETSIZE).
const maxCPUs = int(unsafe.Sizeof(unix.CPUSet{})) * 8

// pinProcess pins every thread of this process to cpu.
func pinProcess(cpu int) (unpin func() error, err error) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	if cpu < 0 || cpu >= maxCPUs || !orig.IsSet(cpu) {
		return nil, fmt.Errorf("cpu %d is not one this process may run on (%s)", cpu, cpuList(orig))
	}
	var one unix.CPUSet
	one.Set(cpu)
	saved := map[int]unix.CPUSet{}
	restore := func() error {
		var errs []error
		done := map[int]bool{}
		for range 10 {
			tids, err := threadIDs()
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			fresh := 0
			for _, tid := range tids {
				if done[tid] {
					continue
				}
				done[tid], fresh = true, fresh+1
				m, ok := saved[tid]
				if !ok {
					m = orig
				}
				if err := unix.SchedSetaffinity(tid, &m); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("thread %d: sched_setaffinity: %w", tid, err))
				}
			}
			if fresh == 0 {
				break
			}
		}
		return errors.Join(errs...)
	}
	for range 10 {
		tids, err := threadIDs()
		if err != nil {
			return nil, errors.Join(err, restore())
		}
		fresh := 0
		for _, tid := range tids {
			if _, ok := saved[tid]; ok {
				continue
			}
			var m unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &m); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread ended
				}
				return nil, errors.Join(fmt.Errorf("thread %d: sched_getaffinity: %w", tid, err), restore())
			}
			saved[tid], fresh = m, fresh+1
			if err := unix.SchedSetaffinity(tid, &one); err != nil && !errors.Is(err, unix.ESRCH) {
				return nil, errors.Join(fmt.Errorf("thread %d: sched_setaffinity to cpu %d: %w", tid, cpu, err), restore())
			}
		}
		if fresh == 0 {
			return restore, nil
		}
	}
	return restore, nil
}

// threadIDs lists this process's threads.
func threadIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// lastAllowedCPU is the highest CPU the calling thread may run on.
func lastAllowedCPU() (int, error) {
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(0, &s); err != nil {
		return 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	for c := maxCPUs - 1; c >= 0; c-- {
		if s.IsSet(c) {
			return c, nil
		}
	}
	return 0, errors.New("sched_getaffinity: no CPU allowed")
}

// cpuList writes a CPU set as "allowed: 0,1,3".
func cpuList(s unix.CPUSet) string {
	out := "allowed:"
	sep := " "
	for c := range maxCPUs {
		if s.IsSet(c) {
			out += sep + strconv.Itoa(c)
			sep = ","
		}
	}
	return out
}
