package proxier

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/events"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// newIPTables builds the iptables proxier as createProxier in
// cmd/kube-proxy/app/server_linux.go (v1.37.1, lines ~144-181) does for a
// single-stack IPv4 node: utiliptables for IPv4, utilsysctl.New(), the
// ClusterCIDR local detector, initOnly false.
func newIPTables(ctx context.Context, cfg *kubeproxyconfig.KubeProxyConfiguration, opts Options,
	detector proxyutil.LocalTrafficDetector, recorder events.EventRecorder, healthz *healthcheck.ProxyHealthServer,
	calls *kernelCalls,
) (proxy.Provider, Tools, error) {
	backend, tools, err := iptablesBackend(ctx, opts)
	if err != nil {
		return nil, tools, err
	}
	// upstream: ipts := utiliptables.NewBestEffort(); ipts[PrimaryIPFamily].
	// kpsim: the proxier gets the runner wrapped in a timer of every call
	// (kerneltime.go); Proxier.KernelCalls reads the record.
	ipt := newTimedIPTables(utiliptables.New(utiliptables.ProtocolIPv4), calls)
	if err := ipt.Present(); err != nil {
		return nil, tools, fmt.Errorf("iptables (%s backend) not usable: %w", backend, err)
	}
	p, err := newIPTablesProxier(ctx, cfg, ipt, utilsysctl.New(), detector, opts.NodeName, opts.NodeIP, recorder, healthz)
	if err != nil {
		return nil, tools, fmt.Errorf("unable to create iptables proxier: %w", err)
	}
	return p, tools, nil
}

// iptablesBackend puts opts' iptables backend (default legacy) first in
// PATH; iptables and IPVS modes both run the iptables programs.
func iptablesBackend(ctx context.Context, opts Options) (string, Tools, error) {
	backend := opts.Backend
	if backend == "" {
		backend = BackendLegacy
	}
	tools, err := useIPTablesBackend(ctx, opts.ToolsDir, backend)
	if err == nil {
		err = addFaultWrappers(ctx, opts, &tools)
	}
	return backend, tools, err
}

// iptablesPrograms are the names kube-proxy's iptables code runs from PATH.
var iptablesPrograms = []string{
	"iptables", "iptables-save", "iptables-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore",
}

// useIPTablesBackend makes the iptables program names resolve to backend's
// binaries for this process: a directory of symlinks (iptables ->
// iptables-legacy, ...) first in PATH. Only for a process that owns its
// namespaces (a node process): it changes the process environment. The
// directory is created in parent (default os.TempDir()) and removed when
// ctx is done.
func useIPTablesBackend(ctx context.Context, parent, backend string) (Tools, error) {
	tools := Tools{Backend: backend, Binaries: map[string]string{}}
	targets := map[string]string{}
	for _, name := range iptablesPrograms {
		family, rest, _ := strings.Cut(name, "-")
		target := family + "-" + backend
		if rest != "" {
			target += "-" + rest
		}
		path, err := exec.LookPath(target)
		if err != nil {
			return tools, fmt.Errorf("iptables backend %q needs %s (Debian package iptables): %w", backend, target, err)
		}
		targets[name] = path
	}
	dir, err := os.MkdirTemp(parent, "kpsim-iptables-"+backend+"-")
	if err != nil {
		return tools, fmt.Errorf("iptables backend directory: %w", err)
	}
	tools.Dir = dir
	for name, target := range targets {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			os.RemoveAll(dir)
			return tools, fmt.Errorf("iptables backend: %w", err)
		}
	}
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		os.RemoveAll(dir)
		return tools, err
	}
	go func() {
		<-ctx.Done()
		os.RemoveAll(dir)
	}()
	for _, name := range iptablesPrograms {
		path, err := exec.LookPath(name)
		if err != nil {
			return tools, fmt.Errorf("iptables backend: %s not found after PATH change: %w", name, err)
		}
		if filepath.Dir(path) != dir {
			return tools, fmt.Errorf("iptables backend: %s resolves to %s, not %s", name, path, dir)
		}
		resolved, err := filepath.EvalSymlinks(path)
		if err != nil {
			return tools, fmt.Errorf("iptables backend: %w", err)
		}
		// The multi-call binary (xtables-legacy-multi) picks its personality
		// from argv[0], so record the name it is run as as well.
		tools.Binaries[name] = targets[name] + " -> " + resolved
	}
	return tools, nil
}
