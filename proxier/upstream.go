//go:build !kube_1_36

package proxier

// The upstream APIs whose shape differs between the kube-proxy releases
// kpsim builds against, as the pinned release (v1.37) has them.
// upstream_v1_36.go holds the same functions for v1.36, selected by the
// build tag kube_1_36 that `make variant` sets for v1.36 and older.
//
// Every use of such an API is marked "upstream API: <what>". When a
// release changes one, `make variant` quotes the mark above the line the
// compiler points at, so the failure says what upstream changed.

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

// newNodeManager is NewProxyServer's call (cmd/kube-proxy/app/server.go).
func newNodeManager(ctx context.Context, client kubernetes.Interface, nodeName string,
	cfg *kubeproxyconfig.KubeProxyConfiguration,
) (*proxy.NodeManager, error) {
	// upstream API: proxy.NewNodeManager's signature (v1.37: the whole *KubeProxyConfiguration)
	return proxy.NewNodeManager(ctx, client, nodeName, cfg)
}

// newIPTablesProxier is createProxier's call for a single-stack IPv4 node
// (cmd/kube-proxy/app/server_linux.go): initOnly false; kube-proxy's
// sysctl is utilsysctl.New().
func newIPTablesProxier(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration,
	ipt utiliptables.Interface, sysctl utilsysctl.Interface, detector proxyutil.LocalTrafficDetector,
	nodeName string, nodeIP net.IP, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, error) {
	// upstream API: iptables.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)
	p, err := iptables.NewProxier(ctx, cfg, v1.IPv4Protocol, ipt, sysctl, detector,
		nodeName, nodeIP, recorder, healthz, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newNFTablesProxier: as newIPTablesProxier.
func newNFTablesProxier(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration,
	detector proxyutil.LocalTrafficDetector,
	nodeName string, nodeIP net.IP, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, error) {
	// upstream API: nftables.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)
	p, err := nftables.NewProxier(ctx, cfg, v1.IPv4Protocol, detector,
		nodeName, nodeIP, recorder, healthz, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newIPVSProxier: as newIPTablesProxier.
func newIPVSProxier(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration,
	ipt utiliptables.Interface, ipvsInterface utilipvs.Interface, ipsetInterface utilipset.Interface,
	detector proxyutil.LocalTrafficDetector,
	nodeName string, nodeIP net.IP, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, error) {
	// upstream API: ipvs.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)
	p, err := ipvs.NewProxier(ctx, cfg, v1.IPv4Protocol, ipt, ipvsInterface, ipsetInterface,
		utilsysctl.New(), detector, nodeName, nodeIP, recorder, healthz, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}
