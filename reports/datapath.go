package reports

import (
	"math"
	"slices"
)

// DataPathMethod says how a DataPath is measured; the reports print it.
const DataPathMethod = "per datapath step, new TCP connections (socket, connect, the endpoint's reply, reset) from the " +
	"fake client pod to sampled Services' ClusterIPs (through kube-proxy's rules in the node namespace), and as many " +
	"straight to their endpoints' pod IPs (one endpoint per round, in turn), alternated in rounds (which kind goes " +
	"first alternates with the round and the Service) so drift falls on both. Both kinds cross the node namespace's " +
	"netfilter hooks: a direct connection meets kube-proxy's rules too, and in iptables mode walks the whole nat " +
	"KUBE-SERVICES chain without a match, while a Service's connection stops at its own rule. While it measures, " +
	"every thread of the dataplane process (the prober's workers, the fake pods' responders, the Go runtime) is pinned " +
	"to one CPU with sched_setaffinity; veth hands a packet to the receiving side in the sender's softirq, so both " +
	"ends' kernel work and the node's rules run on that CPU. The workers are a closed loop of `concurrency` " +
	"connections in flight, which keeps the CPU busy (busy share in the table): a rate is connections per second " +
	"of one CPU, and the ratio service/direct compares what a connection costs either way, user-space prober and " +
	"responder included. Kernel CPU per connection is that CPU's system + irq + softirq time in /proc/stat (USER_HZ " +
	"ticks of 10 ms, sampled by the kernel's timer tick) over the measured windows, divided by the connections made: " +
	"other work the scheduler put on that CPU counts too, in both kinds alike. The dataplane's kernel CPU per " +
	"connection is the dataplane process's getrusage system time over the windows: the kernel work done in its " +
	"threads' context (the softirqs they ran included, since the kernel charges a tick to the task it interrupts), " +
	"never another process's, but not what ksoftirqd ran for them; where the CPU was the dataplane's alone the two " +
	"agree within a few per cent. Dataplane CPU per connection is its user+system time: exact (the scheduler's " +
	"runtime; only the user/system split is tick-sampled), immune to other processes, and including the Go prober's " +
	"and responders' user time, the same for both kinds. The ratio per CPU-second is direct's dataplane CPU per " +
	"connection over service's: the rate ratio each kind would reach on a CPU of its own. Δ is service minus direct, " +
	"and ± one standard error of it from its spread over the rounds (rounds paired). Before each window of at most 20,000 connections (half of nf_conntrack_max in a small " +
	"VM) the node's conntrack table is flushed, outside the window. The KUBE-SERVICES position of each sampled " +
	"Service (iptables mode) is read from iptables-save at the step's start: kube-proxy v1.37 writes that chain in " +
	"Go map order, so positions are random and change with every full sync; the least-squares slope of the sampled " +
	"Services' dataplane kernel time per connection on their positions is the cost of one rule walked, measured " +
	"within one node. On a machine shared with other work, the " +
	"dataplane's share of the pinned CPU's busy time (in the table) says how much of that CPU the measurement had."

// UserHZ is the unit of CPUTicks: /proc/stat's USER_HZ, 100 on every
// Linux architecture kpsim runs on.
const UserHZ = 100

// CPUTicks is one CPU's /proc/stat times over an interval, in USER_HZ
// ticks.
type CPUTicks struct {
	User    uint64 `json:"user"`
	Nice    uint64 `json:"nice"`
	System  uint64 `json:"system"`
	Idle    uint64 `json:"idle"`
	IOWait  uint64 `json:"iowait"`
	IRQ     uint64 `json:"irq"`
	SoftIRQ uint64 `json:"softirq"`
	Steal   uint64 `json:"steal"`
}

// Kernel is system + irq + softirq.
func (c CPUTicks) Kernel() uint64 { return c.System + c.IRQ + c.SoftIRQ }

// Total is the time in every state.
func (c CPUTicks) Total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// Add sums two intervals.
func (c CPUTicks) Add(o CPUTicks) CPUTicks {
	return CPUTicks{c.User + o.User, c.Nice + o.Nice, c.System + o.System, c.Idle + o.Idle,
		c.IOWait + o.IOWait, c.IRQ + o.IRQ, c.SoftIRQ + o.SoftIRQ, c.Steal + o.Steal}
}

