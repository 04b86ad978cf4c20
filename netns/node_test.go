package netns

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestNodeConfigDefaultsAndValidation(t *testing.T) {
	c := NodeConfig{}.withDefaults()
	if !strings.HasPrefix(c.RunID, Prefix) || len(c.RunID) != len(Prefix)+8 {
		t.Errorf("run id %q, want kpsim- and 8 hex digits", c.RunID)
	}
	if c.NodeIP != DefaultNodeIP || c.ExternalClientIP != DefaultExternalClientIP {
		t.Errorf("defaults = %v %v", c.NodeIP, c.ExternalClientIP)
	}
	if err := c.validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	if gw := c.gatewayIP(); gw != netip.MustParseAddr("172.18.0.1") {
		t.Errorf("gateway = %s", gw)
	}
	if gw := (NodeConfig{NodeIP: netip.MustParsePrefix("10.0.0.1/24")}).gatewayIP(); gw != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("gateway next to a .1 node = %s, want 10.0.0.2", gw)
	}
	bad := NodeConfig{
		NodeIP:           netip.MustParsePrefix("172.18.0.2/32"),
		ExternalClientIP: netip.MustParseAddr("fd00::1"),
		ExternalRoutes:   []netip.Prefix{netip.MustParsePrefix("fd00::/64")},
	}.withDefaults()
	err := bad.validate()
	for _, want := range []string{"at most /30", "externalClientIP fd00::1", "externalRoutes[0]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate error %v lacks %q", err, want)
		}
	}
}

func TestStartNodeUnregistered(t *testing.T) {
	_, err := StartNode(context.Background(), NodeOptions{Name: "no-such-main"})
	if err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("StartNode with an unregistered main: %v", err)
	}
}

func TestRegisterNodeMainDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	RegisterNodeMain(fixtureNodeMain, runFixtureNode)
}

func TestEventQueueOrderAndClose(t *testing.T) {
	q := NewEventQueue()
	for i := range 1000 { // more than any channel buffer: push never blocks
		q.Push(Event{Kind: strings.Repeat("x", i%3+1)})
	}
	q.Close()
	n := 0
	for {
		ev, ok := q.Pop()
		if !ok {
			break
		}
		if want := strings.Repeat("x", n%3+1); ev.Kind != want {
			t.Fatalf("event %d = %q, want %q", n, ev.Kind, want)
		}
		n++
	}
	if n != 1000 {
		t.Errorf("popped %d events, want 1000", n)
	}
	done := make(chan struct{})
	go func() {
		q2 := NewEventQueue()
		go func() { time.Sleep(10 * time.Millisecond); q2.Close() }()
		if _, ok := q2.Pop(); ok {
			t.Error("pop on a closed empty queue returned an event")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("pop did not return after close")
	}
}

func TestSysctlPath(t *testing.T) {
	for in, want := range map[string]string{
		"net/ipv4/ip_forward":                 "/proc/sys/net/ipv4/ip_forward",
		"net.ipv4.ip_forward":                 "/proc/sys/net/ipv4/ip_forward",
		"/net/ipv4/conf/eth0.100/rp_filter":   "/proc/sys/net/ipv4/conf/eth0.100/rp_filter",
		"net/ipv4/conf/kpsim-node0/rp_filter": "/proc/sys/net/ipv4/conf/kpsim-node0/rp_filter",
	} {
		if got, err := sysctlPath(in); err != nil || got != want {
			t.Errorf("sysctlPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := sysctlPath("../../etc/passwd"); err == nil {
		t.Error("sysctlPath escaped /proc/sys")
	}
}

// Outside a node process the namespace primitives must refuse to act.
func TestNotInNode(t *testing.T) {
	if currentNode != nil {
		t.Fatal("test process believes it is a node")
	}
	var e NodeEnv
	if _, err := e.NewPodNetwork(PodNetworkConfig{}); err != errNotNode {
		t.Errorf("NewPodNetwork outside a node: %v, want errNotNode", err)
	}
	if err := e.FlushConntrack(); err != errNotNode {
		t.Errorf("FlushConntrack outside a node: %v, want errNotNode", err)
	}
	if err := e.Do(0, func() error { return nil }); err != errNotNode {
		t.Errorf("Do outside a node: %v, want errNotNode", err)
	}
}
