package rules

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/toolexec"
)

// IPVSDump is the dataplane of kube-proxy's IPVS mode in the calling
// process's network namespace: the IPVS table (/proc/net/ip_vs), the ipsets
// (ipset save) and the iptables rules IPVS mode still writes, kept raw and
// parsed.
//
// SaveDumps writes, next to the iptables files of IPTablesDump:
//
//	<name>.ip_vs.gz          /proc/net/ip_vs as read (hex addresses)
//	<name>.ipvsadm.gz        the same table as `ipvsadm -Ln --exact` prints
//	                         it (see FormatIPVSAdm); count virtual servers
//	                         with grep -cE '^(TCP|UDP|SCTP|FWM) ' and real
//	                         servers with grep -c -- '->' minus the header
//	<name>.ipset-save.gz     ipset save (grep -c '^add ')
//	<name>.ipvs.normalized.gz  Normalize's IPVS and ipset part
//	<name>.ipvs.learned.gz   Learned: connection counts, left out of it
type IPVSDump struct {
	// ProcIPVS is /proc/net/ip_vs; IPSetSave is the output of ipset save.
	ProcIPVS  []byte `json:"-"`
	IPSetSave []byte `json:"-"`
	// Services are the IPVS virtual servers in kernel order.
	Services []IPVSService `json:"services"`
	// Sets are the ipsets in ipset save order.
	Sets []IPSet `json:"sets"`
	// IPTables is what iptables-<backend>-save prints.
	IPTables *IPTablesDump `json:"iptables"`
}

var _ Dump = (*IPVSDump)(nil)

// IPVSService is one IPVS virtual server.
type IPVSService struct {
	// Protocol is TCP, UDP, SCTP or FWM (a firewall-mark service).
	Protocol string `json:"protocol"`
	// Address is the virtual address and port; invalid for FWM.
	Address netip.AddrPort `json:"address,omitzero"`
	// FWMark is the mark of an FWM service.
	FWMark    uint32 `json:"fwmark,omitempty"`
	Scheduler string `json:"scheduler"`
	// OnePacket is the "ops" flag (one-packet scheduling, UDP).
	OnePacket bool `json:"onePacket,omitempty"`
	// Persistent is session affinity; Timeout in seconds and Netmask of
	// the persistence are set with it.
	Persistent bool       `json:"persistent,omitempty"`
	Timeout    uint32     `json:"timeout,omitempty"`
	Netmask    netip.Addr `json:"netmask,omitzero"`
	// Dests are the real servers in kernel order.
	Dests []IPVSDest `json:"dests"`
}

// Key names the virtual server: "TCP 10.96.0.10:80", "UDP [fd00::a]:53",
// "FWM 1"; ImpliedIPVS keys its shares with it.
func (s IPVSService) Key() string {
	if s.Protocol == "FWM" {
		return fmt.Sprintf("FWM %d", s.FWMark)
	}
	return s.Protocol + " " + s.Address.String()
}

// IPVSDest is one real server of a virtual server.
type IPVSDest struct {
	Address netip.AddrPort `json:"address"`
	// Forward is the forwarding method: Masq, Local, Tunnel or Route.
	Forward string `json:"forward"`
	Weight  int    `json:"weight"`
	// ActiveConns and InactiveConns are connection state, not
	// configuration: Normalize leaves them out.
	ActiveConns   int `json:"activeConns"`
	InactiveConns int `json:"inactiveConns"`
}

// IPSet is one set of an ipset save output.
type IPSet struct {
	Name string `json:"name"`
	// Type is the set type (hash:ip,port, bitmap:port, ...).
	Type string `json:"type"`
	// Options are the create options after the type, as printed.
	Options string `json:"options,omitempty"`
	// Members in save order; each is the member and its options (comment,
	// timeout, ...) as printed after the set name.
	Members []IPSetMember `json:"members"`
}

// IPSetMember is one "add" line.
type IPSetMember struct {
	Member  string `json:"member"`
	Options string `json:"options,omitempty"`
}

// procIPVSPath is where the kernel shows the IPVS table of the reader's
// network namespace.
const procIPVSPath = "/proc/net/ip_vs"

// ReadIPVS reads the IPVS table (/proc/net/ip_vs), the ipsets (ipset save)
// and the iptables rules (iptables-<backend>-save, backend "legacy" or
// "nft") of the calling process's network namespace.
func ReadIPVS(ctx context.Context, run toolexec.Runner, backend string) (*IPVSDump, error) {
	return readIPVS(ctx, run, backend, os.ReadFile)
}

