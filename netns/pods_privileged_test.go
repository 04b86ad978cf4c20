package netns

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

const churnNodeMain = "test-churn"

type churnStep struct {
	Name       string                  `json:"name"`
	Namespaces int                     `json:"namespaces"`
	Routes     []string                `json:"routes"`
	Probes     map[string]*ProbeResult `json:"probes"`
	Err        string                  `json:"err,omitempty"`
}

type churnOutput struct {
	Steps    []churnStep `json:"steps"`
	SCTP     bool        `json:"sctp"`
	SCTPErr  string      `json:"sctpErr,omitempty"`
	DupErr   string      `json:"dupErr"`
	AbsErr   string      `json:"absErr"`
	ExtNoLB  *ProbeResult
	ExtToPod *ProbeResult
}

// runChurnNode adds and removes endpoints and records, after every step,
// the namespaces, the node's routes to them and a TCP probe of each address.
func runChurnNode(ctx context.Context, env *NodeEnv) error {
	pn, err := env.NewPodNetwork(PodNetworkConfig{Ports: []Port{{TCP, 8080}, {UDP, 5353}, {SCTP, 9999}}, AddressesPerNamespace: 4})
	if err != nil {
		return err
	}
	all := addrs("10.244.0.0", "10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6", "10.244.0.7")
	var out churnOutput
	record := func(name string, err error) {
		s := churnStep{Name: name, Namespaces: pn.Namespaces(), Probes: map[string]*ProbeResult{}}
		if err != nil {
			s.Err = err.Error()
		}
		for _, p := range pn.pods {
			for _, r := range p.routes {
				s.Routes = append(s.Routes, fmt.Sprintf("%s kpv%d", r, p.idx))
			}
		}
		for _, a := range all {
			r, err := pn.Probe(ctx, ProbeSpec{From: ClientPod, Target: netip.AddrPortFrom(a, 8080), Protocol: TCP, Count: 3, Timeout: 300e6})
			if err != nil {
				s.Err += err.Error()
			}
			s.Probes[a.String()] = &r
		}
		out.Steps = append(out.Steps, s)
	}
	record("add .0-.5", pn.AddEndpoints(all[:6]))
	record("add .6 .7", pn.AddEndpoints(all[6:]))
	record("remove .1", pn.RemoveEndpoints(all[1:2]))
	record("remove .4-.7", pn.RemoveEndpoints(all[4:]))
	if err := pn.AddEndpoints(all[:1]); err != nil {
		out.DupErr = err.Error()
	}
	if err := pn.RemoveEndpoints(all[1:2]); err != nil {
		out.AbsErr = err.Error()
	}
	out.SCTP = pn.SCTPSupported()
	if _, err := pn.Probe(ctx, ProbeSpec{From: ClientPod, Target: netip.AddrPortFrom(all[0], 9999), Protocol: SCTP, Count: 1}); err != nil {
		out.SCTPErr = err.Error()
	}
	// The external router routes nothing but the node subnet by default.
	r, err := pn.Probe(ctx, ProbeSpec{From: ClientExternal, Target: netip.AddrPortFrom(all[0], 8080), Protocol: TCP, Count: 2, Timeout: 300e6})
	if err != nil {
		return err
	}
	out.ExtToPod = &r
	return env.SetResult(out)
}

func TestPrivilegedChurn(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	p, err := StartNode(ctx, NodeOptions{Name: churnNodeMain})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var out churnOutput
	if err := res.Decode(&out); err != nil {
		t.Fatal(err)
	}
	type want struct {
		namespaces int
		routes     []string
		reachable  string // addresses that must answer, by last octet
	}
	wants := []want{
		{2, []string{"10.244.0.0/30", "10.244.0.4/31"}, "012345"},
		{2, []string{"10.244.0.0/30", "10.244.0.4/30"}, "01234567"},
		{2, []string{"10.244.0.0/32", "10.244.0.2/31", "10.244.0.4/30"}, "0234567"},
		{1, []string{"10.244.0.0/32", "10.244.0.2/31"}, "023"},
	}
	if len(out.Steps) != len(wants) {
		t.Fatalf("%d steps, want %d", len(out.Steps), len(wants))
	}
	for i, s := range out.Steps {
		w := wants[i]
		if s.Err != "" {
			t.Errorf("%s: %s", s.Name, s.Err)
		}
		if s.Namespaces != w.namespaces {
			t.Errorf("%s: %d namespaces, want %d", s.Name, s.Namespaces, w.namespaces)
		}
		var routes []string
		for _, r := range s.Routes {
			routes = append(routes, strings.Fields(r)[0])
		}
		if strings.Join(slices.Sorted(slices.Values(routes)), " ") != strings.Join(w.routes, " ") {
			t.Errorf("%s: node routes %v, want %v", s.Name, s.Routes, w.routes)
		}
		for a, r := range s.Probes {
			last := a[strings.LastIndexByte(a, '.')+1:]
			if strings.Contains(w.reachable, last) {
				if r.OK != r.Spec.Count || r.Endpoints[netip.AddrPortFrom(netip.MustParseAddr(a), 8080)] == nil {
					t.Errorf("%s: %s not answering: %+v", s.Name, a, r)
				}
			} else if r.OK != 0 || r.Failures[FailUnreachable]+r.Failures[FailTimeout] != r.Spec.Count {
				// The node's unreachable PodCIDR route answers at once
				// within the kernel's global ICMP error budget, then
				// packets are dropped: unreachable or timeout.
				t.Errorf("%s: removed or absent %s: answered %d, failures %v", s.Name, a, r.OK, r.Failures)
			}
		}
	}
	if !strings.Contains(out.DupErr, "already an endpoint") {
		t.Errorf("adding an existing endpoint: %q", out.DupErr)
	}
	if !strings.Contains(out.AbsErr, "not an endpoint") {
		t.Errorf("removing an absent endpoint: %q", out.AbsErr)
	}
	if !out.SCTP {
		if !strings.Contains(out.SCTPErr, "no SCTP") {
			t.Errorf("SCTP probe without kernel SCTP: %q", out.SCTPErr)
		}
		t.Log("kernel has no SCTP sockets: SCTP responders skipped")
	}
	if out.ExtToPod.OK != 0 || out.ExtToPod.Failures[FailUnreachable] == 0 {
		t.Errorf("external client reached a pod IP without a route: %+v", out.ExtToPod)
	}
}
