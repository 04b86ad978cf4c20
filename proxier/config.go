package proxier

import (
	"fmt"
	"runtime/debug"

	"k8s.io/kube-proxy/config/v1alpha1"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	proxyconfigscheme "k8s.io/kubernetes/pkg/proxy/apis/config/scheme"
	"k8s.io/kubernetes/pkg/proxy/apis/config/validation"
)

// DefaultConfiguration returns kube-proxy's default configuration, obtained
// the way cmd/kube-proxy obtains it (newKubeProxyConfiguration in
// cmd/kube-proxy/app/options.go): an empty v1alpha1 object defaulted by the
// kube-proxy config scheme and converted to the internal type. Callers
// change the fields a scenario sets and pass the result to Validate.
func DefaultConfiguration() (*kubeproxyconfig.KubeProxyConfiguration, error) {
	versioned := &v1alpha1.KubeProxyConfiguration{}
	proxyconfigscheme.Scheme.Default(versioned)
	internal, err := proxyconfigscheme.Scheme.ConvertToVersion(versioned, kubeproxyconfig.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("defaulting kube-proxy configuration: %w", err)
	}
	return internal.(*kubeproxyconfig.KubeProxyConfiguration), nil
}

// Validate runs kube-proxy's own configuration validation, so a setting
// kube-proxy would refuse is refused by kpsim too, before anything starts.
func Validate(cfg *kubeproxyconfig.KubeProxyConfiguration) error {
	if errs := validation.Validate(cfg); len(errs) > 0 {
		return fmt.Errorf("invalid kube-proxy configuration: %w", errs.ToAggregate())
	}
	return nil
}

// KubernetesVersion is the k8s.io/kubernetes module version this binary
// was built with (the proxiers under test), read from the build info so
// it cannot drift from go.mod. A replace (a fork, a local checkout) is
// shown with its target.
func KubernetesVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build info)"
	}
	for _, m := range info.Deps {
		if m.Path != "k8s.io/kubernetes" {
			continue
		}
		if r := m.Replace; r != nil {
			return fmt.Sprintf("%s => %s %s", m.Version, r.Path, r.Version)
		}
		return m.Version
	}
	return "unknown (k8s.io/kubernetes not linked)"
}