// DataPath is one datapath step in one mode (DataPathMethod).
type DataPath struct {
	Step string `json:"step"`
	// CPU is the CPU the dataplane process was pinned to.
	CPU         int `json:"cpu"`
	Rounds      int `json:"rounds"`
	Concurrency int `json:"concurrency"`
	// ConnectionsPerRound is per kind, Service and round.
	ConnectionsPerRound int `json:"connectionsPerRound"`
	// WindowMax is the most connections between two conntrack flushes.
	WindowMax int `json:"windowMax"`
	// Service and Direct sum each kind over every Service and round.
	Service DataPathKind `json:"service"`
	Direct  DataPathKind `json:"direct"`
	// ByRound sums each kind over the Services, per round.
	ByRound []DataPathRound `json:"byRound"`
	// Services are the sampled Service ports, in the order they ran.
	Services []DataPathService `json:"services"`
	// ChainRules is how many rules iptables' nat KUBE-SERVICES chain held
	// at the step's start (iptables mode only).
	ChainRules int `json:"chainRules,omitempty"`
	// PositionError says why the chain positions are missing.
	PositionError string `json:"positionError,omitempty"`
	// Figures are what the reports print (NewDataPathFigures).
	Figures DataPathFigures `json:"figures"`
}

// DataPathRound is one round's two kinds.
type DataPathRound struct {
	Service DataPathKind `json:"service"`
	Direct  DataPathKind `json:"direct"`
}

// DataPathService is one sampled Service port.
type DataPathService struct {
	// Name is namespace/name:port.
	Name string `json:"name"`
	// Target is its ClusterIP:port; Endpoints how many endpoints may take
	// its connections (the direct connections go to them in turn).
	Target    string `json:"target"`
	Endpoints int    `json:"endpoints"`
	// Position is its rule's place in iptables' nat KUBE-SERVICES at the
	// step's start, from 1 (0: not iptables mode, or not found).
	Position int          `json:"position,omitempty"`
	Service  DataPathKind `json:"service"`
	Direct   DataPathKind `json:"direct"`
	// Stray counts replies from an endpoint the connection may not
	// reach: not one of the Service's (through it), not the one
	// connected to (direct).
	Stray int `json:"stray,omitempty"`
}

// DataPathKind is one kind of connections (through the Service, or
// direct) over some windows.
type DataPathKind struct {
	// Sent connections were made; OK were answered.
	Sent int `json:"sent"`
	OK   int `json:"ok"`
	// Failures by kind (timeout, refused, ...).
	Failures map[string]int `json:"failures,omitempty"`
	// Seconds is the windows' wall time.
	Seconds float64 `json:"seconds"`
	// CPU is the pinned CPU's /proc/stat times over the windows.
	CPU CPUTicks `json:"cpu"`
	// ProcessSeconds is the dataplane process's CPU time (user+system,
	// getrusage) over the windows, ProcessSystemSeconds its system part
	// (a tick-sampled share of the exact total).
	ProcessSeconds       float64 `json:"processSeconds"`
	ProcessSystemSeconds float64 `json:"processSystemSeconds"`
	// Windows is how many windows it took.
	Windows int `json:"windows"`
}

// Add sums o into k.
func (k *DataPathKind) Add(o DataPathKind) {
	k.Sent += o.Sent
	k.OK += o.OK
	for f, n := range o.Failures {
		if k.Failures == nil {
			k.Failures = map[string]int{}
		}
		k.Failures[f] += n
	}
	k.Seconds += o.Seconds
	k.CPU = k.CPU.Add(o.CPU)
	k.ProcessSeconds += o.ProcessSeconds
	k.ProcessSystemSeconds += o.ProcessSystemSeconds
	k.Windows += o.Windows
}

// Rate is connections made per second of the windows.
func (k DataPathKind) Rate() float64 { return ratio(float64(k.Sent), k.Seconds) }

// KernelMicros is the pinned CPU's kernel time per connection, µs.
func (k DataPathKind) KernelMicros() float64 {
	return ratio(float64(k.CPU.Kernel())*1e6/UserHZ, float64(k.Sent))
}

// OwnKernelMicros is the dataplane process's system time per
// connection, µs.
func (k DataPathKind) OwnKernelMicros() float64 {
	return ratio(k.ProcessSystemSeconds*1e6, float64(k.Sent))
}

