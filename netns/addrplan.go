package netns

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
)

// Address plan: which pod namespace holds which endpoint address, and which
// routes the node needs to reach them. Pure functions, unit tested.
//
// Namespaces hold aligned blocks of AddressesPerNamespace (a power of two)
// addresses: a namespace is identified by addr>>log2(n), so a full block is
// reached by one prefix route and churn lands in the namespace that already
// holds the block's other addresses.

// blockKey identifies the aligned block (and so the namespace) of an IPv4
// address when namespaces hold 1<<shift addresses.
type blockKey uint32

func v4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func fromV4(u uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u)
	return netip.AddrFrom4(b)
}

// blockShift validates perNS and returns log2(perNS).
func blockShift(perNS int) (uint, error) {
	if perNS < 1 || perNS > 1<<16 || perNS&(perNS-1) != 0 {
		return 0, fmt.Errorf("addressesPerNamespace %d: must be a power of two between 1 and 65536 (aligned blocks get one route each)", perNS)
	}
	return uint(bits.TrailingZeros(uint(perNS))), nil
}

// packAddresses groups addrs by aligned block of 1<<shift addresses; groups
// and the addresses in them are sorted. It rejects non-IPv4 addresses and
// duplicates.
func packAddresses(addrs []netip.Addr, shift uint) (map[blockKey][]netip.Addr, error) {
	out := map[blockKey][]netip.Addr{}
	seen := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() {
			return nil, fmt.Errorf("endpoint address %s: only IPv4 is supported", a)
		}
		if _, dup := seen[a]; dup {
			return nil, fmt.Errorf("endpoint address %s given twice", a)
		}
		seen[a] = struct{}{}
		k := blockKey(v4(a) >> shift)
		out[k] = append(out[k], a)
	}
	for _, g := range out {
		slices.SortFunc(g, netip.Addr.Compare)
	}
	return out, nil
}

// sortedKeys returns the block keys in address order (deterministic setup).
func sortedKeys[V any](m map[blockKey]V) []blockKey {
	keys := make([]blockKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// coveringPrefixes returns the fewest prefixes that cover exactly the given
// IPv4 addresses: contiguous runs become CIDR blocks, so a namespace holding
// a full aligned block needs one route.
func coveringPrefixes(addrs []netip.Addr) []netip.Prefix {
	if len(addrs) == 0 {
		return nil
	}
	u := make([]uint32, 0, len(addrs))
	for _, a := range addrs {
		u = append(u, v4(a))
	}
	slices.Sort(u)
	u = slices.Compact(u)
	var out []netip.Prefix
	start, prev := u[0], u[0]
	for _, x := range u[1:] {
		if x == prev+1 {
			prev = x
			continue
		}
		out = append(out, rangePrefixes(start, prev)...)
		start, prev = x, x
	}
	return append(out, rangePrefixes(start, prev)...)
}

// rangePrefixes splits the inclusive range [lo, hi] into CIDR prefixes.
func rangePrefixes(lo, hi uint32) []netip.Prefix {
	var out []netip.Prefix
	for {
		// Largest block aligned at lo that does not pass hi.
		size := 32
		if lo != 0 {
			size = bits.TrailingZeros32(lo)
		}
		for size > 0 && uint64(lo)+(uint64(1)<<size)-1 > uint64(hi) {
			size--
		}
		out = append(out, netip.PrefixFrom(fromV4(lo), 32-size))
		next := uint64(lo) + uint64(1)<<size
		if next > uint64(hi) {
			return out
		}
		lo = uint32(next)
	}
}

// diffPrefixes returns what to add and delete to go from old to new.
func diffPrefixes(old, new []netip.Prefix) (add, del []netip.Prefix) {
	inOld := map[netip.Prefix]bool{}
	for _, p := range old {
		inOld[p] = true
	}
	inNew := map[netip.Prefix]bool{}
	for _, p := range new {
		inNew[p] = true
		if !inOld[p] {
			add = append(add, p)
		}
	}
	for _, p := range old {
		if !inNew[p] {
			del = append(del, p)
		}
	}
	return add, del
}
