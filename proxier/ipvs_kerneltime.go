package proxier

import (
	"strings"
	"time"

	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
)

// In IPVS mode the proxier gets three timed interfaces sharing one record:
// utiliptables (methods named as in kerneltime.go: RestoreAll, SaveInto,
// ...), utilipvs (methods "ipvs.<Method>": generic netlink requests, one per
// call) and utilipset (methods "ipset.<Method>": one run of the ipset
// program per call, which dominates a first sync under emulation).

// Kinds of kernel calls (KernelCallKind): one per interface or program.
const (
	KernelKindIPTables = "iptables"
	KernelKindIPVS     = "ipvs"
	KernelKindIPSet    = "ipset"
	KernelKindNFT      = "nft"
)

// KernelCallKind returns the interface a KernelCall.Method belongs to:
// "ipvs", "ipset", "nft" or "iptables" (unprefixed methods).
func KernelCallKind(method string) string {
	switch {
	case strings.HasPrefix(method, "ipvs."):
		return KernelKindIPVS
	case strings.HasPrefix(method, "ipset."):
		return KernelKindIPSet
	case strings.HasPrefix(method, "nft."):
		return KernelKindNFT
	default:
		return KernelKindIPTables
	}
}

// Parts of a sync (KernelCallPart): where its time goes, finer than kinds.
// A part's kind is the text before its first "-".
const (
	PartIPTablesRestore = "iptables-restore" // RestoreAll, Restore
	PartIPTablesSave    = "iptables-save"    // SaveInto
	PartIPTablesOther   = "iptables"         // Ensure*, Delete*, Flush*, ChainExists, Present
	PartIPSet           = "ipset"
	PartIPVS            = "ipvs" // IPVS netlink requests
	PartNFTList         = "nft-list"
	PartNFTTransaction  = "nft-transaction"
	PartNFTOther        = "nft" // --check, --version
)

// KernelCallPart returns the part of a sync a KernelCall.Method counts
// under.
func KernelCallPart(method string) string {
	switch method {
	case "RestoreAll", "Restore":
		return PartIPTablesRestore
	case "SaveInto":
		return PartIPTablesSave
	case NFTList:
		return PartNFTList
	case NFTTransaction:
		return PartNFTTransaction
	}
	return KernelCallKind(method)
}

// KernelCallSum totals calls of one kind.
type KernelCallSum struct {
	Calls    int           `json:"calls"`
	Errors   int           `json:"errors"`
	Duration time.Duration `json:"duration"`
}

// SumKernelCalls totals the calls that began in [from, to) by kind (see
// KernelCallKind). A zero from or to leaves that side open, so
// SumKernelCalls(calls, s.Start, s.End) attributes calls to a Sync (whose
// times are bounds: Start early by up to a poll interval, End late).
func SumKernelCalls(calls []KernelCall, from, to time.Time) map[string]KernelCallSum {
	return sumKernelCalls(calls, from, to, KernelCallKind)
}

// SumKernelParts is SumKernelCalls by part (KernelCallPart).
func SumKernelParts(calls []KernelCall, from, to time.Time) map[string]KernelCallSum {
	return sumKernelCalls(calls, from, to, KernelCallPart)
}

func sumKernelCalls(calls []KernelCall, from, to time.Time, key func(string) string) map[string]KernelCallSum {
	m := map[string]KernelCallSum{}
	for _, c := range calls {
		if (!from.IsZero() && c.Start.Before(from)) || (!to.IsZero() && !c.Start.Before(to)) {
			continue
		}
		k := key(c.Method)
		s := m[k]
		s.Calls++
		s.Duration += c.Duration
		if c.Err != "" {
			s.Errors++
		}
		m[k] = s
	}
	return m
}

// timedIPVS forwards every utilipvs.Interface method unchanged to inner and
// records it as "ipvs.<Method>". Like timedIPTables it embeds nothing, so a
// method added upstream breaks the build here instead of bypassing the
// timer.
type timedIPVS struct {
	inner utilipvs.Interface
	rec   *kernelCalls
	now   func() time.Time
}

// newTimedIPVS returns nil for a nil inner: utilipvs.New() returns nil when
// the kernel has no IPVS, and ipvs.CanUseIPVSProxier tests for that nil.
// It returns the interface the proxier takes, so that a change of the
// interface shows here and nowhere else.
// upstream API: utilipvs.Interface's method set (timedIPVS forwards every method)
func newTimedIPVS(inner utilipvs.Interface, rec *kernelCalls) utilipvs.Interface {
	if inner == nil {
		return nil
	}
	return newTimedIPVSClock(inner, rec, time.Now)
}

func newTimedIPVSClock(inner utilipvs.Interface, rec *kernelCalls, now func() time.Time) *timedIPVS {
	return &timedIPVS{inner: inner, rec: rec, now: now}
}

func (t *timedIPVS) begin(method string) func(err error) {
	return beginCall(t.rec, t.now, "ipvs."+method)
}

// beginCall starts timing a call; the returned func records it.
func beginCall(rec *kernelCalls, now func() time.Time, method string) func(err error) {
	start := now()
	return func(err error) {
		c := KernelCall{Method: method, Start: start, Duration: now().Sub(start)}
		if err != nil {
			c.Err = err.Error()
		}
		rec.add(c)
	}
}

