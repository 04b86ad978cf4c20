package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// procSys is where sysctls live. Network sysctls under it belong to the
// network namespace of the thread that opens the file.
const procSys = "/proc/sys"

// nodeSysctls are the sysctls a node has (set by the kubelet, kube-proxy or
// the distribution) that the proxiers rely on. Order matters: defaults
// before interfaces are created so new interfaces inherit them.
var nodeSysctls = []struct {
	key, value string
	optional   bool // older kernels lack it per namespace
}{
	{key: "net/ipv4/ip_forward", value: "1"},
	// kube-proxy sets it for NodePorts on localhost.
	{key: "net/ipv4/conf/all/route_localnet", value: "1"},
	// Replies and DNAT'ed packets take asymmetric paths in some probes.
	{key: "net/ipv4/conf/all/rp_filter", value: "0"},
	{key: "net/ipv4/conf/default/rp_filter", value: "0"},
	// Probes of a removed endpoint or a REJECTed service must fail at once
	// every time: no ICMP rate limit (per peer, and global via the mask).
	{key: "net/ipv4/icmp_ratelimit", value: "0", optional: true},
	{key: "net/ipv4/icmp_ratemask", value: "0", optional: true},
}

// writeSysctl writes a sysctl given by its path below /proc/sys
// ("net/ipv4/ip_forward"). It must only be called in a node process, or on a
// thread locked into one of its namespaces.
func writeSysctl(key, value string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// readSysctl reads a sysctl given by its path below /proc/sys.
func readSysctl(key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func sysctlPath(key string) (string, error) {
	key = strings.TrimPrefix(key, "/")
	if !strings.Contains(key, "/") {
		// Dotted form (net.ipv4.ip_forward); paths keep dots in names.
		key = strings.ReplaceAll(key, ".", "/")
	}
	p := filepath.Join(procSys, key)
	if !strings.HasPrefix(p, procSys+"/") {
		return "", fmt.Errorf("sysctl %q is outside %s", key, procSys)
	}
	return p, nil
}
