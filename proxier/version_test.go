package proxier

import (
	"runtime/debug"
	"testing"
)

func TestKubernetesVersion(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	other := &debug.Module{Path: "k8s.io/api", Version: "v0.37.1"}
	release := func(v string) *debug.Module { return &debug.Module{Path: "k8s.io/kubernetes", Version: v} }
	checkout := &debug.Module{Path: "k8s.io/kubernetes", Version: "v1.37.1",
		Replace: &debug.Module{Path: "/src/kubernetes", Version: "(devel)"}} // as go build records it
	fork := &debug.Module{Path: "k8s.io/kubernetes", Version: "v1.37.1",
		Replace: &debug.Module{Path: "example.com/fork/kubernetes", Version: "v1.37.1-fork.1"}}
	for _, tc := range []struct {
		name    string
		deps    []*debug.Module
		variant string
		commit  string
		dirty   bool
		want    string
	}{
		{name: "main build", deps: []*debug.Module{other, release("v1.37.1")}, want: "v1.37.1"},
		{name: "release variant", deps: []*debug.Module{release("v1.36.3")}, variant: "v1.36.3",
			want: "v1.36.3 (variant v1.36.3)"},
		{name: "clean checkout", deps: []*debug.Module{checkout}, variant: "kubernetes-0123456", commit: commit,
			want: "checkout /src/kubernetes at commit " + commit + " (variant kubernetes-0123456)"},
		{name: "dirty checkout", deps: []*debug.Module{checkout}, variant: "kubernetes-0123456-dirty", commit: commit, dirty: true,
			want: "checkout /src/kubernetes at commit " + commit + " with uncommitted changes (variant kubernetes-0123456-dirty)"},
		// go mod edit -replace by hand, as README.md once said: no commit known.
		{name: "checkout by hand", deps: []*debug.Module{checkout}, want: "checkout /src/kubernetes"},
		{name: "relative checkout", deps: []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.37.1",
			Replace: &debug.Module{Path: "../kubernetes", Version: "(devel)"}}}, want: "checkout ../kubernetes"},
		{name: "replacement module", deps: []*debug.Module{fork},
			want: "v1.37.1 => example.com/fork/kubernetes v1.37.1-fork.1"},
		{name: "not linked", deps: []*debug.Module{other}, want: "unknown (k8s.io/kubernetes not linked)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kubernetesVersion(tc.deps, tc.variant, tc.commit, tc.dirty); got != tc.want {
				t.Errorf("kubernetesVersion() = %q, want %q", got, tc.want)
			}
		})
	}
}
