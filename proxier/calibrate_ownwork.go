package proxier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	sysctltest "k8s.io/component-helpers/node/util/sysctl/testing"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/proxy/metrics"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	"k8s.io/kubernetes/pkg/proxy/util/nfacct"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	iptablestest "k8s.io/kubernetes/pkg/util/iptables/testing"
	utilptr "k8s.io/utils/ptr"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The CPU calibration times kube-proxy's own work with kube-proxy's own
// code: upstream's iptables proxier, built by iptables.NewProxier, makes
// its first sync of ownWorkServices Services against upstream's fake
// iptables (pkg/util/iptables/testing; its restores taken unparsed, see
// discardRestores), and the time outside the fake's calls is the sample.
// That is how a sync's own work is measured too (ownWork in package
// reports: the sync minus its timed calls), and it is the same mix of Go
// work (maps, string building, hashing chain names, allocation and garbage
// collection).
//
// The size is the headline's, 2000 Services x 10 endpoints: the slowdown
// under emulation depends on it. A stand-in workload slowed down
// 14.0-16.1x where kube-proxy's own work in the same runs slowed down
// 11.7-13.7x; this proxier at 400 x 4 gave 12.1-18.3x in seven idle runs
// where the first syncs' own work slowed down 11.5-15.4x (higher in six).
// At 2000 x 10, in three idle runs, it slowed down 9.9-12.1x where the
// first syncs' own work slowed down 10.2-10.6x (its host samples 93-137
// ms, the first syncs' own work on the host 136-143 ms). It costs about
// 1.3 s a sync in the VM when the machine is idle; in the scale-test it
// added about 12 s to the twin's node, on the VM lane's critical path.
//
// The proxier runs in the calibrating process, against fakes for
// iptables and sysctls, with localhost node ports off (no route_localnet
// write). What it still touches in the namespace: a conntrack listing
// (read only) and the two nfacct counters its first sync ensures, which
// deleteNFAcct removes again when they were not there before.
const (
	ownWorkServices  = 2000
	ownWorkEndpoints = 10
	ownWorkShape     = "2000 Services x 10 endpoints"
	ownWorkRuns      = 5
)

// ownWorkNode is the node the calibration's proxier runs as, and the
// endpoints' node: kpsim's fake pods all run on the node under test.
const ownWorkNode = "kpsim-calibrate"

// calibrateOwnWork times ownWorkRuns first syncs, each by a new proxier.
func calibrateOwnWork(ctx context.Context) (CalibrationKind, error) {
	var counters []string // created by the calibration
	if acct, err := nfacct.New(); err == nil {
		for _, name := range ownWorkNFAcctCounters {
			if _, err := acct.Get(name); errors.Is(err, nfacct.ErrObjectNotFound) {
				counters = append(counters, name)
			}
		}
	}
	defer func() {
		for _, name := range counters {
			if err := deleteNFAcct(name); err != nil {
				klog.Background().Error(err, "Undoing the own-work calibration")
			}
		}
	}()
	svcs, slices := ownWorkObjects(ownWorkServices, ownWorkEndpoints)
	// One sync first, untimed: in six runs at 400 x 4 the first was 14-49%
	// slower than the median of the rest in the VM (where code is
	// translated the first time it runs) and up to 46% on the host, while
	// kube-proxy's process runs code this process has already run.
	if _, err := ownWorkSync(ctx, svcs, slices); err != nil {
		return CalibrationKind{}, err
	}
	op := "kube-proxy's own work in a first sync of " + ownWorkShape + ": upstream's iptables proxier against upstream's fake iptables (restores taken unparsed), outside the fake's calls (CPU work, the proxier's own share; after one untimed sync)"
	return sampleRuns(ctx, op, ownWorkRuns, func() (time.Duration, error) {
		return ownWorkSync(ctx, svcs, slices)
	})
}

