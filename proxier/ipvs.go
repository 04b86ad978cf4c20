package proxier

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// newIPVS builds the IPVS proxier as createProxier in
// cmd/kube-proxy/app/server_linux.go (v1.37.1, lines ~183-229) does for a
// single-stack IPv4 node: utilipset.New() and utilipvs.New(), the
// ipvs.CanUseIPVSProxier check with the configured scheduler, utiliptables
// for IPv4 (with opts.Backend's binaries, as iptables mode), utilsysctl.New(),
// the ClusterCIDR local detector, initOnly false.
//
// kpsim: the ipset, IPVS and iptables interfaces the proxier gets are
// wrapped in timers that record every call into calls (ipvs_kerneltime.go,
// kerneltime.go), so a sync splits into IPVS netlink, ipset program runs,
// iptables-restore and the rest.
func newIPVS(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration, opts Options,
	detector proxyutil.LocalTrafficDetector, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
	calls *kernelCalls,
) (proxy.Provider, Tools, error) {
	backend, tools, err := iptablesBackend(ctx, opts)
	if err != nil {
		return nil, tools, err
	}
	// utilipset runs "ipset" from PATH for every call.
	path, err := exec.LookPath(utilipset.IPSetCmd)
	if err != nil {
		return nil, tools, fmt.Errorf("ipvs mode needs ipset (Debian package ipset): %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	tools.Binaries[utilipset.IPSetCmd] = path

	ipsetInterface := newTimedIPSet(utilipset.New(), calls)
	// utilipvs.New returns nil when the IPVS generic netlink family is
	// missing; the wrapper keeps that nil so CanUseIPVSProxier sees it.
	ipvsInterface := newTimedIPVS(utilipvs.New(), calls)
	if err := ipvs.CanUseIPVSProxier(ctx, ipvsInterface, ipsetInterface, cfg.IPVS.Scheduler); err != nil {
		return nil, tools, fmt.Errorf("can't use the IPVS proxier: %w", err)
	}
	// upstream: ipts := utiliptables.NewBestEffort(); ipts[PrimaryIPFamily]
	// (NewBestEffort keeps the families whose Present() succeeds).
	ipt := newTimedIPTables(utiliptables.New(utiliptables.ProtocolIPv4), calls)
	if err := ipt.Present(); err != nil {
		return nil, tools, fmt.Errorf("iptables (%s backend) not usable: %w", backend, err)
	}
	p, err := newIPVSProxier(ctx, cfg, ipt, ipvsInterface, ipsetInterface, detector,
		opts.NodeName, opts.NodeIP, recorder, healthz)
	if err != nil {
		return nil, tools, fmt.Errorf("unable to create proxier: %w", err)
	}
	return p, tools, nil
}
