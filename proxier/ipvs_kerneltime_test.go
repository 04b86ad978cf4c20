package proxier

import (
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	ipsettest "k8s.io/kubernetes/pkg/proxy/ipvs/ipset/testing"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	ipvstest "k8s.io/kubernetes/pkg/proxy/ipvs/util/testing"
)

// TestTimedIPVSAndIPSet drives the wrappers over upstream's fakes: results
// reach the fakes unchanged, every call is recorded under its kind with
// its duration and error, and SumKernelCalls splits them by kind.
func TestTimedIPVSAndIPSet(t *testing.T) {
	clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), step: time.Millisecond}
	rec := &kernelCalls{}
	fakeIPVS := ipvstest.NewFake()
	fakeIPSet := ipsettest.NewFake("7.17")
	tv := newTimedIPVSClock(fakeIPVS, rec, clk.now)
	ts := newTimedIPSetClock(fakeIPSet, rec, clk.now)

	vs := &utilipvs.VirtualServer{Address: net.ParseIP("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr"}
	rs := &utilipvs.RealServer{Address: net.ParseIP("10.244.0.10"), Port: 8080, Weight: 1}
	if err := tv.AddVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
	if err := tv.AddRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	got, err := tv.GetRealServers(vs)
	if err != nil || len(got) != 1 || !got[0].Equal(rs) {
		t.Fatalf("GetRealServers = %v, %v; want [%v]", got, err, rs)
	}
	missing := &utilipvs.VirtualServer{Address: net.ParseIP("10.96.0.99"), Protocol: "TCP", Port: 80}
	if err := tv.DeleteRealServer(missing, rs); err == nil {
		t.Fatal("DeleteRealServer of a missing server: want the fake's error")
	}

	set := &utilipset.IPSet{Name: "KUBE-CLUSTER-IP", SetType: utilipset.HashIPPort}
	if err := ts.CreateSet(set, true); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddEntry("10.96.0.10,tcp:80", set, true); err != nil {
		t.Fatal(err)
	}
	entries, err := ts.ListEntries(set.Name)
	if err != nil || len(entries) != 1 || entries[0] != "10.96.0.10,tcp:80" {
		t.Fatalf("ListEntries = %v, %v", entries, err)
	}
	if v, err := ts.GetVersion(); v != "7.17" || err != nil {
		t.Fatalf("GetVersion = %q, %v", v, err)
	}

	var methods []string
	for _, c := range rec.snapshot() {
		methods = append(methods, c.Method)
		if c.Duration != time.Millisecond {
			t.Errorf("%s: duration %v, want 1ms", c.Method, c.Duration)
		}
		if (c.Err != "") != (c.Method == "ipvs.DeleteRealServer") {
			t.Errorf("%s: err %q", c.Method, c.Err)
		}
	}
	want := []string{
		"ipvs.AddVirtualServer", "ipvs.AddRealServer", "ipvs.GetRealServers", "ipvs.DeleteRealServer",
		"ipset.CreateSet", "ipset.AddEntry", "ipset.ListEntries", "ipset.GetVersion",
	}
	if d := cmp.Diff(want, methods); d != "" {
		t.Errorf("recorded methods (-want +got):\n%s", d)
	}

	calls := append(rec.snapshot(), KernelCall{Method: "RestoreAll", Start: clk.now(), Duration: 5 * time.Millisecond})
	sums := SumKernelCalls(calls, time.Time{}, time.Time{})
	wantSums := map[string]KernelCallSum{
		KernelKindIPVS:     {Calls: 4, Errors: 1, Duration: 4 * time.Millisecond},
		KernelKindIPSet:    {Calls: 4, Duration: 4 * time.Millisecond},
		KernelKindIPTables: {Calls: 1, Duration: 5 * time.Millisecond},
	}
	if d := cmp.Diff(wantSums, sums); d != "" {
		t.Errorf("SumKernelCalls (-want +got):\n%s", d)
	}
	// A window: only the ipset calls (starts of calls 5..8).
	from, to := calls[4].Start, calls[8].Start
	if d := cmp.Diff(map[string]KernelCallSum{KernelKindIPSet: {Calls: 4, Duration: 4 * time.Millisecond}},
		SumKernelCalls(calls, from, to)); d != "" {
		t.Errorf("SumKernelCalls in a window (-want +got):\n%s", d)
	}

	// No IPVS in the kernel: utilipvs.New() returns nil, and so must the
	// wrapper (ipvs.CanUseIPVSProxier tests for nil).
	if w := newTimedIPVS(nil, rec); w != nil {
		t.Errorf("newTimedIPVS(nil) = %#v, want a nil interface", w)
	}
}
