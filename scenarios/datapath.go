package scenarios

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DataPathStep measures what a new connection costs the node's kernel
// through kube-proxy's rules: for sampled Services, new TCP connections
// from a client pod to each Service's ClusterIP, and as many directly to
// its endpoints' pod IPs, alternated in rounds so that drift falls on
// both. The fake pods and the prober are pinned to one CPU meanwhile; the
// step reports each kind's connection rate, their ratio, and that CPU's
// kernel time (system, irq and softirq from /proc/stat) per connection.
type DataPathStep struct {
	// Group limits the sample to one service group. Default: every group.
	Group string `yaml:"group,omitempty" json:"group,omitempty"`
	// Services is how many Services are sampled, evenly spaced over the
	// candidates (non-headless Services with a TCP port and an endpoint),
	// in creation order. Default 10; all of them when there are fewer.
	Services int `yaml:"services,omitempty" json:"services,omitempty"`
	// Connections is how many new connections each kind makes in all
	// (through the Services, and directly to their endpoints), split
	// evenly over the sampled Services and the rounds. Default 60,000:
	// about 6 s per kind on one CPU of this machine, enough that the
	// kernel time's 10 ms resolution is below 1% of it.
	Connections int `yaml:"connections,omitempty" json:"connections,omitempty"`
	// VMConnections replaces Connections for modes that run in a VM,
	// where software emulation makes each connection about 30 times as
	// slow. Default: Connections.
	VMConnections int `yaml:"vmConnections,omitempty" json:"vmConnections,omitempty"`
	// Rounds is how many times the two kinds alternate on every sampled
	// Service (which goes first alternates too). Default 5.
	Rounds int `yaml:"rounds,omitempty" json:"rounds,omitempty"`
	// Concurrency is how many connections are in flight: a closed loop
	// of that many workers on the pinned CPU, so the rate is connections
	// per second of one CPU. Default 4.
	Concurrency int `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// CPU is the CPU the dataplane process (fake pods' responders and the
	// prober) is pinned to while it measures. Default: the last CPU it may
	// run on.
	CPU *int `yaml:"cpu,omitempty" json:"cpu,omitempty"`
}

// DataPathStep defaults.
const (
	DefaultDataPathServices    = 10
	DefaultDataPathConnections = 60000
	DefaultDataPathRounds      = 5
	DefaultDataPathConcurrency = 4
)

// ConnectionsFor is the step's connections per kind for a node that runs
// in a VM (inVM) or not.
func (d *DataPathStep) ConnectionsFor(inVM bool) int {
	if inVM && d.VMConnections > 0 {
		return d.VMConnections
	}
	return d.Connections
}

func defaultDataPath(st *Step) {
	d := st.DataPath
	if d == nil {
		return
	}
	if d.Services == 0 {
		d.Services = DefaultDataPathServices
	}
	if d.Connections == 0 {
		d.Connections = DefaultDataPathConnections
	}
	if d.Rounds == 0 {
		d.Rounds = DefaultDataPathRounds
	}
	if d.Concurrency == 0 {
		d.Concurrency = DefaultDataPathConcurrency
	}
}

// dataPath validates a datapath step (after Default).
func (v *validator) dataPath(p *field.Path, d *DataPathStep) field.ErrorList {
	var errs field.ErrorList
	if d.Group != "" {
		switch g := v.group(d.Group); {
		case g == nil:
			errs = append(errs, field.NotFound(p.Child("group"), d.Group))
		case g.Headless:
			errs = append(errs, field.Invalid(p.Child("group"), d.Group, "the group's Services are headless: they have no ClusterIP to connect through"))
		case !hasTCPPort(g):
			errs = append(errs, field.Invalid(p.Child("group"), d.Group, "the group's Services have no TCP port: the step makes TCP connections"))
		}
	}
	for _, f := range []struct {
		name string
		v    int
		def  string
	}{
		{"services", d.Services, fmt.Sprint(DefaultDataPathServices)},
		{"connections", d.Connections, fmt.Sprint(DefaultDataPathConnections)},
		{"vmConnections", d.VMConnections, "connections"},
		{"rounds", d.Rounds, fmt.Sprint(DefaultDataPathRounds)},
		{"concurrency", d.Concurrency, fmt.Sprint(DefaultDataPathConcurrency)},
	} {
		if f.v < 0 {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v, "must not be negative (0 takes the default, "+f.def+")"))
		}
	}
	if d.Services > 0 && d.Rounds > 0 {
		least := d.Services * d.Rounds
		for _, f := range []struct {
			name string
			v    int
		}{{"connections", d.Connections}, {"vmConnections", d.VMConnections}} {
			if f.v > 0 && f.v < least {
				errs = append(errs, field.Invalid(p.Child(f.name), f.v,
					fmt.Sprintf("must be at least services x rounds (%d x %d = %d): one connection per kind, Service and round", d.Services, d.Rounds, least)))
			}
		}
	}
	if d.CPU != nil && *d.CPU < 0 {
		errs = append(errs, field.Invalid(p.Child("cpu"), *d.CPU, "must be a CPU number (0 or more)"))
	}
	return errs
}

func hasTCPPort(g *ServiceGroup) bool {
	for _, p := range g.Ports {
		if p.Protocol == "TCP" {
			return true
		}
	}
	return false
}
