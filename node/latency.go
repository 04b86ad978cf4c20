package node

import (
	"context"
	"math"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// End-to-end network programming latency: for sampled mutations, the time
// from the API write (the trigger time kpsim stamps, the same origin as
// kube-proxy's own metric) until real connections to the Service reach a
// new endpoint, or stop reaching one that was removed or became not ready.
//
// A removed endpoint's pod keeps answering (kpsim never takes the address
// away), so traffic the proxier still sends there is seen, not lost.

const (
	// e2eSamplesPerStep bounds the measured mutations of one churn step.
	e2eSamplesPerStep = 10
	// e2eBatch is how many connections one probe batch makes; the time
	// resolution of a sample is one batch (about 1 ms at 20k conn/s).
	e2eBatch = 16
	// e2eMissProbability is how unlikely it may be that an endpoint still
	// in the rules went unseen by the run of probes that declares it gone.
	e2eMissProbability = 1e-3
	// e2eTimeout gives up on a sample.
	e2eTimeout = 60 * time.Second
	// e2ePause between batches keeps the measurement from starving the
	// proxier it measures of CPU; it is part of the resolution.
	e2ePause = 2 * time.Millisecond
)

type latencyProbe struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	samples []reports.LatencySample
	every   int
	seen    int
	// touched is the last mutation (and when it returned) that changed
	// each endpoint address, so a measurement can tell when a later change
	// superseded it, and a sample is only taken when the proxier had
	// programmed the endpoint's previous state.
	touched map[netip.Addr]touch
}

type touch struct {
	seq int
	at  time.Time
}

func (lp *latencyProbe) lastTouch(a netip.Addr) touch {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.touched[a]
}

// sampleEvery picks every k-th mutation of a churn step so that about
// e2eSamplesPerStep are measured.
func sampleEvery(c *scenarios.ChurnStep) int {
	n := c.Count
	if c.Duration != nil {
		n = int(math.Ceil(c.Rate * c.Duration.Seconds()))
	}
	return max(1, n/e2eSamplesPerStep)
}

// consider starts a measurement for m when it is sampled. It runs on the
// engine's goroutine, so the measurement itself runs on its own.
func (n *node) considerLatency(ctx context.Context, m sim.Mutation) {
	lp := n.latency
	if lp == nil || m.Skipped != "" {
		return
	}
	var prev touch
	lp.mu.Lock()
	if lp.touched == nil {
		lp.touched = map[netip.Addr]touch{}
	}
	for _, set := range [][]netip.Addr{m.Added, m.Removed, m.Changed} {
		for _, a := range set {
			if len(m.Changed) > 0 && a == m.Changed[0] || len(m.Added) > 0 && a == m.Added[0] {
				prev = lp.touched[a]
			}
			lp.touched[a] = touch{seq: m.Seq, at: m.End}
		}
	}
	lp.mu.Unlock()
	lp.seen++
	if (lp.seen-1)%lp.every != 0 {
		return
	}
	model := n.cluster.Snapshot()
	var svc *sim.Service
	for i := range model.Services {
		if model.Services[i].Key() == m.Service {
			svc = &model.Services[i]
		}
	}
	if svc == nil || svc.Headless || len(svc.Ports) == 0 || !svc.ClusterIP.IsValid() {
		return // a deleted Service, or nothing to probe
	}
	// What can be seen: a new endpoint that is ready appearing (scaleUp,
	// the new pod of a rollingUpdate), or a flapped endpoint appearing or
	// disappearing. A removed endpoint is not measured: its state before
	// the change is not in the model any more, and a not-ready one never
	// took traffic, so its "disappearance" would measure nothing.
	var addr netip.Addr
	switch {
	case len(m.Added) > 0:
		addr = m.Added[0]
	case len(m.Changed) > 0 && m.Action == scenarios.ChurnFlap:
		addr = m.Changed[0]
	default:
		return
	}
	appear, found, ready := false, false, 0
	for _, ep := range svc.Endpoints() {
		r, _, _ := ep.Condition.Flags()
		if r {
			ready++
		}
		if ep.IP == addr {
			appear, found = r, true
		}
	}
	if !found || (len(m.Added) > 0 && !appear) {
		return // a new endpoint that is not ready takes no traffic
	}
	// The baseline must be programmed: when the endpoint changed before
	// and no sync has started since, the dataplane may never have held
	// the state this change leaves, and the sample would time nothing.
	if !prev.at.IsZero() {
		synced := false
		for _, sy := range n.proxier.Syncs() {
			if sy.Succeeded && sy.Start.After(prev.at) {
				synced = true
			}
		}
		if !synced {
			return
		}
	}
	// Shares while the endpoint takes traffic: 1/ready after it appears,
	// 1/(ready+1) before it went away. A disappearance needs others left
	// to take the traffic.
	share := 1 / float64(ready)
	if !appear {
		if ready == 0 {
			return
		}
		share = 1 / float64(ready+1)
	}
	port := svc.Ports[0]
	origin := m.TriggerTime
	if origin.IsZero() {
		origin = m.Start
	}
	s := reports.LatencySample{
		Mutation: m.Seq, Action: m.Action, Service: svc.Key(),
		Endpoint: netip.AddrPortFrom(addr, uint16(port.TargetPort)).String(),
		Appear:   appear, Written: origin,
	}
	target := netip.AddrPortFrom(svc.ClusterIP, uint16(port.Port))
	proto := protocol(port.Protocol)
	lp.wg.Add(1)
	go func() {
		defer lp.wg.Done()
		n.measureLatency(ctx, &s, target, proto, share)
		lp.mu.Lock()
		lp.samples = append(lp.samples, s)
		lp.mu.Unlock()
	}()
}

