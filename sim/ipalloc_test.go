package sim

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIPAllocator(t *testing.T) {
	a, err := NewIPAllocator("pod CIDR", netip.MustParsePrefix("10.0.0.0/29"), 3)
	if err != nil {
		t.Fatal(err)
	}
	// /29: .0 network, .7 broadcast, .1 and .2 skipped -> .3 .4 .5 .6.
	if got, want := a.Capacity(), 4; got != want {
		t.Fatalf("Capacity() = %d, want %d", got, want)
	}
	var got []string
	for range 4 {
		ip, err := a.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
	}
	if diff := cmp.Diff([]string{"10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}, got); diff != "" {
		t.Errorf("allocation order (-want +got):\n%s", diff)
	}
	if _, err := a.Allocate(); err == nil || !strings.Contains(err.Error(), "10.0.0.0/29 exhausted") {
		t.Errorf("Allocate() on a full range: err = %v, want exhausted error", err)
	}
	if err := a.Release(netip.MustParseAddr("10.0.0.4")); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(netip.MustParseAddr("10.0.0.4")); err == nil {
		t.Error("double Release succeeded")
	}
	if ip, _ := a.Allocate(); ip.String() != "10.0.0.4" {
		t.Errorf("Allocate() after release = %s, want 10.0.0.4", ip)
	}
	for _, tc := range []struct{ addr, wantErr string }{
		{"10.0.0.5", "already in use"},
		{"10.0.0.1", "reserved"},
		{"10.0.0.7", "reserved"},
		{"10.0.1.1", "outside"},
	} {
		if err := a.Reserve(netip.MustParseAddr(tc.addr)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Reserve(%s): err = %v, want %q", tc.addr, err, tc.wantErr)
		}
	}
	if !a.Contains(netip.MustParseAddr("10.0.0.1")) || a.Contains(netip.MustParseAddr("10.0.0.8")) {
		t.Error("Contains is wrong")
	}
}

func TestIPAllocatorReusesOnlyAfterWrap(t *testing.T) {
	a, _ := NewIPAllocator("pod CIDR", netip.MustParsePrefix("10.0.0.0/24"), 0)
	first, _ := a.Allocate()
	_ = a.Release(first)
	second, _ := a.Allocate()
	if first == second {
		t.Errorf("released %s was handed out again at once; a replacement pod should get a new address", first)
	}
}

func TestPortAllocator(t *testing.T) {
	p := NewPortAllocator("NodePort range", 30000, 30002)
	for _, want := range []int32{30000, 30001, 30002} {
		if got, err := p.Allocate(); err != nil || got != want {
			t.Fatalf("Allocate() = %d, %v; want %d", got, err, want)
		}
	}
	if _, err := p.Allocate(); err == nil || !strings.Contains(err.Error(), "30000-30002 exhausted") {
		t.Errorf("err = %v, want exhausted", err)
	}
	if err := p.Reserve(29999); err == nil {
		t.Error("Reserve outside the range succeeded")
	}
}
