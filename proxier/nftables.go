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
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
)

// newNFTables builds the nftables proxier as createProxier in
// cmd/kube-proxy/app/server_linux.go (v1.37.1, lines ~232-266) does for a
// single-stack IPv4 node. knftables runs "nft" from PATH, through the
// program timer when opts.ExecTimer is set.
func newNFTables(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration, opts Options,
	detector proxyutil.LocalTrafficDetector, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
) (proxy.Provider, Tools, *execTimer, error) {
	tools := Tools{Binaries: map[string]string{}}
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, tools, nil, fmt.Errorf("nftables mode needs nft (Debian package nftables): %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	tools.Binaries["nft"] = path
	if err := addFaultWrappers(ctx, opts, &tools); err != nil {
		return nil, tools, nil, err
	}
	timer, err := addExecTimer(ctx, opts, &tools, "nft")
	if err != nil {
		return nil, tools, nil, err
	}
	p, err := newNFTablesProxier(ctx, cfg, detector, opts.NodeName, opts.NodeIP, recorder, healthz)
	if err != nil {
		return nil, tools, nil, fmt.Errorf("unable to create nftables proxier: %w", err)
	}
	return p, tools, timer, nil
}
