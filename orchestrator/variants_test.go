package orchestrator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/scenarios"
)

// TestResolveVariants: binaries are checked before anything is created,
// and the errors name where the variant came from.
func TestResolveVariants(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kpsim-good")
	if err := os.WriteFile(good, []byte("#!/bin/sh\necho 'kube-proxy (k8s.io/kubernetes) v1.36.3'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(yaml string) *scenarios.Scenario {
		s, err := scenarios.Load("ab.yaml", []byte("apiVersion: kpsim.dev/v1alpha1\nkind: Scenario\nmetadata: {name: ab}\nspec:\n  serviceGroups: [{name: web, count: 1}]\n"+yaml))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	vs, err := resolveVariants("ab.yaml", load(""), Options{Variants: []scenarios.Variant{{Name: "base", Binary: good}, {Name: "new", Binary: good}}, Repeat: 3})
	if err != nil || len(vs) != 2 || vs[1].version != "kube-proxy (k8s.io/kubernetes) v1.36.3" {
		t.Fatalf("resolveVariants = %+v, %v", vs, err)
	}
	for _, c := range []struct {
		name, yaml string
		o          Options
		want       string
	}{
		{"missing binary", "  variants: [{name: a, binary: " + good + "}, {name: b, binary: " + dir + "/nope}]\n", Options{}, "ab.yaml: spec.variants[1] (b): binary " + dir + "/nope: stat"},
		{"not executable", "", Options{Variants: []scenarios.Variant{{Name: "a", Binary: good}, {Name: "b", Binary: plain}}}, "--variants[1] (b): binary " + plain + ": is not an executable file"},
		{"one variant", "", Options{Variants: []scenarios.Variant{{Name: "a", Binary: good}}}, "--variants: Invalid value: 1: a comparison needs at least two variants"},
		{"repeat alone", "", Options{Repeat: 3}, "--repeat repeats the runs of variants"},
	} {
		_, err := resolveVariants("ab.yaml", load(c.yaml), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || KindOf(err) != BadInput {
			t.Errorf("%s: %v (kind %v), want a bad-input error containing %q", c.name, err, KindOf(err), c.want)
		}
	}
}