func (t *timedIPVS) Flush() error {
	done := t.begin("Flush")
	err := t.inner.Flush()
	done(err)
	return err
}

func (t *timedIPVS) AddVirtualServer(vs *utilipvs.VirtualServer) error {
	done := t.begin("AddVirtualServer")
	err := t.inner.AddVirtualServer(vs)
	done(err)
	return err
}

func (t *timedIPVS) UpdateVirtualServer(vs *utilipvs.VirtualServer) error {
	done := t.begin("UpdateVirtualServer")
	err := t.inner.UpdateVirtualServer(vs)
	done(err)
	return err
}

func (t *timedIPVS) DeleteVirtualServer(vs *utilipvs.VirtualServer) error {
	done := t.begin("DeleteVirtualServer")
	err := t.inner.DeleteVirtualServer(vs)
	done(err)
	return err
}

func (t *timedIPVS) GetVirtualServer(vs *utilipvs.VirtualServer) (*utilipvs.VirtualServer, error) {
	done := t.begin("GetVirtualServer")
	got, err := t.inner.GetVirtualServer(vs)
	done(err)
	return got, err
}

func (t *timedIPVS) GetVirtualServers() ([]*utilipvs.VirtualServer, error) {
	done := t.begin("GetVirtualServers")
	got, err := t.inner.GetVirtualServers()
	done(err)
	return got, err
}

func (t *timedIPVS) AddRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	done := t.begin("AddRealServer")
	err := t.inner.AddRealServer(vs, rs)
	done(err)
	return err
}

func (t *timedIPVS) GetRealServers(vs *utilipvs.VirtualServer) ([]*utilipvs.RealServer, error) {
	done := t.begin("GetRealServers")
	got, err := t.inner.GetRealServers(vs)
	done(err)
	return got, err
}

func (t *timedIPVS) DeleteRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	done := t.begin("DeleteRealServer")
	err := t.inner.DeleteRealServer(vs, rs)
	done(err)
	return err
}

func (t *timedIPVS) UpdateRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	done := t.begin("UpdateRealServer")
	err := t.inner.UpdateRealServer(vs, rs)
	done(err)
	return err
}

func (t *timedIPVS) ConfigureTimeouts(tcp, tcpFin, udp time.Duration) error {
	done := t.begin("ConfigureTimeouts")
	err := t.inner.ConfigureTimeouts(tcp, tcpFin, udp)
	done(err)
	return err
}

// timedIPSet forwards every utilipset.Interface method unchanged to inner
// and records it as "ipset.<Method>". Each call upstream is one run of the
// ipset program, so the duration includes the program start.
type timedIPSet struct {
	inner utilipset.Interface
	rec   *kernelCalls
	now   func() time.Time
}

// newTimedIPSet returns the interface the proxier takes, so that a change
// of the interface shows here and nowhere else.
// upstream API: utilipset.Interface's method set (timedIPSet forwards every method)
func newTimedIPSet(inner utilipset.Interface, rec *kernelCalls) utilipset.Interface {
	return newTimedIPSetClock(inner, rec, time.Now)
}

func newTimedIPSetClock(inner utilipset.Interface, rec *kernelCalls, now func() time.Time) *timedIPSet {
	return &timedIPSet{inner: inner, rec: rec, now: now}
}

func (t *timedIPSet) begin(method string) func(err error) {
	return beginCall(t.rec, t.now, "ipset."+method)
}

func (t *timedIPSet) FlushSet(set string) error {
	done := t.begin("FlushSet")
	err := t.inner.FlushSet(set)
	done(err)
	return err
}

func (t *timedIPSet) DestroySet(set string) error {
	done := t.begin("DestroySet")
	err := t.inner.DestroySet(set)
	done(err)
	return err
}

func (t *timedIPSet) DestroyAllSets() error {
	done := t.begin("DestroyAllSets")
	err := t.inner.DestroyAllSets()
	done(err)
	return err
}

func (t *timedIPSet) CreateSet(set *utilipset.IPSet, ignoreExistErr bool) error {
	done := t.begin("CreateSet")
	err := t.inner.CreateSet(set, ignoreExistErr)
	done(err)
	return err
}

func (t *timedIPSet) AddEntry(entry string, set *utilipset.IPSet, ignoreExistErr bool) error {
	done := t.begin("AddEntry")
	err := t.inner.AddEntry(entry, set, ignoreExistErr)
	done(err)
	return err
}

func (t *timedIPSet) DelEntry(entry string, set string) error {
	done := t.begin("DelEntry")
	err := t.inner.DelEntry(entry, set)
	done(err)
	return err
}

func (t *timedIPSet) TestEntry(entry string, set string) (bool, error) {
	done := t.begin("TestEntry")
	ok, err := t.inner.TestEntry(entry, set)
	done(err)
	return ok, err
}

func (t *timedIPSet) ListEntries(set string) ([]string, error) {
	done := t.begin("ListEntries")
	got, err := t.inner.ListEntries(set)
	done(err)
	return got, err
}

func (t *timedIPSet) ListSets() ([]string, error) {
	done := t.begin("ListSets")
	got, err := t.inner.ListSets()
	done(err)
	return got, err
}

func (t *timedIPSet) GetVersion() (string, error) {
	done := t.begin("GetVersion")
	v, err := t.inner.GetVersion()
	done(err)
	return v, err
}
