package orchestrator

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLayers holds the dependency rules of README.md's layout: each
// package of this module imports only the packages below it. Test files
// are left out (a test may drive a package from above).
func TestLayers(t *testing.T) {
	const module = "github.com/kpsim/kpsim/"
	allowed := map[string][]string{
		"toolexec":      {},
		"remoteapi":     {},
		"scenarios":     {},
		"sim":           {"scenarios"},
		"proxier/rules": {"toolexec"},
		"proxier":       {"scenarios", "proxier/rules", "toolexec"},
		"reports":       {"scenarios", "proxier/rules"},
		"netns":         {"toolexec"},
		"vm":            {"netns"},
		"node":          {"scenarios", "sim", "proxier", "proxier/rules", "netns", "reports", "toolexec", "remoteapi"},
		"orchestrator":  {"scenarios", "proxier", "proxier/rules", "netns", "vm", "node", "reports", "toolexec"},
		"cmd/kpsim":     {"scenarios", "proxier", "netns", "orchestrator", "reports"},
		// Builds variants with go build: nothing of kpsim.
		"cmd/kpsim-variant": {},
	}
	for pkg, ok := range allowed {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no Go files (%v)", pkg, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				dep, internal := strings.CutPrefix(path, module)
				if internal && !slices.Contains(ok, dep) {
					t.Errorf("%s imports %s: package %s may import only %v of this module", name, path, pkg, ok)
				}
			}
		}
	}
}
