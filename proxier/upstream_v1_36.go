//go:build kube_1_36

package proxier

// upstream.go's functions for kube-proxy v1.36 (see there). v1.36's
// NewProxier and NewNodeManager take the configuration's fields one by
// one, as v1.36's cmd/kube-proxy/app/server.go and server_linux.go pass
// them; and its utiliptables.Interface still has HasRandomFully.

import (
	"context"
	"net"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	"k8s.io/kubernetes/pkg/proxy/nftables"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

func newNodeManager(ctx context.Context, client kubernetes.Interface, nodeName string,
	cfg *kubeproxyconfig.KubeProxyConfiguration,
) (*proxy.NodeManager, error) {
	// upstream API: proxy.NewNodeManager's signature (v1.36: resync period and whether to watch pod CIDRs as separate arguments)
	return proxy.NewNodeManager(ctx, client, cfg.ConfigSyncPeriod.Duration, nodeName,
		cfg.DetectLocalMode == kubeproxyconfig.LocalModeNodeCIDR)
}

func newIPTablesProxier(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration,
	ipt utiliptables.Interface, sysctl utilsysctl.Interface, detector proxyutil.LocalTrafficDetector,
	nodeName string, nodeIP net.IP, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, error) {
	// upstream API: iptables.NewProxier's signature (v1.36: sync periods, masquerade and node port settings as separate arguments)
	p, err := iptables.NewProxier(ctx, v1.IPv4Protocol, ipt, sysctl,
		cfg.SyncPeriod.Duration, cfg.MinSyncPeriod.Duration, cfg.Linux.MasqueradeAll,
		*cfg.IPTables.LocalhostNodePorts, int(*cfg.IPTables.MasqueradeBit), detector,
		nodeName, nodeIP, recorder, healthz, cfg.NodePortAddresses, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func newNFTablesProxier(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration,
	detector proxyutil.LocalTrafficDetector,
	nodeName string, nodeIP net.IP, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, error) {
	// upstream API: nftables.NewProxier's signature (v1.36: sync periods, masquerade and node port settings as separate arguments)
	p, err := nftables.NewProxier(ctx, v1.IPv4Protocol,
		cfg.SyncPeriod.Duration, cfg.MinSyncPeriod.Duration, cfg.Linux.MasqueradeAll,
		int(*cfg.NFTables.MasqueradeBit), detector,
		nodeName, nodeIP, recorder, healthz, cfg.NodePortAddresses, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func newIPVSProxier(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration,
	ipt utiliptables.Interface, ipvsInterface utilipvs.Interface, ipsetInterface utilipset.Interface,
	detector proxyutil.LocalTrafficDetector,
	nodeName string, nodeIP net.IP, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, error) {
	// upstream API: ipvs.NewProxier's signature (v1.36: sync periods, IPVS, masquerade and node port settings as separate arguments)
	p, err := ipvs.NewProxier(ctx, v1.IPv4Protocol, ipt, ipvsInterface, ipsetInterface, utilsysctl.New(),
		cfg.SyncPeriod.Duration, cfg.MinSyncPeriod.Duration, cfg.IPVS.ExcludeCIDRs, cfg.IPVS.StrictARP,
		cfg.IPVS.TCPTimeout.Duration, cfg.IPVS.TCPFinTimeout.Duration, cfg.IPVS.UDPTimeout.Duration,
		cfg.Linux.MasqueradeAll, int(*cfg.IPTables.MasqueradeBit), detector,
		nodeName, nodeIP, recorder, healthz, cfg.IPVS.Scheduler, cfg.NodePortAddresses, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// upstream API: utiliptables.Interface's method set (v1.36 has HasRandomFully, v1.37 dropped it).
// timedIPTables forwards it unrecorded: it only reports a capability
// found when the runner was built.
func (t *timedIPTables) HasRandomFully() bool { return t.inner.HasRandomFully() }