// ProcessMicros is the dataplane process's CPU time per connection, µs.
func (k DataPathKind) ProcessMicros() float64 { return ratio(k.ProcessSeconds*1e6, float64(k.Sent)) }

// Busy is the share of the pinned CPU's time it was not idle.
func (k DataPathKind) Busy() float64 {
	t := k.CPU.Total()
	return ratio(float64(t-k.CPU.Idle-k.CPU.IOWait), float64(t))
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// DataPathFigures are a DataPath's results: each kind's rate, kernel and
// dataplane CPU per connection, and service against direct.
type DataPathFigures struct {
	// Connections is how many each kind made.
	Connections int `json:"connections"`
	// Connections per second, each kind, and service/direct with one
	// standard error from the rounds' ratios.
	ServiceRate float64 `json:"serviceRate"`
	DirectRate  float64 `json:"directRate"`
	RateRatio   float64 `json:"rateRatio"`
	RateRatioSE float64 `json:"rateRatioSE"`
	// CPURateRatio is the same ratio per second of the dataplane's own
	// CPU time (direct's dataplane µs per connection over service's): the
	// rates each kind would reach on a CPU of its own, whatever else ran.
	CPURateRatio   float64 `json:"cpuRateRatio"`
	CPURateRatioSE float64 `json:"cpuRateRatioSE"`
	// Kernel time of the pinned CPU per connection, µs, each kind, and
	// service minus direct with one standard error (rounds paired).
	ServiceKernelMicros float64 `json:"serviceKernelMicros"`
	DirectKernelMicros  float64 `json:"directKernelMicros"`
	KernelDeltaMicros   float64 `json:"kernelDeltaMicros"`
	KernelDeltaSE       float64 `json:"kernelDeltaSE"`
	// The dataplane process's system time per connection, µs (its
	// getrusage system share: the kernel work done in its threads'
	// context, softirqs they ran included; other processes never count),
	// likewise.
	ServiceOwnKernelMicros float64 `json:"serviceOwnKernelMicros"`
	DirectOwnKernelMicros  float64 `json:"directOwnKernelMicros"`
	OwnKernelDeltaMicros   float64 `json:"ownKernelDeltaMicros"`
	OwnKernelDeltaSE       float64 `json:"ownKernelDeltaSE"`
	// The dataplane process's CPU time per connection, µs, likewise.
	ServiceProcessMicros float64 `json:"serviceProcessMicros"`
	DirectProcessMicros  float64 `json:"directProcessMicros"`
	ProcessDeltaMicros   float64 `json:"processDeltaMicros"`
	ProcessDeltaSE       float64 `json:"processDeltaSE"`
	// KernelResolutionMicros is one tick of /proc/stat per window, per
	// connection: the rounding of one kind's kernel time.
	KernelResolutionMicros float64 `json:"kernelResolutionMicros"`
	// Busy is the pinned CPU's busy share over both kinds' windows, and
	// DataplaneShare the dataplane process's share of that busy time
	// (its CPU time, all of it on that CPU, over the CPU's non-idle
	// ticks): below 1, other work ran on the CPU and counts in the kernel
	// time and slows the rates.
	Busy           float64 `json:"busy"`
	DataplaneShare float64 `json:"dataplaneShare"`
	// Failed counts unanswered connections, both kinds; Stray replies
	// from an endpoint a connection may not reach.
	Failed int `json:"failed,omitempty"`
	Stray  int `json:"stray,omitempty"`
	// MeanPosition is the sampled Services' mean place in iptables' nat
	// KUBE-SERVICES (ChainRules long); 0 outside iptables mode.
	MeanPosition float64 `json:"meanPosition,omitempty"`
	ChainRules   int     `json:"chainRules,omitempty"`
	// NanosPerRule is what each KUBE-SERVICES rule walked costs a new
	// connection in kernel time, ns: the least-squares slope of the
	// sampled Services' dataplane kernel µs per connection (through
	// them) on their positions, within this one node; NanosPerRuleSE its
	// standard error. 0 without three Services at distinct positions.
	NanosPerRule   float64 `json:"nanosPerRule,omitempty"`
	NanosPerRuleSE float64 `json:"nanosPerRuleSE,omitempty"`
}

// NewDataPathFigures computes a DataPath's figures from its sums: each
// point estimate from the totals, each standard error from the spread
// of the per-round values (0 with fewer than two rounds).
func NewDataPathFigures(dp *DataPath) DataPathFigures {
	s, d := dp.Service, dp.Direct
	f := DataPathFigures{
		Connections: s.Sent,
		ServiceRate: s.Rate(), DirectRate: d.Rate(),
		ServiceKernelMicros: s.KernelMicros(), DirectKernelMicros: d.KernelMicros(),
		ServiceOwnKernelMicros: s.OwnKernelMicros(), DirectOwnKernelMicros: d.OwnKernelMicros(),
		ServiceProcessMicros: s.ProcessMicros(), DirectProcessMicros: d.ProcessMicros(),
		Failed:     s.Sent - s.OK + d.Sent - d.OK,
		ChainRules: dp.ChainRules,
	}
	f.RateRatio = ratio(f.ServiceRate, f.DirectRate)
	f.KernelDeltaMicros = f.ServiceKernelMicros - f.DirectKernelMicros
	f.ProcessDeltaMicros = f.ServiceProcessMicros - f.DirectProcessMicros
	f.OwnKernelDeltaMicros = f.ServiceOwnKernelMicros - f.DirectOwnKernelMicros
	f.CPURateRatio = ratio(f.DirectProcessMicros, f.ServiceProcessMicros)
	var both DataPathKind
	both.Add(s)
	both.Add(d)
	f.Busy = both.Busy()
	f.DataplaneShare = ratio(both.ProcessSeconds, float64(both.CPU.Total()-both.CPU.Idle-both.CPU.IOWait)/UserHZ)
	if s.Sent > 0 {
		f.KernelResolutionMicros = float64(s.Windows) * 1e6 / UserHZ / float64(s.Sent)
	}
	var ratios, cpuRatios, kernel, own, process []float64
	for _, r := range dp.ByRound {
		if r.Service.Sent == 0 || r.Direct.Sent == 0 {
			continue
		}
		ratios = append(ratios, ratio(r.Service.Rate(), r.Direct.Rate()))
		cpuRatios = append(cpuRatios, ratio(r.Direct.ProcessMicros(), r.Service.ProcessMicros()))
		kernel = append(kernel, r.Service.KernelMicros()-r.Direct.KernelMicros())
		own = append(own, r.Service.OwnKernelMicros()-r.Direct.OwnKernelMicros())
		process = append(process, r.Service.ProcessMicros()-r.Direct.ProcessMicros())
	}
	f.RateRatioSE, f.CPURateRatioSE = standardError(ratios), standardError(cpuRatios)
	f.KernelDeltaSE, f.OwnKernelDeltaSE, f.ProcessDeltaSE = standardError(kernel), standardError(own), standardError(process)
	var pos, cost []float64
	for _, sv := range dp.Services {
		f.Stray += sv.Stray
		if sv.Position > 0 && sv.Service.Sent > 0 {
			pos = append(pos, float64(sv.Position))
			cost = append(cost, sv.Service.OwnKernelMicros())
		}
	}
	if len(pos) > 0 {
		f.MeanPosition = mean(pos)
	}
	if slope, se, ok := leastSquaresSlope(pos, cost); ok {
		f.NanosPerRule, f.NanosPerRuleSE = slope*1e3, se*1e3
	}
	return f
}

// leastSquaresSlope fits y = a + b x by ordinary least squares and
// returns b and its standard error; ok is false with fewer than three
// points or no spread in x.
func leastSquaresSlope(xs, ys []float64) (b, se float64, ok bool) {
	n := len(xs)
	if n < 3 || len(ys) != n {
		return 0, 0, false
	}
	mx, my := mean(xs), mean(ys)
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	a := my - b*mx
	var ssr float64
	for i := range xs {
		r := ys[i] - a - b*xs[i]
		ssr += r * r
	}
	return b, math.Sqrt(ssr / float64(n-2) / sxx), true
}

// standardError is the sample standard deviation of xs over the square
// root of their number: the standard error of their mean; 0 for fewer
// than two.
func standardError(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// LastDataPath is the mode's last datapath step, or nil.
func (m *ModeResult) LastDataPath() *DataPath {
	if len(m.DataPaths) == 0 {
		return nil
	}
	return &m.DataPaths[len(m.DataPaths)-1]
}

// hasDataPath says whether any mode ran a datapath step.
func hasDataPath(r *Result) bool {
	return slices.ContainsFunc(r.Modes, func(m ModeResult) bool { return len(m.DataPaths) > 0 })
}
