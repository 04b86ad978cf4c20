// Command kpsim-variant builds kpsim against another kube-proxy: a release
// on the Go module proxy (-kube-version v1.36.3) or a local kubernetes
// checkout (-kube-src ../kubernetes), into bin/kpsim-<name>. `make variant`
// runs it from the repository's root.
//
// It never touches go.mod, go.sum or bin/kpsim. The variant's module file
// is build/variants/<name>/go.mod (and go.sum): a copy of the main one
// pointed at the other kube-proxy as `make pin` would, which go build gets
// with -modfile. Releases older than v1.37 build with the tag kube_1_36,
// which selects proxier/upstream_v1_36.go.
//
// When the build fails in kpsim's own code, it says which upstream API
// changed, from the "upstream API:" marks beside the lines the compiler
// points at (explain.go).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	var o options
	flag.StringVar(&o.release, "kube-version", "", "a k8s.io/kubernetes release on the Go module proxy, e.g. v1.36.3")
	flag.StringVar(&o.src, "kube-src", "", "a local kubernetes checkout (its staging modules come from staging/src/k8s.io)")
	flag.StringVar(&o.name, "name", "", "the variant's name, for bin/kpsim-<name> (default: the release, or the checkout's directory name, short commit and -dirty)")
	flag.StringVar(&o.tags, "tags", "auto", `build tags of kpsim's per-release code; "auto" picks them from the release (a checkout: its nearest v1.* tag)`)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kpsim-variant: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "kpsim-variant:", err)
		os.Exit(1)
	}
}

type options struct {
	release, src, name, tags string
}

// source is the kube-proxy a variant is built from.
type source struct {
	// release is a k8s.io/kubernetes version, for -kube-version.
	release string
	// dir, commit and dirty describe a checkout, for -kube-src; commit is
	// empty when dir is not a git checkout. describe is its nearest
	// v1.* tag ("" when none is reachable).
	dir, commit, describe string
	dirty                 bool
}

// String names the source in messages.
func (s source) String() string {
	if s.release != "" {
		return s.release
	}
	v := "the checkout " + s.dir
	if s.commit != "" {
		v += " at " + shortCommit(s.commit)
	}
	if s.dirty {
		v += " with uncommitted changes"
	}
	return v
}

// version is what the per-release code is chosen by.
func (s source) version() string {
	if s.release != "" {
		return s.release
	}
	return s.describe
}

func build(o options) error {
	src, err := resolveSource(o)
	if err != nil {
		return err
	}
	name := o.name
	if name == "" {
		name = defaultName(src)
	}
	if !validName.MatchString(name) {
		return fmt.Errorf("variant name %q: use letters, digits, '.', '_' and '-' (it names bin/kpsim-<name>)", name)
	}
	tags := o.tags
	if tags == "auto" {
		tags = tagsFor(src.version())
		if src.release == "" && src.describe == "" {
			fmt.Fprintf(os.Stderr, "kpsim-variant: %s has no v1.* tag in reach: building with the pinned release's adapters (-tags to choose)\n", src.dir)
		}
	}

	modDir := filepath.Join("build", "variants", name)
	modfile, err := writeModfile(modDir, src)
	if err != nil {
		return err
	}
	out := filepath.Join("bin", "kpsim-"+name)
	args := []string{"build", "-modfile=" + modfile, "-tags=" + tags, "-ldflags=" + ldflags(name, src), "-o", out, "./cmd/kpsim"}
	fmt.Fprintf(os.Stderr, "kpsim-variant: go %s\n", shellJoin(args))
	var output bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = io.MultiWriter(os.Stderr, &output)
	if err := cmd.Run(); err != nil {
		fmt.Fprint(os.Stderr, "\n"+explain(output.String(), src.String(), os.ReadFile))
		return fmt.Errorf("building %s against %s: %w", out, src, err)
	}
	fmt.Fprintf(os.Stderr, "kpsim-variant: built %s against %s (tags %q, module file %s)\n", out, src, tags, modfile)
	return nil
}

var (
	releaseRE = regexp.MustCompile(`^v1\.(\d+)\.\d+(-[0-9A-Za-z.]+)?$`)
	validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

func resolveSource(o options) (source, error) {
	switch {
	case (o.release == "") == (o.src == ""):
		return source{}, errors.New("give one of -kube-version (a release) and -kube-src (a checkout)")
	case o.release != "":
		if !releaseRE.MatchString(o.release) {
			return source{}, fmt.Errorf("-kube-version %q: want a k8s.io/kubernetes release such as v1.36.3", o.release)
		}
		return source{release: o.release}, nil
	}
	dir, err := filepath.Abs(o.src)
	if err != nil {
		return source{}, err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return source{}, fmt.Errorf("-kube-src %s: not a kubernetes checkout: %w", o.src, err)
	}
	s := source{dir: dir}
	// Without git (a copied tree) the variant is still built; its version
	// then says no commit.
	if out, err := git(dir, "rev-parse", "HEAD"); err == nil {
		s.commit = out
		status, err := git(dir, "status", "--porcelain")
		if err != nil {
			return source{}, err
		}
		s.dirty = status != ""
		s.describe, _ = git(dir, "describe", "--tags", "--abbrev=0", "--match", "v1.*")
	}
	return s, nil
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git -C %s %s: %w", dir, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// defaultName is the release, or the checkout's directory name, short
// commit and "-dirty" when it had uncommitted changes.
func defaultName(s source) string {
	if s.release != "" {
		return s.release
	}
	name := filepath.Base(s.dir)
	if s.commit != "" {
		name += "-" + shortCommit(s.commit)
	}
	if s.dirty {
		name += "-dirty"
	}
	return name
}

func shortCommit(c string) string { return c[:min(len(c), 12)] }

// tagsFor picks the build tags of kpsim's per-release code for a
// version: kube_1_36 for v1.36 and older, none (the pinned release's
// code) for v1.37 and later and for an unknown version.
func tagsFor(version string) string {
	m := releaseRE.FindStringSubmatch(version)
	if m == nil {
		return ""
	}
	var minor int
	fmt.Sscan(m[1], &minor)
	if minor <= 36 {
		return "kube_1_36"
	}
	return ""
}

// ldflags sets package proxier's variant variables (proxier/version.go).
// None of the values holds a space, so -X needs no quoting.
func ldflags(name string, s source) string {
	const pkg = "github.com/kpsim/kpsim/proxier."
	f := "-X " + pkg + "variantName=" + name
	if s.commit != "" {
		f += " -X " + pkg + "variantCommit=" + s.commit
	}
	if s.dirty {
		f += " -X " + pkg + "variantDirty=true"
	}
	return f
}

// shellJoin joins args for a command line a shell would split back.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if strings.ContainsAny(a, " '\"") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
