package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// goMod is the part of `go mod edit -json` this command reads.
type goMod struct {
	Require []struct{ Path, Version string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

func readGoMod(path string) (goMod, error) {
	var m goMod
	out, err := exec.Command("go", "mod", "edit", "-json", path).Output()
	if err != nil {
		return m, fmt.Errorf("go mod edit -json %s: %w", path, err)
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, fmt.Errorf("go mod edit -json %s: %w", path, err)
	}
	return m, nil
}

// writeModfile writes dir/go.mod and dir/go.sum, copies of the main ones
// pointed at src, and returns the go.mod's path. The main files are only
// read.
func writeModfile(dir string, src source) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	modfile := filepath.Join(dir, "go.mod")
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("run from kpsim's root: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return "", err
		}
	}
	own, err := readGoMod(modfile)
	if err != nil {
		return "", err
	}
	// The other kube-proxy's go.mod lists its staging modules.
	kubeMod := filepath.Join(src.dir, "go.mod")
	if src.release != "" {
		// -modfile: any go.sum line it adds goes to the variant's go.sum.
		out, err := exec.Command("go", "mod", "download", "-modfile="+modfile, "-json", "k8s.io/kubernetes@"+src.release).Output()
		var dl struct{ GoMod, Error string }
		json.Unmarshal(out, &dl) // a failed download still says why in Error
		switch {
		case dl.Error != "":
			return "", fmt.Errorf("go mod download: %s", dl.Error)
		case err != nil:
			return "", fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", src.release, err)
		}
		kubeMod = dl.GoMod
	}
	kube, err := readGoMod(kubeMod)
	if err != nil {
		return "", err
	}
	args := append([]string{"mod", "edit"}, edits(own, stagingModules(kube), src)...)
	if err := goCmd(append(args, modfile)...); err != nil {
		return "", err
	}
	// As `make pin`: the other release may need other versions of
	// kpsim's indirect dependencies, and go.sum lines for them.
	if err := goCmd("mod", "tidy", "-modfile="+modfile); err != nil {
		return "", err
	}
	return modfile, nil
}

// stagingModules are the modules k8s.io/kubernetes requires at v0.0.0:
// those it builds from its own staging/src/k8s.io.
func stagingModules(kube goMod) []string {
	var mods []string
	for _, r := range kube.Require {
		if strings.HasPrefix(r.Path, "k8s.io/") && r.Version == "v0.0.0" {
			mods = append(mods, r.Path)
		}
	}
	return mods
}

// edits are the go mod edit flags that point the main go.mod at src:
// k8s.io/kubernetes is required at the release (or replaced by the
// checkout), each staging module is replaced by the release's v0.X.Y (or
// by the checkout's directory), and a staging pin of the main release
// that src has no module for is dropped. A replace of a module already
// replaced is rewritten in place.
func edits(own goMod, staging []string, src source) []string {
	var flags []string
	if src.release != "" {
		flags = append(flags, "-require=k8s.io/kubernetes@"+src.release)
	} else {
		flags = append(flags, "-replace=k8s.io/kubernetes="+src.dir)
	}
	for _, m := range staging {
		if src.release != "" {
			flags = append(flags, "-replace="+m+"="+m+"@"+stagingVersion(src.release))
		} else {
			flags = append(flags, "-replace="+m+"="+filepath.Join(src.dir, "staging", "src", m))
		}
	}
	var pinned string // the main release's staging version, as make pin sets it
	for _, r := range own.Require {
		if r.Path == "k8s.io/kubernetes" {
			pinned = stagingVersion(r.Version)
		}
	}
	for _, r := range own.Replace {
		if r.New.Path == r.Old.Path && r.New.Version == pinned && !slices.Contains(staging, r.Old.Path) {
			flags = append(flags, "-dropreplace="+r.Old.Path)
		}
	}
	return flags
}

// stagingVersion is the staging modules' version of a k8s.io/kubernetes
// release: v1.36.3 -> v0.36.3.
func stagingVersion(release string) string {
	return "v0." + strings.TrimPrefix(release, "v1.")
}

func goCmd(args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
