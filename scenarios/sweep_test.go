package scenarios

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSweepPoint(t *testing.T) {
	const file = "sweep.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := Load(file, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, count := range []int{100, 2000, 10000, 7} {
		out, s, err := SweepPoint(file, data, count)
		if err != nil {
			t.Fatalf("count %d: %v", count, err)
		}
		if got := s.Spec.ServiceGroups[0].Count; got != count {
			t.Errorf("count %d: group count %d", count, got)
		}
		// Only the count changed: the resized document holds everything
		// else, the sweep and its caps included.
		want := *orig
		want.Spec.ServiceGroups = append([]ServiceGroup(nil), orig.Spec.ServiceGroups...)
		want.Spec.ServiceGroups[0].Count = count
		if diff := cmp.Diff(want, *s); diff != "" {
			t.Errorf("count %d: resized scenario differs beyond the count (-want +got):\n%s", count, diff)
		}
		// The comment explaining the IPVS cap is kept.
		if !strings.Contains(string(out), "software emulation") {
			t.Errorf("count %d: comments lost:\n%s", count, out)
		}
	}
}

func TestSweepPointLiteralsAndMissingCount(t *testing.T) {
	data := []byte(`apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: literal}
spec:
  serviceGroups:
    - {name: web, endpoints: 2}
    - {name: other, count: 3}
  objects:
    - apiVersion: v1
      kind: Service
      metadata: {name: hand-made}
      spec:
        ports: [{port: 80}]
  sweep: {group: web, counts: [1, 4]}
`)
	_, s, err := SweepPoint("literal.yaml", data, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{s.Spec.ServiceGroups[0].Count, s.Spec.ServiceGroups[1].Count}; !cmp.Equal(got, []int{4, 3}) {
		t.Errorf("group counts %v, want [4 3]", got)
	}
	if len(s.Spec.Objects) != 1 || s.Spec.Objects[0].Service == nil || s.Spec.Objects[0].Service.Name != "hand-made" {
		t.Errorf("literal objects not kept: %+v", s.Spec.Objects)
	}
	if _, _, err := SweepPoint("literal.yaml", data, 0); err == nil {
		t.Error("count 0 accepted")
	}
	noSweep := []byte(strings.Replace(string(data), "  sweep: {group: web, counts: [1, 4]}\n", "", 1))
	if _, _, err := SweepPoint("literal.yaml", noSweep, 4); err == nil || !strings.Contains(err.Error(), "no spec.sweep") {
		t.Errorf("a scenario without a sweep: got %v", err)
	}
}

func TestSweepCap(t *testing.T) {
	sw := &Sweep{MaxCount: map[string]int{"ipvs": 1000, "ipvs-nft": 500}}
	for _, tc := range []struct {
		m       ModeSpec
		limit   int
		key     string
		capped  bool
		comment string
	}{
		{ModeSpec{Name: "ipvs", Mode: ModeIPVS}, 1000, "ipvs", true, "by mode"},
		{ModeSpec{Name: "ipvs-nft", Mode: ModeIPVS}, 500, "ipvs-nft", true, "the entry name wins over its mode"},
		{ModeSpec{Name: "nftables", Mode: ModeNFTables}, 0, "", false, "no cap"},
	} {
		limit, key, ok := sw.Cap(tc.m)
		if limit != tc.limit || key != tc.key || ok != tc.capped {
			t.Errorf("%s (%s): got %d %q %v, want %d %q %v", tc.m.Name, tc.comment, limit, key, ok, tc.limit, tc.key, tc.capped)
		}
	}
	if _, _, ok := (*Sweep)(nil).Cap(ModeSpec{Name: "ipvs", Mode: ModeIPVS}); ok {
		t.Error("a nil sweep caps")
	}
}

// TestSweepCapacity checks every count of a sweep is checked against the
// cluster's ranges, and the error names the count and the largest that fits.
func TestSweepCapacity(t *testing.T) {
	data, err := os.ReadFile("sweep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// 10000 x 10 endpoints need a /15; the default /16 holds 6551 x 10.
	small := strings.Replace(string(data), "podCIDR: 10.128.0.0/14", "podCIDR: 10.244.0.0/16", 1)
	_, err = Load("sweep.yaml", []byte(small))
	if err == nil {
		t.Fatal("10000 x 10 endpoints accepted in a /16")
	}
	want := "spec.sweep.counts[5]: Invalid value: 10000: group svc at this size does not fit: spec.cluster.podCIDR 10.244.0.0/16 holds 65519 endpoint addresses, the scenario needs up to 100000: use a /15 or larger prefix; the largest count that fits is 6551"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("got\n%v\nwant it to contain\n%s", err, want)
	}
	if strings.Contains(err.Error(), "counts[4]") {
		t.Errorf("5000 x 10 fits a /16 but was refused: %v", err)
	}
}
