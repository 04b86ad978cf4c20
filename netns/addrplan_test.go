package netns

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

var cmpNetip = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

func TestBlockShift(t *testing.T) {
	for n, want := range map[int]uint{1: 0, 2: 1, 256: 8, 65536: 16} {
		if got, err := blockShift(n); err != nil || got != want {
			t.Errorf("blockShift(%d) = %d, %v; want %d", n, got, err, want)
		}
	}
	for _, n := range []int{0, -1, 3, 100, 1 << 17} {
		if _, err := blockShift(n); err == nil {
			t.Errorf("blockShift(%d) accepted", n)
		}
	}
}

func TestPackAddresses(t *testing.T) {
	got, err := packAddresses(addrs("10.244.0.5", "10.244.0.1", "10.244.0.4", "10.244.1.0", "10.244.0.3"), 2)
	if err != nil {
		t.Fatal(err)
	}
	// Aligned blocks of four: .0-.3, .4-.7 and 1.0-1.3.
	want := map[blockKey][]netip.Addr{
		blockKey(v4(netip.MustParseAddr("10.244.0.0")) >> 2): addrs("10.244.0.1", "10.244.0.3"),
		blockKey(v4(netip.MustParseAddr("10.244.0.4")) >> 2): addrs("10.244.0.4", "10.244.0.5"),
		blockKey(v4(netip.MustParseAddr("10.244.1.0")) >> 2): addrs("10.244.1.0"),
	}
	if diff := cmp.Diff(want, got, cmpNetip); diff != "" {
		t.Errorf("packAddresses (-want +got):\n%s", diff)
	}
	keys := sortedKeys(got)
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Errorf("sortedKeys not ascending: %v", keys)
		}
	}

	if _, err := packAddresses(addrs("10.244.0.1", "10.244.0.1"), 0); err == nil {
		t.Error("duplicate address accepted")
	}
	if _, err := packAddresses(addrs("fd00::1"), 0); err == nil {
		t.Error("IPv6 address accepted")
	}
}

func TestPack2000x10(t *testing.T) {
	svcs := makeServices(2000, 10, TCP, 80, 8080)
	got, err := packAddresses(allEndpoints(svcs), 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 79 { // ceil(20000/256)
		t.Errorf("20,000 contiguous addresses in %d namespaces of 256, want 79", len(got))
	}
	routes := 0
	for _, g := range got {
		routes += len(coveringPrefixes(g))
	}
	if routes != 79 {
		t.Errorf("%d routes, want one per namespace (79)", routes)
	}
}

func TestCoveringPrefixes(t *testing.T) {
	tests := []struct {
		name string
		in   []netip.Addr
		want []netip.Prefix
	}{
		{name: "empty"},
		{name: "single", in: addrs("10.244.0.9"), want: prefixes("10.244.0.9/32")},
		{name: "aligned block", in: addrs("10.244.0.4", "10.244.0.5", "10.244.0.6", "10.244.0.7"), want: prefixes("10.244.0.4/30")},
		{name: "unaligned run", in: addrs("10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4"), want: prefixes("10.244.0.1/32", "10.244.0.2/31", "10.244.0.4/32")},
		{name: "hole", in: addrs("10.244.0.0", "10.244.0.1", "10.244.0.3"), want: prefixes("10.244.0.0/31", "10.244.0.3/32")},
		{name: "unsorted with duplicates", in: addrs("10.244.0.3", "10.244.0.2", "10.244.0.2"), want: prefixes("10.244.0.2/31")},
		{name: "across an octet", in: addrs("10.244.0.255", "10.244.1.0"), want: prefixes("10.244.0.255/32", "10.244.1.0/32")},
		{name: "top of the space", in: addrs("255.255.255.254", "255.255.255.255"), want: prefixes("255.255.255.254/31")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := coveringPrefixes(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpNetip); diff != "" {
				t.Errorf("coveringPrefixes (-want +got):\n%s", diff)
			}
		})
	}
}

// Every address of a range is covered exactly once, for many ranges.
func TestRangePrefixesExact(t *testing.T) {
	base := v4(netip.MustParseAddr("10.244.0.0"))
	for lo := uint32(0); lo < 40; lo++ {
		for hi := lo; hi < 70; hi++ {
			covered := map[uint32]int{}
			for _, p := range rangePrefixes(base+lo, base+hi) {
				start := v4(p.Addr())
				for i := uint64(0); i < 1<<(32-p.Bits()); i++ {
					covered[start+uint32(i)]++
				}
			}
			if len(covered) != int(hi-lo+1) {
				t.Fatalf("[%d,%d]: covered %d addresses, want %d", lo, hi, len(covered), hi-lo+1)
			}
			for a, n := range covered {
				if a < base+lo || a > base+hi || n != 1 {
					t.Fatalf("[%d,%d]: address %s covered %d times", lo, hi, fromV4(a), n)
				}
			}
		}
	}
}

func TestDiffPrefixes(t *testing.T) {
	add, del := diffPrefixes(prefixes("10.244.0.0/30"), prefixes("10.244.0.0/31", "10.244.0.3/32"))
	if diff := cmp.Diff(prefixes("10.244.0.0/31", "10.244.0.3/32"), add, cmpNetip); diff != "" {
		t.Errorf("add (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(prefixes("10.244.0.0/30"), del, cmpNetip); diff != "" {
		t.Errorf("del (-want +got):\n%s", diff)
	}
}
