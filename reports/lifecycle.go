package reports

import "time"

// Lifecycle is what one lifecycle step (restart, tamper, cleanup,
// migrate) measured. Times are the node's clock; durations are wall time
// measured by kpsim around kube-proxy, except FirstSync, which is
// kube-proxy's own histogram.
type Lifecycle struct {
	Step   string `json:"step"`
	Action string `json:"action"`
	// Mode is the mode the step met, as "iptables (legacy)"; To is the
	// mode a migration switched to.
	Mode string `json:"mode"`
	To   string `json:"to,omitempty"`
	// Error says the step failed; the fields hold what was measured
	// before.
	Error string `json:"error,omitempty"`

	// Stop is how kube-proxy was stopped (restart, migrate, cleanup).
	Stop *Stop `json:"stop,omitempty"`
	// Started is when the new kube-proxy's process started; DownSeconds
	// is from the stop until then.
	Started     time.Time `json:"started,omitempty"`
	DownSeconds float64   `json:"downSeconds,omitempty"`
	// MutationsWhileDown are the API changes made while no kube-proxy ran.
	MutationsWhileDown int `json:"mutationsWhileDown,omitempty"`
	// FirstSync is the new kube-proxy's first sync, from its own
	// histogram; FirstSyncEndSeconds is from Started to its end (bounded
	// by polling).
	FirstSync           *Sync   `json:"firstSync,omitempty"`
	FirstSyncEndSeconds float64 `json:"firstSyncEndSeconds,omitempty"`
	// ProgrammedSeconds is from Started until the end of the first sync
	// that programmed the API as it was (every change made while kube-proxy
	// was down included); GapSeconds from the stop until then.
	ProgrammedSeconds float64 `json:"programmedSeconds,omitempty"`
	GapSeconds        float64 `json:"gapSeconds,omitempty"`
	// Startup is the new kube-proxy's startup cleanup of other modes'
	// leftovers.
	Startup *LeftoverCleanup `json:"startup,omitempty"`
	// ServiceCIDRs and ServiceCIDRsReceived: when a new nftables
	// kube-proxy was handed the ServiceCIDRs (ModeResult.Startup's
	// fields for a process started by this step), so that a first sync
	// before them is reported as at a cold start.
	ServiceCIDRs         []string  `json:"serviceCIDRs,omitempty"`
	ServiceCIDRsReceived time.Time `json:"serviceCIDRsReceived,omitzero"`
	// Leftovers name the old mode's state still in the node after a
	// migration (chains, tables, ipsets, IPVS virtual servers, the dummy
	// interface), and LeftoverCounts count it by kind.
	Leftovers      []string       `json:"leftovers,omitempty"`
	LeftoverCounts map[string]int `json:"leftoverCounts,omitempty"`

	// Tamper is what was done to kube-proxy's rules, as commands.
	Tamper []string `json:"tamper,omitempty"`
	// TamperTarget is the Service a deleteService tamper removed.
	TamperTarget string `json:"tamperTarget,omitempty"`
	// Repaired says kube-proxy put its rules back as they were (compared
	// as normalized dumps, polled); RepairSeconds is from the tamper
	// until the first poll that saw them back. Not repaired within
	// RepairTimeoutSeconds is a finding about kube-proxy, not a failure.
	Repaired             bool    `json:"repaired"`
	RepairSeconds        float64 `json:"repairSeconds,omitempty"`
	RepairTimeoutSeconds float64 `json:"repairTimeoutSeconds,omitempty"`
	// RepairedBeforeFirstRead: the rules were back at kpsim's first read
	// after the tamper, so RepairSeconds is that read's end (in a VM a
	// read takes seconds, and IPVS mode syncs every syncPeriod).
	RepairedBeforeFirstRead bool `json:"repairedBeforeFirstRead,omitempty"`
	// RepairSyncs are the syncs kube-proxy began between the tamper and
	// the repair (or the timeout) that had ended by the step's end
	// (a short tail after the repair); RepairFull how many were full. A
	// repair with none was made by a sync still running then.
	RepairSyncs int `json:"repairSyncs,omitempty"`
	RepairFull  int `json:"repairFull,omitempty"`
	// Unrepaired is a sample of the difference left at the timeout.
	Unrepaired string `json:"unrepaired,omitempty"`

	// Cleanup is what kube-proxy --cleanup ran; Remaining counts
	// kube-proxy's state after it (every count must be 0), by kind.
	Cleanup   *LeftoverCleanup `json:"cleanup,omitempty"`
	Remaining map[string]int   `json:"remaining,omitempty"`

	// Watch is the connections sent while the step ran.
	Watch *Watch `json:"watch,omitempty"`
}

