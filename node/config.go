package node

import (
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
)

// proxyConfig maps a scenario's proxy options (spec.proxy, then the mode
// entry's overrides) onto kube-proxy's defaulted configuration, and runs
// kube-proxy's own validation on the result.
func proxyConfig(common, override scenarios.ProxyOptions) (*kubeproxyconfig.KubeProxyConfiguration, error) {
	cfg, err := proxier.DefaultConfiguration()
	if err != nil {
		return nil, err
	}
	for _, o := range []scenarios.ProxyOptions{common, override} {
		if o.MinSyncPeriod != nil {
			cfg.MinSyncPeriod.Duration = o.MinSyncPeriod.Duration
		}
		if o.SyncPeriod != nil {
			cfg.SyncPeriod.Duration = o.SyncPeriod.Duration
		}
		if o.MasqueradeAll != nil {
			cfg.Linux.MasqueradeAll = *o.MasqueradeAll
		}
		if o.LocalhostNodePorts != nil {
			v := *o.LocalhostNodePorts
			cfg.IPTables.LocalhostNodePorts = &v
		}
		if o.NodePortAddresses != nil {
			cfg.NodePortAddresses = append([]string(nil), o.NodePortAddresses...)
		}
	}
	return cfg, nil
}
