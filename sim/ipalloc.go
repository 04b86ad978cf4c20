package sim

import (
	"fmt"
	"net/netip"
)

// rangeAllocator hands out the integers of [first, last] in order,
// skipping those in use, and wraps around at the end. Released values are
// reused only after the cursor wraps, so a replaced pod gets a new address
// (as on a real node) and the sequence stays deterministic.
type rangeAllocator struct {
	first, last uint64
	next        uint64
	used        map[uint64]struct{}
}

func newRangeAllocator(first, last uint64) *rangeAllocator {
	return &rangeAllocator{first: first, last: last, next: first, used: map[uint64]struct{}{}}
}

// capacity is how many values the range holds; 0 for an empty range.
func (r *rangeAllocator) capacity() uint64 {
	if r.last < r.first {
		return 0
	}
	return r.last - r.first + 1
}

func (r *rangeAllocator) free() uint64 { return r.capacity() - uint64(len(r.used)) }

func (r *rangeAllocator) inRange(v uint64) bool { return v >= r.first && v <= r.last }

// allocate returns the next free value; ok is false when the range is full.
func (r *rangeAllocator) allocate() (uint64, bool) {
	if r.free() == 0 {
		return 0, false
	}
	for {
		v := r.next
		if r.next == r.last {
			r.next = r.first
		} else {
			r.next++
		}
		if _, taken := r.used[v]; !taken {
			r.used[v] = struct{}{}
			return v, true
		}
	}
}

// claim marks v used; false when it is already used or out of range.
func (r *rangeAllocator) claim(v uint64) bool {
	if !r.inRange(v) {
		return false
	}
	if _, taken := r.used[v]; taken {
		return false
	}
	r.used[v] = struct{}{}
	return true
}

func (r *rangeAllocator) release(v uint64) bool {
	if _, taken := r.used[v]; !taken {
		return false
	}
	delete(r.used, v)
	return true
}

// IPAllocator allocates IPv4 addresses from one CIDR, deterministically:
// the lowest free address after the last one handed out. The network and
// broadcast addresses (for prefixes shorter than /31) and a number of
// leading addresses are never handed out.
type IPAllocator struct {
	name   string // what the CIDR is, for errors: "service CIDR"
	prefix netip.Prefix
	base   uint64 // the prefix's first address as an integer
	r      *rangeAllocator
	// reserved is how many usable addresses were kept back at the start.
	reserved uint64
	// note explains the reserved addresses in errors.
	note string
}

// NewIPAllocator returns an allocator over prefix (IPv4 only). name says
// what the range is in errors ("pod CIDR"). skip is how many addresses at
// the start of the prefix, counting the network address, are never handed
// out; the network and broadcast addresses are always skipped for
// prefixes shorter than /31.
func NewIPAllocator(name string, prefix netip.Prefix, skip int) (*IPAllocator, error) {
	if !prefix.IsValid() || !prefix.Addr().Is4() {
		return nil, fmt.Errorf("%s %s: only IPv4 prefixes are supported", name, prefix)
	}
	prefix = prefix.Masked()
	size := uint64(1) << (32 - prefix.Bits())
	first, last := uint64(0), size-1
	if prefix.Bits() < 31 {
		first, last = 1, size-2 // network and broadcast addresses
	}
	if skip < 0 {
		skip = 0
	}
	reserved := uint64(0)
	if uint64(skip) > first {
		reserved = uint64(skip) - first
		first = uint64(skip)
	}
	return &IPAllocator{
		name:     name,
		prefix:   prefix,
		base:     uint64(ipToUint32(prefix.Addr())),
		r:        newRangeAllocator(first, last),
		reserved: reserved,
	}, nil
}

// Prefix is the CIDR the allocator hands addresses out of.
func (a *IPAllocator) Prefix() netip.Prefix { return a.prefix }

// Capacity is how many addresses the allocator can hand out in all.
func (a *IPAllocator) Capacity() int { return int(a.r.capacity()) }

// Free is how many addresses are still available.
func (a *IPAllocator) Free() int { return int(a.r.free()) }

// Contains reports whether addr lies in the allocator's CIDR (whether or
// not it can be handed out).
func (a *IPAllocator) Contains(addr netip.Addr) bool { return a.prefix.Contains(addr) }

// InUse reports whether addr has been allocated or reserved.
func (a *IPAllocator) InUse(addr netip.Addr) bool {
	if !a.prefix.Contains(addr) {
		return false
	}
	_, ok := a.r.used[a.offset(addr)]
	return ok
}