func readIPVS(ctx context.Context, run toolexec.Runner, backend string, readFile func(string) ([]byte, error)) (*IPVSDump, error) {
	ipt, err := ReadIPTables(ctx, run, backend)
	if err != nil {
		return nil, fmt.Errorf("read ipvs: %w", err)
	}
	d := &IPVSDump{IPTables: ipt}
	if d.ProcIPVS, err = readFile(procIPVSPath); err != nil {
		return nil, fmt.Errorf("read ipvs: %w (is the ip_vs module loaded?)", err)
	}
	if d.Services, err = ParseProcIPVS(d.ProcIPVS); err != nil {
		return nil, fmt.Errorf("read ipvs: %s: %w", procIPVSPath, err)
	}
	if d.IPSetSave, err = run.Run(ctx, toolexec.Command("ipset", "save")); err != nil {
		return nil, fmt.Errorf("read ipvs: %w", err)
	}
	if d.Sets, err = ParseIPSetSave(d.IPSetSave); err != nil {
		return nil, fmt.Errorf("read ipvs: output of ipset save: %w", err)
	}
	return d, nil
}

// Counts returns "ipvs/virtualServers", "ipvs/realServers", "ipset/members"
// (all sets), "ipset/sets", "ipset/set/<name>" (members of one set) and the
// iptables counts of IPTablesDump.Counts.
func (d *IPVSDump) Counts() map[string]int {
	m := d.IPTables.Counts()
	dests := 0
	for _, s := range d.Services {
		dests += len(s.Dests)
	}
	m["ipvs/virtualServers"] = len(d.Services)
	m["ipvs/realServers"] = dests
	members := 0
	for _, s := range d.Sets {
		members += len(s.Members)
		m["ipset/set/"+s.Name] = len(s.Members)
	}
	m["ipset/members"] = members
	m["ipset/sets"] = len(d.Sets)
	return m
}

// Normalize returns a canonical text of the IPVS table, the ipsets and the
// iptables rules (IPTablesDump.Normalize). Virtual servers are sorted
// (protocol, address, port, mark), each with its real servers sorted by
// address and port, with weight and forwarding method but without
// connection counters. Sets are sorted by name with their members sorted;
// the create options hashsize, bucketsize and initval are dropped (they
// grow with the set or are random, and change no membership).
//
// The order is meaningless in both: IPVS looks a virtual server up by
// hash and its scheduler, not the list order, picks the real server (rr
// starts where it last stopped); ipset membership has no order.
func (d *IPVSDump) Normalize() string {
	return d.normalizeIPVS() + d.IPTables.Normalize()
}

