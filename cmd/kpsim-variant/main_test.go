package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

func TestTagsFor(t *testing.T) {
	for version, want := range map[string]string{
		"v1.35.4":         "kube_1_36", // the oldest adapter is the nearest; explain says what else changed
		"v1.36.3":         "kube_1_36",
		"v1.36.0-rc.1":    "kube_1_36",
		"v1.37.1":         "",
		"v1.37.2":         "",
		"v1.38.0-alpha.0": "",
		"":                "", // a checkout without a v1.* tag: the pinned release's adapters
	} {
		if got := tagsFor(version); got != want {
			t.Errorf("tagsFor(%q) = %q, want %q", version, got, want)
		}
	}
}

func TestDefaultName(t *testing.T) {
	for _, tc := range []struct {
		src  source
		want string
	}{
		{source{release: "v1.36.3"}, "v1.36.3"},
		{source{dir: "/src/kubernetes", commit: commit}, "kubernetes-0123456789ab"},
		{source{dir: "/src/kubernetes", commit: commit, dirty: true}, "kubernetes-0123456789ab-dirty"},
		{source{dir: "/src/k8s-fork"}, "k8s-fork"}, // not a git checkout
	} {
		if got := defaultName(tc.src); got != tc.want {
			t.Errorf("defaultName(%+v) = %q, want %q", tc.src, got, tc.want)
		}
		if !validName.MatchString(tc.want) {
			t.Errorf("default name %q is not a valid name", tc.want)
		}
	}
}

func TestSourceString(t *testing.T) {
	for _, tc := range []struct {
		src  source
		want string
	}{
		{source{release: "v1.36.3"}, "v1.36.3"},
		{source{dir: "/src/kubernetes", commit: commit, dirty: true}, "the checkout /src/kubernetes at 0123456789ab with uncommitted changes"},
		{source{dir: "/src/kubernetes"}, "the checkout /src/kubernetes"},
	} {
		if got := tc.src.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestLdflags(t *testing.T) {
	const pkg = "github.com/kpsim/kpsim/proxier."
	if got, want := ldflags("v1.36.3", source{release: "v1.36.3"}), "-X "+pkg+"variantName=v1.36.3"; got != want {
		t.Errorf("release: ldflags = %q, want %q", got, want)
	}
	got := ldflags("k-0123", source{dir: "/src/k", commit: commit, dirty: true})
	want := "-X " + pkg + "variantName=k-0123 -X " + pkg + "variantCommit=" + commit + " -X " + pkg + "variantDirty=true"
	if got != want {
		t.Errorf("checkout: ldflags = %q, want %q", got, want)
	}
}

func TestResolveSourceRefuses(t *testing.T) {
	for _, o := range []options{
		{},
		{release: "v1.36.3", src: "../kubernetes"},
		{release: "1.36.3"},
		{release: "v1.36"},
		{src: t.TempDir()}, // no go.mod
	} {
		if _, err := resolveSource(o); err == nil {
			t.Errorf("resolveSource(%+v): no error", o)
		}
	}
}

func TestEdits(t *testing.T) {
	var own goMod
	own.Require = append(own.Require, struct{ Path, Version string }{"k8s.io/kubernetes", "v1.37.1"})
	for _, r := range [][2]string{{"k8s.io/api", "v0.37.1"}, {"k8s.io/gone", "v0.37.1"}, {"k8s.io/utils", "v0.0.1"}} {
		var e struct {
			Old, New struct{ Path, Version string }
		}
		e.Old.Path, e.New.Path, e.New.Version = r[0], r[0], r[1]
		own.Replace = append(own.Replace, e)
	}
	var kube goMod
	for _, r := range [][2]string{{"k8s.io/api", "v0.0.0"}, {"k8s.io/client-go", "v0.0.0"}, {"k8s.io/klog/v2", "v2.130.1"}} {
		kube.Require = append(kube.Require, struct{ Path, Version string }{r[0], r[1]})
	}
	staging := stagingModules(kube)
	if diff := cmp.Diff([]string{"k8s.io/api", "k8s.io/client-go"}, staging); diff != "" {
		t.Fatalf("stagingModules (-want +got):\n%s", diff)
	}
	// k8s.io/gone is a staging pin of the main release only, so it goes;
	// k8s.io/utils is no pin of it and stays.
	release := []string{"-require=k8s.io/kubernetes@v1.36.3",
		"-replace=k8s.io/api=k8s.io/api@v0.36.3", "-replace=k8s.io/client-go=k8s.io/client-go@v0.36.3",
		"-dropreplace=k8s.io/gone"}
	if diff := cmp.Diff(release, edits(own, staging, source{release: "v1.36.3"})); diff != "" {
		t.Errorf("release edits (-want +got):\n%s", diff)
	}
	checkout := []string{"-replace=k8s.io/kubernetes=/src/k",
		"-replace=k8s.io/api=/src/k/staging/src/k8s.io/api", "-replace=k8s.io/client-go=/src/k/staging/src/k8s.io/client-go",
		"-dropreplace=k8s.io/gone"}
	if diff := cmp.Diff(checkout, edits(own, staging, source{dir: "/src/k"})); diff != "" {
		t.Errorf("checkout edits (-want +got):\n%s", diff)
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"build", "-ldflags=-X a=b -X c=d", "it's"})
	if want := `build '-ldflags=-X a=b -X c=d' 'it'\''s'`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}
