package proxier

import (
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// What a variant binary was built from, set by `make variant` with
// -ldflags -X (cmd/kpsim-variant); empty in the main build. The build info
// has the k8s.io/kubernetes module and its replacement, but not the commit
// of a replacement that is a local checkout.
var (
	// variantName is the variant's name: the binary is bin/kpsim-<name>.
	variantName string
	// variantCommit is the checkout's HEAD commit (KUBE_SRC builds only).
	variantCommit string
	// variantDirty is "true" when the checkout had uncommitted changes.
	variantDirty string
)

// KubernetesVersion is the k8s.io/kubernetes this binary was built with
// (the proxiers under test), read from the build info so it cannot drift
// from go.mod: a release ("v1.37.1"), a replacement module, or a local
// checkout with its commit. A variant build (`make variant`) adds its name.
func KubernetesVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build info)"
	}
	return kubernetesVersion(info.Deps, variantName, variantCommit, variantDirty == "true")
}

func kubernetesVersion(deps []*debug.Module, name, commit string, dirty bool) string {
	v := "unknown (k8s.io/kubernetes not linked)"
	for _, m := range deps {
		if m.Path != "k8s.io/kubernetes" {
			continue
		}
		switch r := m.Replace; {
		case r == nil:
			v = m.Version
		case isDir(r.Path):
			// A directory (its Version is "(devel)"): the required
			// version says nothing about it.
			v = "checkout " + r.Path
			if commit != "" {
				v += " at commit " + commit
			}
			if dirty {
				v += " with uncommitted changes"
			}
		default:
			v = fmt.Sprintf("%s => %s %s", m.Version, r.Path, r.Version)
		}
	}
	if name != "" {
		v += " (variant " + name + ")"
	}
	return v
}

// isDir tells a directory replacement from a module path, as go.mod does:
// a directory is an absolute path or starts with ./ or ../.
func isDir(path string) bool {
	return filepath.IsAbs(path) || strings.HasPrefix(path, "./") || strings.HasPrefix(path, "../")
}