func (d *IPVSDump) normalizeIPVS() string {
	var b strings.Builder
	b.WriteString("# ipvs\n")
	svcs := slices.Clone(d.Services)
	slices.SortFunc(svcs, compareIPVSService)
	for _, s := range svcs {
		b.WriteString(ipvsServiceLine(s))
		b.WriteByte('\n')
		dests := slices.Clone(s.Dests)
		slices.SortFunc(dests, func(a, b IPVSDest) int { return a.Address.Compare(b.Address) })
		for _, dst := range dests {
			fmt.Fprintf(&b, "  -> %s %s %d\n", dst.Address, dst.Forward, dst.Weight)
		}
	}
	b.WriteString("# ipset\n")
	sets := slices.Clone(d.Sets)
	slices.SortFunc(sets, func(a, b IPSet) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range sets {
		b.WriteString(strings.TrimRight("create "+s.Name+" "+s.Type+" "+normalizeIPSetOptions(s.Options), " "))
		b.WriteByte('\n')
		lines := make([]string, 0, len(s.Members))
		for _, m := range s.Members {
			lines = append(lines, strings.TrimRight("add "+s.Name+" "+m.Member+" "+m.Options, " "))
		}
		slices.Sort(lines)
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func compareIPVSService(a, b IPVSService) int {
	return cmp.Or(
		strings.Compare(a.Protocol, b.Protocol),
		a.Address.Compare(b.Address),
		cmp.Compare(a.FWMark, b.FWMark),
	)
}

// ipvsServiceLine is a virtual server as ipvsadm -Ln prints it.
func ipvsServiceLine(s IPVSService) string {
	var b strings.Builder
	if s.Protocol == "FWM" {
		fmt.Fprintf(&b, "FWM  %d %s", s.FWMark, s.Scheduler)
	} else {
		fmt.Fprintf(&b, "%s  %s %s", s.Protocol, s.Address, s.Scheduler)
	}
	if s.Persistent {
		fmt.Fprintf(&b, " persistent %d", s.Timeout)
		if s.Netmask.IsValid() && !isFullMask(s.Netmask) {
			fmt.Fprintf(&b, " mask %s", s.Netmask)
		}
	}
	if s.OnePacket {
		b.WriteString(" ops")
	}
	return b.String()
}

// isFullMask says whether m is 255.255.255.255 (IPv4) or a /128 (IPv6),
// which ipvsadm does not print.
func isFullMask(m netip.Addr) bool {
	for _, x := range m.AsSlice() {
		if x != 0xff {
			return false
		}
	}
	return true
}

// droppedIPSetOptions are create options that change with the set's size or
// are random; they say nothing about membership.
var droppedIPSetOptions = map[string]bool{"hashsize": true, "bucketsize": true, "initval": true}

func normalizeIPSetOptions(opts string) string {
	f := strings.Fields(opts)
	var out []string
	for i := 0; i < len(f); i++ {
		if droppedIPSetOptions[f[i]] && i+1 < len(f) {
			i++
			continue
		}
		out = append(out, f[i])
	}
	return strings.Join(out, " ")
}

// FormatIPVSAdm prints services as `ipvsadm -Ln --exact` does (ipvsadm
// 1.31, print_service_entry), in the given order:
//
//	IP Virtual Server version 1.2.1 (size=4096)
//	Prot LocalAddress:Port Scheduler Flags
//	  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
//	TCP  10.96.0.10:80 rr
//	  -> 10.244.0.10:8080             Masq    1      0          0
//
// version is the first line of /proc/net/ip_vs ("IP Virtual Server version
// 1.2.1 (size=4096)"); IPv6 addresses are bracketed ("[fd00::1]:80").
func FormatIPVSAdm(version string, services []IPVSService) []byte {
	var b bytes.Buffer
	b.WriteString(version + "\n")
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	for _, s := range services {
		b.WriteString(ipvsServiceLine(s))
		b.WriteByte('\n')
		for _, d := range s.Dests {
			fmt.Fprintf(&b, "  -> %-28s %-7s %-6d %-10d %-10d\n", d.Address, d.Forward, d.Weight, d.ActiveConns, d.InactiveConns)
		}
	}
	return b.Bytes()
}

func (d *IPVSDump) files() []dumpFile {
	version, _, _ := strings.Cut(string(d.ProcIPVS), "\n")
	return append([]dumpFile{
		{".ip_vs.gz", d.ProcIPVS},
		{".ipvsadm.gz", FormatIPVSAdm(version, d.Services)},
		{".ipset-save.gz", d.IPSetSave},
		{".ipvs.normalized.gz", []byte(d.normalizeIPVS())},
		{".ipvs.learned.gz", learnedText(d.Learned())},
	}, d.IPTables.files()...)
}

// ParseProcIPVS parses /proc/net/ip_vs (net/netfilter/ipvs/ip_vs_ctl.c,
// ip_vs_info_seq_show): three header lines, then per virtual server
//
//	TCP  0A60000A:0050 rr [ops ][persistent <seconds> <hex netmask>]
//	FWM  00000001 rr
//	TCP  [fd00:0000:...:0001]:0050 rr
//
// followed by its real servers
//
//	-> 0AF4000A:1F90      Masq    1      0          0
//
// (address:port in hex, forwarding method, weight, active and inactive
// connections). It refuses a real server before any virtual server and
// lines it cannot read.
func ParseProcIPVS(text []byte) ([]IPVSService, error) {
	var svcs []IPVSService
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \r")
		switch {
		case line == "":
		case n <= 3 && (strings.HasPrefix(line, "IP Virtual Server") || strings.HasPrefix(line, "Prot ") || strings.HasPrefix(strings.TrimSpace(line), "-> RemoteAddress")):
		case strings.HasPrefix(line, "  -> "):
			if len(svcs) == 0 {
				return nil, fmt.Errorf("line %d: real server before any virtual server: %q", n, line)
			}
			f := strings.Fields(line[len("  -> "):])
			if len(f) != 5 {
				return nil, fmt.Errorf("line %d: bad real server line %q", n, line)
			}
			ap, err := parseHexAddrPort(f[0])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			// Weight and connection counts are non-negative ints in the
			// kernel (a negative weight is refused with ERANGE).
			var nums [3]int
			for i := range nums {
				v, err := strconv.ParseUint(f[2+i], 10, 31)
				if err != nil {
					return nil, fmt.Errorf("line %d: bad number %q in %q", n, f[2+i], line)
				}
				nums[i] = int(v)
			}
			s := &svcs[len(svcs)-1]
			s.Dests = append(s.Dests, IPVSDest{Address: ap, Forward: f[1], Weight: nums[0], ActiveConns: nums[1], InactiveConns: nums[2]})
		default:
			s, err := parseProcIPVSService(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			svcs = append(svcs, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return svcs, nil
}

func parseProcIPVSService(line string) (IPVSService, error) {
	f := strings.Fields(line)
	if len(f) < 3 {
		return IPVSService{}, fmt.Errorf("bad virtual server line %q", line)
	}
	s := IPVSService{Protocol: f[0], Scheduler: f[2]}
	switch f[0] {
	case "FWM":
		mark, err := strconv.ParseUint(f[1], 16, 32)
		if err != nil {
			return s, fmt.Errorf("bad firewall mark in %q", line)
		}
		s.FWMark = uint32(mark)
	case "TCP", "UDP", "SCTP", "AH", "ESP":
		ap, err := parseHexAddrPort(f[1])
		if err != nil {
			return s, err
		}
		s.Address = ap
	default:
		return s, fmt.Errorf("bad virtual server line %q", line)
	}
	rest := f[3:]
	if len(rest) > 0 && rest[0] == "ops" {
		s.OnePacket, rest = true, rest[1:]
	}
	if len(rest) > 0 && rest[0] == "persistent" {
		if len(rest) != 3 {
			return s, fmt.Errorf("bad persistence in %q", line)
		}
		t, err := strconv.ParseUint(rest[1], 10, 32)
		if err != nil {
			return s, fmt.Errorf("bad persistence timeout in %q", line)
		}
		mask, err := parseHexAddr(rest[2])
		if err != nil {
			return s, fmt.Errorf("bad persistence netmask in %q: %w", line, err)
		}
		s.Persistent, s.Timeout, s.Netmask, rest = true, uint32(t), mask, nil
	}
	if len(rest) > 0 {
		return s, fmt.Errorf("unexpected %q in virtual server line %q", strings.Join(rest, " "), line)
	}
	return s, nil
}

// parseHexAddrPort reads "0A60000A:0050" or "[fd00:0000:...:0001]:0050".
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("bad address:port %q", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil || len(s[i+1:]) != 4 {
		return netip.AddrPort{}, fmt.Errorf("bad port in %q", s)
	}
	addr, err := parseHexAddr(s[:i])
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// parseHexAddr reads an IPv4 address as 8 hex digits (host order as
// printed by %08X of ntohl) or a bracketed IPv6 address (%pI6).
func parseHexAddr(s string) (netip.Addr, error) {
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return netip.Addr{}, fmt.Errorf("bad IPv6 address %q", s)
		}
		return a, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, fmt.Errorf("bad IPv4 address %q", s)
	}
	return netip.AddrFrom4([4]byte(b)), nil
}

// ParseIPSetSave parses the output of `ipset save`:
//
//	create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment
//	add KUBE-CLUSTER-IP 10.96.0.10,tcp:80 comment "default/svc0:http cluster IP"
//
// It refuses an "add" to a set not created before, a set created twice and
// any other line.
func ParseIPSetSave(text []byte) ([]IPSet, error) {
	var sets []IPSet
	index := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \r")
		if line == "" {
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		name, rest, _ := strings.Cut(rest, " ")
		first, opts, _ := strings.Cut(rest, " ")
		if name == "" || first == "" {
			return nil, fmt.Errorf("line %d: bad line %q", n, line)
		}
		switch verb {
		case "create":
			if _, ok := index[name]; ok {
				return nil, fmt.Errorf("line %d: set %s created twice", n, name)
			}
			index[name] = len(sets)
			sets = append(sets, IPSet{Name: name, Type: first, Options: opts, Members: []IPSetMember{}})
		case "add":
			i, ok := index[name]
			if !ok {
				return nil, fmt.Errorf("line %d: add to set %s, which is not created before", n, name)
			}
			sets[i].Members = append(sets[i].Members, IPSetMember{Member: first, Options: opts})
		default:
			return nil, fmt.Errorf("line %d: unexpected line %q", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return sets, nil
}

// WithoutWeightZero drops the weight-0 real servers ("  -> addr Masq 0")
// from a normalized IPVS dump and counts them: IPVS mode keeps removed
// endpoints at weight 0 until their connections drain (graceful
// termination), so they take no new connections.
func WithoutWeightZero(dump string) (string, int) {
	lines := strings.Split(dump, "\n")
	out := lines[:0]
	n := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if strings.HasPrefix(strings.TrimSpace(l), "->") && len(f) > 0 && f[len(f)-1] == "0" {
			n++
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n"), n
}
