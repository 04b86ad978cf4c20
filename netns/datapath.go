package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// A data-path measurement: what a new connection costs the node's kernel
// through kube-proxy's rules, against one made straight to a pod.
//
// The whole dataplane process (prober workers, the fake pods' responders,
// the Go runtime's threads) is pinned to one CPU while it runs, so a
// connection's kernel work (the client's socket, the node namespace's
// netfilter hooks, where kube-proxy's rules run, forwarding, the pod's
// socket) runs there: veth hands a packet to the receiving side in the
// sending thread's softirq, on its CPU. The workers make connections in
// a closed loop (Concurrency in flight), which keeps that CPU busy: the
// rate is then connections per second of one CPU, the inverse of what a
// connection costs.
//
// Each run of connections is measured in windows of at most the prober's
// conntrack batch (min(20,000, nf_conntrack_max/2): conntrackDefault; a
// window's entries live 10 s after each connection's reset). Before a
// window the node namespace's conntrack table is flushed, outside the
// window, so every window starts with an empty table (equal lookups, and
// no new connection meets an old entry of a reused source port). Around a
// window the pinned CPU's line of /proc/stat and the process's getrusage
// are read.

// DataPathSpec is one round of a data-path measurement: for each target in
// order, Connections through its Service address and as many straight to
// its Direct endpoint, in an order that alternates with the target's index
// and the round.
type DataPathSpec struct {
	Targets []DataPathTarget `json:"targets"`
	// Connections per target and kind.
	Connections int `json:"connections"`
	// Concurrency is how many connections are in flight; default 4.
	Concurrency int `json:"concurrency,omitempty"`
	// Timeout per connection; default 2 s.
	Timeout time.Duration `json:"timeout,omitempty"`
	// CPU the dataplane process is pinned to; negative: the last CPU it
	// may run on.
	CPU int `json:"cpu"`
	// Round numbers the round: target j's direct connections go first when
	// Round+j is odd.
	Round int `json:"round"`
}

// DataPathTarget is one sampled Service port: its ClusterIP:port, and the
// endpoint pod IP:targetPort this round's direct connections go to.
type DataPathTarget struct {
	Service netip.AddrPort `json:"service"`
	Direct  netip.AddrPort `json:"direct"`
}

// DataPathRun is what one kind of connections to one target measured in
// one round.
type DataPathRun struct {
	Target netip.AddrPort `json:"target"`
	Sent   int            `json:"sent"`
	OK     int            `json:"ok"`
	// Failures by kind, and the first error message of each kind.
	Failures      map[FailureKind]int    `json:"failures,omitempty"`
	FailureSample map[FailureKind]string `json:"failureSample,omitempty"`
	// Endpoints counts replies by the endpoint that answered.
	Endpoints map[netip.AddrPort]int `json:"endpoints"`
	// Seconds is the wall time of the windows.
	Seconds float64 `json:"seconds"`
	// CPU is the pinned CPU's /proc/stat times over the windows.
	CPU CPUTimes `json:"cpu"`
	// ProcessSeconds is the dataplane process's CPU time (user+system,
	// getrusage) over the windows; ProcessSystemSeconds its system part.
	// The total is exact (the scheduler's runtime); the split between user
	// and system is the kernel's tick-sampled proportion.
	ProcessSeconds       float64 `json:"processSeconds"`
	ProcessSystemSeconds float64 `json:"processSystemSeconds"`
	// Windows is how many windows the run took (a conntrack flush before
	// each).
	Windows int `json:"windows"`
	// First: this kind went first on its target this round.
	First bool `json:"first,omitempty"`
}

// DataPathResult is one round's runs, Service[j] and Direct[j] for
// target j.
type DataPathResult struct {
	// CPU is the CPU the process was pinned to.
	CPU     int           `json:"cpu"`
	Service []DataPathRun `json:"service"`
	Direct  []DataPathRun `json:"direct"`
	// WindowMax is the largest window, in connections.
	WindowMax int `json:"windowMax"`
}

