package reports

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Startup is what kube-proxy's proxier was handed besides Services and
// EndpointSlices, and when, against its syncs. kube-proxy's first sync
// waits for Services and EndpointSlices only: the node's topology labels
// and the ServiceCIDRs reach the proxier through their own handlers and
// may come later, and until a sync after them topology-aware Services
// spread over every zone.
type Startup struct {
	// TopologyLabels are the node's topology labels the proxier was
	// handed; TopologyReceived when (zero: never, as for a node without
	// a zone label).
	TopologyLabels   map[string]string `json:"topologyLabels,omitempty"`
	TopologyReceived time.Time         `json:"topologyReceived,omitempty"`
	// ServiceCIDRs and ServiceCIDRsReceived: the same for the
	// ServiceCIDRs.
	ServiceCIDRs         []string  `json:"serviceCIDRs,omitempty"`
	ServiceCIDRsReceived time.Time `json:"serviceCIDRsReceived,omitempty"`
	// TopologyNotHanded is the Node's topology labels when kube-proxy had
	// not been handed them 20 s into a sync step: the step went on.
	TopologyNotHanded map[string]string `json:"topologyNotHanded,omitempty"`
	// NodeEventsHeld counts the Node events that reached kube-proxy's
	// NodeConfig or NodeTopologyConfig before their handlers were
	// registered (kube-proxy registers them on a running informer: a
	// race that, unheld, loses the node's zone or panics). kpsim held
	// them until the handlers were registered.
	NodeEventsHeld int `json:"nodeEventsHeld,omitempty"`
	// Cleanup is what kube-proxy's startup cleanup (cmd/kube-proxy's
	// platformCleanup) did before the proxier was built.
	Cleanup *LeftoverCleanup `json:"cleanup,omitempty"`
}

// LeftoverCleanup is one run of kube-proxy's cleanup of modes' leftovers.
type LeftoverCleanup struct {
	// Modes whose leftovers upstream's CleanupLeftovers removed.
	Modes []string `json:"modes"`
	// Programs those cleanups run, as PATH resolved them in the node.
	Programs map[string]string `json:"programs,omitempty"`
	// Skipped says what kpsim did not run, and why.
	Skipped string `json:"skipped,omitempty"`
	// Seconds the cleanup took, its programs included (wall clock).
	Seconds float64 `json:"seconds"`
	// Failed: a cleanup reported an error; kube-proxy logs it and goes on.
	Failed bool `json:"failed,omitempty"`
}

// TopologyLate says whether the mode's first successful sync began before
// the proxier had the node's topology labels, and if so how long after
// that sync ended the first sync with them ended (ok false: none did).
func (m *ModeResult) TopologyLate() (late bool, after time.Duration, ok bool) {
	st := m.Startup
	if st == nil || len(st.TopologyLabels) == 0 {
		return false, 0, false
	}
	return m.firstSyncBefore(st.TopologyReceived, 0)
}

// ServiceCIDRsLate is TopologyLate for the ServiceCIDRs, in nftables mode:
// the only mode that programs from them (a rule that drops traffic to
// unallocated ClusterIPs), and its handler queues no sync.
func (m *ModeResult) ServiceCIDRsLate() (late bool, after time.Duration, ok bool) {
	st := m.Startup
	if st == nil || m.Mode != "nftables" || len(st.ServiceCIDRs) == 0 {
		return false, 0, false
	}
	return m.firstSyncBefore(st.ServiceCIDRsReceived, 0)
}

// ServiceCIDRsLateAfter is ServiceCIDRsLate for the nftables kube-proxy a
// restart or migration started (lc.FirstSync.Process), over that
// process's syncs.
func (m *ModeResult) ServiceCIDRsLateAfter(lc *Lifecycle) (late bool, after time.Duration, ok bool) {
	if lc.FirstSync == nil || len(lc.ServiceCIDRs) == 0 {
		return false, 0, false
	}
	return m.firstSyncBefore(lc.ServiceCIDRsReceived, lc.FirstSync.Process)
}