// Stop is how a kube-proxy process was stopped.
type Stop struct {
	At       time.Time `json:"at"`
	Signal   string    `json:"signal"`
	Graceful bool      `json:"graceful,omitempty"`
	// Waited is, for a stop during a sync, how long kpsim waited for
	// kube-proxy to run a program that writes rules, and Delay the random
	// delay after it began.
	WaitedSeconds float64 `json:"waitedSeconds,omitempty"`
	DelaySeconds  float64 `json:"delaySeconds,omitempty"`
	// Programs are the programs kube-proxy was running when it was
	// stopped (killed with it), as "name (pid)".
	Programs []string `json:"programs,omitempty"`
	// SyncsBefore is how many syncs the stopped process had completed.
	SyncsBefore int `json:"syncsBefore"`
}

// Watch is a lifecycle step's continuous probes: one connection at a time
// to sampled Services' ClusterIPs, from the client pod.
type Watch struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Services []string  `json:"services"`
	Rate     float64   `json:"rate"`
	// Sent is every connection; OK those answered by an endpoint the API
	// holds at the time; Stale those answered by an endpoint the API no
	// longer holds (a removed pod still answers); Failed the rest.
	Sent   int `json:"sent"`
	OK     int `json:"ok"`
	Stale  int `json:"stale"`
	Failed int `json:"failed"`
	// Failures by kind (timeout, refused, ...).
	Failures map[string]int `json:"failures,omitempty"`
	// StaleTo counts stale answers by Service and endpoint: where
	// connections to removed endpoints went.
	StaleTo map[string]int `json:"staleTo,omitempty"`
	// Phases split the counts by what kube-proxy was doing: "before" the
	// stop, "down", "starting" (the new process until it programmed
	// everything), "after"; a tamper's are "tampered" and "repaired".
	Phases []WatchPhase `json:"phases,omitempty"`
	// Buckets are the counts per BucketSeconds from Start, for charts.
	BucketSeconds float64       `json:"bucketSeconds"`
	Buckets       []WatchBucket `json:"buckets"`
	// Marks are the moments of the step, in seconds from Start: "stop",
	// "start", "first sync", "programmed", "tamper", "repaired".
	Marks []WatchMark `json:"marks,omitempty"`
}

// WatchPhase is the watch's counts within one phase.
type WatchPhase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Sent    int     `json:"sent"`
	OK      int     `json:"ok"`
	Stale   int     `json:"stale"`
	Failed  int     `json:"failed"`
}

// WatchBucket is the watch's counts over one bucket, by send time.
type WatchBucket struct {
	Sent   int `json:"sent"`
	OK     int `json:"ok"`
	Stale  int `json:"stale"`
	Failed int `json:"failed"`
}

// WatchMark is a moment of a lifecycle step.
type WatchMark struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Phase returns the watch's phase called name, or nil.
func (w *Watch) Phase(name string) *WatchPhase {
	if w == nil {
		return nil
	}
	for i := range w.Phases {
		if w.Phases[i].Name == name {
			return &w.Phases[i]
		}
	}
	return nil
}