// DataPath runs one round of a data-path measurement from the client pod,
// pinned to spec.CPU. Failed connections are counted, not errors.
func (pn *PodNetwork) DataPath(ctx context.Context, spec DataPathSpec) (DataPathResult, error) {
	if spec.Concurrency <= 0 {
		spec.Concurrency = 4
	}
	if spec.Timeout <= 0 {
		spec.Timeout = 2 * time.Second
	}
	res := DataPathResult{CPU: spec.CPU, WindowMax: pn.conntrackDefault()}
	if spec.Connections <= 0 || len(spec.Targets) == 0 {
		return res, fmt.Errorf("data path: %d targets, %d connections each: nothing to measure", len(spec.Targets), spec.Connections)
	}
	if res.CPU < 0 {
		c, err := lastAllowedCPU()
		if err != nil {
			return res, fmt.Errorf("data path: %w", err)
		}
		res.CPU = c
	}
	// Fail before pinning when the CPU's line cannot be read.
	if _, err := ReadCPUTimes(res.CPU); err != nil {
		return res, fmt.Errorf("data path: %w", err)
	}
	unpin, err := pinProcess(res.CPU)
	if err != nil {
		return res, fmt.Errorf("data path: pinning the dataplane process: %w", err)
	}
	err = pn.dataPathRound(ctx, spec, &res)
	// Leave no entries behind for later probes' conntrack budget.
	err = errors.Join(err, pn.flushConntrack())
	if uerr := unpin(); uerr != nil {
		err = errors.Join(err, fmt.Errorf("data path: unpinning the dataplane process: %w", uerr))
	}
	return res, err
}

func (pn *PodNetwork) dataPathRound(ctx context.Context, spec DataPathSpec, res *DataPathResult) error {
	for j, t := range spec.Targets {
		directFirst := (spec.Round+j)%2 == 1
		kinds := []struct {
			target netip.AddrPort
			out    *[]DataPathRun
			first  bool
		}{{t.Service, &res.Service, !directFirst}, {t.Direct, &res.Direct, directFirst}}
		if directFirst {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		for _, k := range kinds {
			r, err := pn.dataPathRun(ctx, k.target, spec, res.CPU, res.WindowMax)
			r.First = k.first
			*k.out = append(*k.out, r)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// dataPathRun makes spec.Connections connections to target in windows of
// at most windowMax, the conntrack table flushed before each.
func (pn *PodNetwork) dataPathRun(ctx context.Context, target netip.AddrPort, spec DataPathSpec, cpu, windowMax int) (DataPathRun, error) {
	run := DataPathRun{Target: target, Endpoints: map[netip.AddrPort]int{}}
	for done := 0; done < spec.Connections; {
		if err := ctx.Err(); err != nil {
			return run, err
		}
		n := min(spec.Connections-done, windowMax)
		if err := pn.flushConntrack(); err != nil {
			return run, fmt.Errorf("data path: %w", err)
		}
		before, err := sampleUsage(cpu)
		if err != nil {
			return run, fmt.Errorf("data path: %w", err)
		}
		r, perr := pn.Probe(ctx, ProbeSpec{From: ClientPod, Target: target, Protocol: TCP, Count: n,
			Concurrency: spec.Concurrency, Timeout: spec.Timeout, ConntrackBatch: -1})
		after, err := sampleUsage(cpu)
		if perr != nil {
			return run, fmt.Errorf("data path: %w", perr)
		}
		if err != nil {
			return run, fmt.Errorf("data path: %w", err)
		}
		run.add(r, after.sub(before))
		done += n
	}
	return run, nil
}

func (run *DataPathRun) add(r ProbeResult, u usageSample) {
	run.Windows++
	run.Sent += r.Sent
	run.OK += r.OK
	for k, v := range r.Failures {
		if run.Failures == nil {
			run.Failures, run.FailureSample = map[FailureKind]int{}, map[FailureKind]string{}
		}
		run.Failures[k] += v
		if _, ok := run.FailureSample[k]; !ok {
			run.FailureSample[k] = r.FailureSample[k]
		}
	}
	for ep, t := range r.Endpoints {
		run.Endpoints[ep] += t.Count
	}
	run.Seconds += u.wall.Seconds()
	run.CPU = run.CPU.Add(u.cpu)
	run.ProcessSeconds += u.user + u.system
	run.ProcessSystemSeconds += u.system
}

// usageSample is a reading of the clock, the pinned CPU's /proc/stat line
// and the process's getrusage; sub makes it a difference.
type usageSample struct {
	at           time.Time
	wall         time.Duration
	cpu          CPUTimes
	user, system float64
}

func sampleUsage(cpu int) (usageSample, error) {
	s := usageSample{at: time.Now()}
	var err error
	if s.cpu, err = ReadCPUTimes(cpu); err != nil {
		return s, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, fmt.Errorf("getrusage: %w", err)
	}
	s.user, s.system = timevalSeconds(ru.Utime), timevalSeconds(ru.Stime)
	return s, nil
}

func (s usageSample) sub(o usageSample) usageSample {
	return usageSample{wall: s.at.Sub(o.at), cpu: s.cpu.Sub(o.cpu), user: s.user - o.user, system: s.system - o.system}
}