// firstSyncBefore says whether kube-proxy process number process's first
// successful sync began before received, and if so how long after it
// ended the first sync that began after received ended (ok false: none
// did).
func (m *ModeResult) firstSyncBefore(received time.Time, process int) (late bool, after time.Duration, ok bool) {
	if received.IsZero() {
		return false, 0, false
	}
	var first *Sync
	for i := range m.Syncs {
		s := &m.Syncs[i]
		if !s.Succeeded || s.Process != process {
			continue
		}
		if first == nil {
			if !s.Start.Before(received) {
				return false, 0, false
			}
			first = s
			continue
		}
		if s.Start.After(received) {
			return true, s.End.Sub(first.End), true
		}
	}
	return first != nil, 0, false
}

// startupNotes name, per mode, a first sync that ran without the node's
// topology labels or (nftables) the ServiceCIDRs: findings about
// kube-proxy's startup, not about kpsim.
func startupNotes(r *Result) []string {
	var out []string
	for i := range r.Modes {
		m := &r.Modes[i]
		if st := m.Startup; st != nil && len(st.TopologyNotHanded) > 0 {
			out = append(out, fmt.Sprintf("%s: kube-proxy was not handed the node's topology labels (%s) within 20 s of a sync step (NodeTopologyConfig did not call OnTopologyChange): the step went on without them, and topology-aware Services spread over every zone until they came%s.",
				m.Name, labelList(st.TopologyNotHanded), map[bool]string{true: " (they never did in this run)", false: ""}[st.TopologyReceived.IsZero()]))
		}
		if st := m.Startup; st != nil && st.NodeEventsHeld > 0 {
			out = append(out, fmt.Sprintf("%s: %d Node event(s) reached kube-proxy's NodeConfig or NodeTopologyConfig before their handlers were registered (cmd/kube-proxy registers them on the running Node informer). Unheld, kube-proxy would have missed the node's zone for good or panicked (nil *NodeManager); kpsim held the events until the handlers were registered.",
				m.Name, st.NodeEventsHeld))
		}
		if late, after, ok := m.TopologyLate(); late {
			n := fmt.Sprintf("%s: kube-proxy's first sync began before it was handed the node's topology labels (%s), so it programmed topology-aware Services without them; ",
				m.Name, labelList(m.Startup.TopologyLabels))
			if ok {
				n += fmt.Sprintf("its first sync with them ended %s later. kpsim's sync steps wait for that sync.", seconds(after.Seconds()))
			} else {
				n += "no later sync had them."
			}
			out = append(out, n)
		}
		if late, after, ok := m.ServiceCIDRsLate(); late {
			out = append(out, serviceCIDRsLateNote(m.Name+": kube-proxy's", m.Startup.ServiceCIDRs, after, ok))
		}
		for j := range m.Lifecycle {
			lc := &m.Lifecycle[j]
			if late, after, ok := m.ServiceCIDRsLateAfter(lc); late {
				out = append(out, serviceCIDRsLateNote(fmt.Sprintf("%s, step %s: the new kube-proxy's", m.Name, lc.Step), lc.ServiceCIDRs, after, ok))
			}
		}
	}
	return out
}

func labelList(labels map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return strings.Join(kv, ", ")
}

// serviceCIDRsLateNote says that whose first sync came before the
// ServiceCIDRs, and when (ok) a sync with them ended after it.
func serviceCIDRsLateNote(whose string, cidrs []string, after time.Duration, ok bool) string {
	n := fmt.Sprintf("%s first sync began before it was handed the ServiceCIDRs (%s), so it programmed no rule dropping traffic to unallocated ClusterIPs, and OnServiceCIDRsChanged queues no sync: the rule waits for a sync for another reason, at the latest an hour later (FullSyncPeriod); ",
		whose, strings.Join(cidrs, ", "))
	if ok {
		return n + fmt.Sprintf("here one ended %s after the first.", seconds(after.Seconds()))
	}
	return n + "no later sync in this run had them."
}