// ownWorkSync builds a proxier, hands it the objects as its informers
// would and returns how long its first sync spent outside the fake
// iptables' calls.
func ownWorkSync(ctx context.Context, svcs []*v1.Service, slices []*discovery.EndpointSlice) (time.Duration, error) {
	cfg, err := DefaultConfiguration()
	if err != nil {
		return 0, err
	}
	cfg.IPTables.LocalhostNodePorts = utilptr.To(false)
	calls := &kernelCalls{}
	ipt := newTimedIPTables(discardRestores{iptablestest.NewFake()}, calls)
	p, err := newIPTablesProxier(ctx, cfg, ipt, sysctltest.NewFake(), proxyutil.NewDetectLocalByCIDR("10.252.0.0/16"),
		ownWorkNode, net.IPv4(10, 251, 0, 1), &events.FakeRecorder{}, nil)
	if err != nil {
		return 0, fmt.Errorf("the calibration's iptables proxier: %w", err)
	}
	for _, s := range svcs {
		p.OnServiceAdd(s)
	}
	for _, s := range slices {
		p.OnEndpointSliceAdd(s)
	}
	// As the informers do: the Services' handler is told first, and its
	// sync returns at once; the slices' one is the first sync.
	p.OnServiceSynced()
	before := len(calls.snapshot())
	start := time.Now()
	p.OnEndpointSlicesSynced()
	d := time.Since(start)
	made := calls.snapshot()[before:]
	restored := false
	for _, c := range made {
		d -= c.Duration
		if c.Err != "" && c.Method != "ChainExists" {
			return 0, fmt.Errorf("the calibration's proxier: %s: %s", c.Method, c.Err)
		}
		restored = restored || c.Method == "RestoreAll"
	}
	if !restored {
		return 0, fmt.Errorf("the calibration's proxier made no RestoreAll in its first sync (%d calls)", len(made))
	}
	return d, nil
}

// discardRestores is upstream's fake iptables taking RestoreAll's input
// without parsing it. The fake checks every jump against every chain,
// which took 5.5 s a sync at 2000 Services x 10 endpoints on the host
// (kube-proxy's own work: 0.1 s) and 0.1 s at 400 x 4 (own work: 10 ms):
// time outside the sample, but wall time in every node. Each calibration
// sync has a fake of its own, so nothing reads what a restore left.
type discardRestores struct{ *iptablestest.FakeIPTables }

func (discardRestores) RestoreAll([]byte, utiliptables.FlushFlag, utiliptables.RestoreCountersFlag) error {
	return nil
}

// ownWorkObjects are services Services of endpoints endpoints each on
// ownWorkNode, shaped as kpsim's scenarios make them: a ClusterIP Service
// with one TCP port, one EndpointSlice of ready endpoints. Addresses are
// in 10.254.0.0/16 (Services) and 10.253.0.0/16 (endpoints).
func ownWorkObjects(services, endpoints int) ([]*v1.Service, []*discovery.EndpointSlice) {
	var svcs []*v1.Service
	var slices []*discovery.EndpointSlice
	for i := range services {
		name := fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "calibrate", Name: name, UID: types.UID(fmt.Sprintf("calibrate-svc-%d", i))},
			Spec: v1.ServiceSpec{
				Type:       v1.ServiceTypeClusterIP,
				ClusterIP:  calibrationAddr("10.254", i),
				ClusterIPs: []string{calibrationAddr("10.254", i)},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				Ports:      []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		})
		s := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "calibrate", Name: name + "-1",
				Labels: map[string]string{discovery.LabelServiceName: name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: utilptr.To("http"), Protocol: utilptr.To(v1.ProtocolTCP), Port: utilptr.To[int32](8080)}},
		}
		for j := range endpoints {
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{
				Addresses:  []string{calibrationAddr("10.253", i*endpoints+j)},
				Conditions: discovery.EndpointConditions{Ready: utilptr.To(true), Serving: utilptr.To(true), Terminating: utilptr.To(false)},
				NodeName:   utilptr.To(ownWorkNode),
			})
		}
		slices = append(slices, s)
	}
	return svcs, slices
}

// ownWorkNFAcctCounters are the nfacct counters the iptables proxier's
// first sync ensures.
var ownWorkNFAcctCounters = []string{
	metrics.IPTablesCTStateInvalidDroppedNFAcctCounter,
	metrics.LocalhostNodePortAcceptedNFAcctCounter,
}

// deleteNFAcct deletes the nfacct counter name in the calling thread's
// network namespace (NFNL_MSG_ACCT_DEL; upstream's nfacct package can
// only create and read them).
func deleteNFAcct(name string) error {
	const msgAcctDel = 3 // NFNL_MSG_ACCT_DEL, include/uapi/linux/netfilter/nfnetlink_acct.h
	const attrName = 1   // NFACCT_NAME
	req := nl.NewNetlinkRequest(msgAcctDel|unix.NFNL_SUBSYS_ACCT<<8, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(attrName, nl.ZeroTerminated(name)))
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		return fmt.Errorf("delete nfacct counter %s: %w", name, err)
	}
	return nil
}
