package proxier

import (
	"fmt"

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
