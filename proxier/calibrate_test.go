package proxier

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/proxy"
)

// The table restore's input has the size its op text gives, and its
// deletion removes every chain it declares.
func TestTableRestoreInput(t *testing.T) {
	add, del := tableRestoreInput(tableRestoreServices, tableRestoreEndpoints)
	count := func(s, prefix string) int {
		n := 0
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
		return n
	}
	rules, chains := count(add, "-A "), count(add, ":")
	if rules != 5200 || chains != 2001 || !strings.Contains(tableRestoreShape, "5,200 rules in 2,001 chains") {
		t.Errorf("%d rules in %d chains, the op says %q", rules, chains, tableRestoreShape)
	}
	if f, x := count(del, "-F "), count(del, "-X "); f != chains || x != chains {
		t.Errorf("the deletion flushes %d and deletes %d chains, want %d each", f, x, chains)
	}
	for _, in := range []string{add, del} {
		if !strings.HasPrefix(in, "*nat\n") || !strings.HasSuffix(in, "COMMIT\n") {
			t.Errorf("input not one nat table: %.40q ... %.40q", in, in[len(in)-40:])
		}
	}
}

// The own-work calibration's objects are the shape its op names, and
// upstream's change trackers accept every one of them.
func TestOwnWorkObjects(t *testing.T) {
	svcs, slices := ownWorkObjects(ownWorkServices, ownWorkEndpoints)
	if len(svcs) != ownWorkServices || len(slices) != ownWorkServices {
		t.Fatalf("%d Services and %d slices, want %d each", len(svcs), len(slices), ownWorkServices)
	}
	if want := fmt.Sprintf("%d Services x %d endpoints", ownWorkServices, ownWorkEndpoints); ownWorkShape != want {
		t.Errorf("the op says %q, the objects are %q", ownWorkShape, want)
	}
	svcChanges := proxy.NewServiceChangeTracker(v1.IPv4Protocol, nil, nil)
	epChanges := proxy.NewEndpointsChangeTracker(v1.IPv4Protocol, ownWorkNode, nil, nil)
	ips := map[string]bool{}
	for i, s := range svcs {
		if !svcChanges.Update(nil, s) {
			t.Fatalf("Service %s: the tracker saw no change", s.Name)
		}
		if !epChanges.EndpointSliceUpdate(slices[i], false) {
			t.Fatalf("slice %s: the tracker saw no change", slices[i].Name)
		}
		if n := len(slices[i].Endpoints); n != ownWorkEndpoints {
			t.Errorf("slice %s: %d endpoints", slices[i].Name, n)
		}
		addrs := []string{s.Spec.ClusterIP}
		for _, ep := range slices[i].Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		for _, ip := range addrs {
			if ips[ip] {
				t.Fatalf("address %s used twice", ip)
			}
			ips[ip] = true
		}
	}
	svcMap, epMap := proxy.ServicePortMap{}, proxy.EndpointsMap{}
	svcMap.Update(svcChanges)
	epMap.Update(epChanges)
	if len(svcMap) != ownWorkServices || len(epMap) != ownWorkServices {
		t.Errorf("upstream maps hold %d Service ports and %d endpoint sets, want %d", len(svcMap), len(epMap), ownWorkServices)
	}
	for name, eps := range epMap {
		if len(eps) != ownWorkEndpoints {
			t.Errorf("%s: %d endpoints in upstream's map", name, len(eps))
		}
	}
}