// Allocate hands out the next free address.
func (a *IPAllocator) Allocate() (netip.Addr, error) {
	v, ok := a.r.allocate()
	if !ok {
		return netip.Addr{}, fmt.Errorf("%s %s exhausted: all %d usable addresses are in use", a.name, a.prefix, a.Capacity())
	}
	return a.addr(v), nil
}

// Reserve claims a specific address, for objects written by hand. It
// fails when the address is in use or cannot be handed out (outside the
// CIDR, network, broadcast or a reserved leading address).
func (a *IPAllocator) Reserve(addr netip.Addr) error {
	if !a.prefix.Contains(addr) {
		return fmt.Errorf("%s is outside %s %s", addr, a.name, a.prefix)
	}
	off := a.offset(addr)
	if !a.r.inRange(off) {
		return fmt.Errorf("%s is reserved in %s %s", addr, a.name, a.prefix)
	}
	if !a.r.claim(off) {
		return fmt.Errorf("%s is already in use in %s %s", addr, a.name, a.prefix)
	}
	return nil
}

// Release returns an address to the pool.
func (a *IPAllocator) Release(addr netip.Addr) error {
	if !a.prefix.Contains(addr) || !a.r.release(a.offset(addr)) {
		return fmt.Errorf("release %s: not allocated from %s %s", addr, a.name, a.prefix)
	}
	return nil
}

// need returns an error naming the CIDR, its capacity and the demand when
// n more addresses do not fit.
func (a *IPAllocator) need(n int, what string) error {
	if n <= a.Free() {
		return nil
	}
	detail := ""
	if a.note != "" {
		detail += "; " + a.note
	}
	if len(a.r.used) > 0 {
		detail += fmt.Sprintf("; %d already taken", len(a.r.used))
	}
	return fmt.Errorf("%s %s is too small: it has %d usable addresses (of %d%s), the scenario needs %d for %s",
		a.name, a.prefix, a.Capacity(), uint64(1)<<(32-a.prefix.Bits()), detail, n, what)
}

func (a *IPAllocator) offset(addr netip.Addr) uint64 {
	return uint64(ipToUint32(addr)) - a.base
}

func (a *IPAllocator) addr(off uint64) netip.Addr {
	return uint32ToIP(uint32(a.base + off))
}

// PortAllocator allocates NodePorts from an inclusive range, lowest free
// first, deterministically.
type PortAllocator struct {
	name string
	r    *rangeAllocator
}

// Default NodePort range of the API server.
const (
	NodePortMin = 30000
	NodePortMax = 32767
)

// NewPortAllocator returns an allocator over [min, max].
func NewPortAllocator(name string, min, max int32) *PortAllocator {
	return &PortAllocator{name: name, r: newRangeAllocator(uint64(min), uint64(max))}
}

// Capacity is how many ports the range holds.
func (p *PortAllocator) Capacity() int { return int(p.r.capacity()) }

// Free is how many ports are still available.
func (p *PortAllocator) Free() int { return int(p.r.free()) }

// Contains reports whether port lies in the range.
func (p *PortAllocator) Contains(port int32) bool { return port >= 0 && p.r.inRange(uint64(port)) }

// Allocate hands out the next free port.
func (p *PortAllocator) Allocate() (int32, error) {
	v, ok := p.r.allocate()
	if !ok {
		return 0, fmt.Errorf("%s %d-%d exhausted: all %d ports are in use", p.name, p.r.first, p.r.last, p.Capacity())
	}
	return int32(v), nil
}

// Reserve claims a specific port (from a literal Service).
func (p *PortAllocator) Reserve(port int32) error {
	if !p.Contains(port) {
		return fmt.Errorf("port %d is outside %s %d-%d", port, p.name, p.r.first, p.r.last)
	}
	if !p.r.claim(uint64(port)) {
		return fmt.Errorf("port %d is already in use in %s %d-%d", port, p.name, p.r.first, p.r.last)
	}
	return nil
}

// Release returns a port to the pool.
func (p *PortAllocator) Release(port int32) error {
	if port < 0 || !p.r.release(uint64(port)) {
		return fmt.Errorf("release port %d: not allocated from %s", port, p.name)
	}
	return nil
}

func (p *PortAllocator) need(n int, what string) error {
	if n <= p.Free() {
		return nil
	}
	return fmt.Errorf("%s %d-%d is too small: it has %d ports (%d already taken), the scenario needs %d for %s",
		p.name, p.r.first, p.r.last, p.Capacity(), len(p.r.used), n, what)
}

func ipToUint32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uint32ToIP(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