// measureLatency probes target in small batches until the endpoint shows
// up (appear) or has been absent from enough consecutive probes that it
// would have been seen with probability 1-e2eMissProbability if it still
// took its share of the traffic.
func (n *node) measureLatency(ctx context.Context, s *reports.LatencySample, target netip.AddrPort, proto netns.Protocol, share float64) {
	ctx, cancel := context.WithTimeout(ctx, e2eTimeout)
	defer cancel()
	want, _ := netip.ParseAddrPort(s.Endpoint)
	// Absent from k probes in a row: (1-share)^k <= miss probability.
	need := 1
	if share < 1 {
		need = int(math.Ceil(math.Log(e2eMissProbability) / math.Log(1-share)))
	}
	var absentSince time.Time
	absent := 0
	for {
		start := time.Now()
		r, err := n.pods.Probe(ctx, netns.ProbeSpec{From: netns.ClientPod, Target: target, Protocol: proto, Count: e2eBatch, Concurrency: 4, Timeout: time.Second})
		end := time.Now()
		s.Probes += r.Sent
		if err != nil || ctx.Err() != nil {
			s.Error = "gave up after " + e2eTimeout.String()
			if err != nil {
				s.Error = err.Error()
			}
			return
		}
		if t := n.latency.lastTouch(want.Addr()); t.seq != s.Mutation {
			s.Superseded = t.seq
			return
		}
		hit := r.Endpoints[want] != nil && r.Endpoints[want].Count > 0
		switch {
		case s.Appear && hit:
			s.Observed = end
			s.ResolutionSeconds = end.Sub(start).Seconds() + e2ePause.Seconds()
			s.Seconds = end.Sub(s.Written).Seconds()
			return
		case !s.Appear && hit:
			absent, absentSince = 0, time.Time{}
		case !s.Appear:
			if absent == 0 {
				absentSince = start
			}
			absent += r.OK
			if absent >= need {
				s.Observed = absentSince
				s.ResolutionSeconds = end.Sub(start).Seconds() + e2ePause.Seconds()
				s.Seconds = max(0, absentSince.Sub(s.Written).Seconds())
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(e2ePause):
		}
	}
}

// waitLatency waits for the measurements in flight and returns them.
func (lp *latencyProbe) wait() []reports.LatencySample {
	lp.wg.Wait()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	out := lp.samples
	lp.samples = nil
	return out
}

// protocol is the prober's name for a Kubernetes protocol (TCP -> tcp).
func protocol(p corev1.Protocol) netns.Protocol { return netns.Protocol(strings.ToLower(string(p))) }
