package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// A before/after comparison runs every mode with each variant's binary in
// turn (A B A B ...), Repeat times, so that a shared machine's drift falls
// on both. Each run's node (and its oracle) is the variant's binary
// re-executed: the same harness around other kube-proxy code. Variant
// binaries must come from the same kpsim source, which the node protocol's
// version check enforces.

// variant is one resolved binary of a comparison.
type variant struct {
	scenarios.Variant
	// path is Binary made absolute.
	path string
	// version is what `kpsim version` of the binary printed.
	version string
}

// resolveVariants applies --variants and --repeat to s and checks each
// binary runs, before anything is created. Nil without variants.
func resolveVariants(file string, s *scenarios.Scenario, o Options) ([]variant, error) {
	where := file + ": spec.variants"
	if len(o.Variants) > 0 {
		s.Spec.Variants, where = o.Variants, "--variants"
		if errs := scenarios.CheckVariants(field.NewPath("--variants"), o.Variants); len(errs) > 0 {
			return nil, badInput(errs.ToAggregate())
		}
	}
	if o.Repeat < 0 {
		return nil, badInput(fmt.Errorf("--repeat %d: must not be negative", o.Repeat))
	}
	if o.Repeat > 0 {
		if len(s.Spec.Variants) == 0 {
			return nil, badInput(errors.New("--repeat repeats the runs of variants: give --variants or spec.variants"))
		}
		s.Spec.Repeat = o.Repeat
	}
	var out []variant
	for i, v := range s.Spec.Variants {
		vr := variant{Variant: v}
		var err error
		if vr.path, err = filepath.Abs(v.Binary); err == nil {
			vr.version, err = binaryVersion(vr.path)
		}
		if err != nil {
			return nil, badInput(fmt.Errorf("%s[%d] (%s): binary %s: %w", where, i, v.Name, v.Binary, err))
		}
		out = append(out, vr)
	}
	return out, nil
}

// binaryVersion runs `BINARY version`: the binary must be an executable
// kpsim, and what it prints says what it was built from.
func binaryVersion(path string) (string, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return "", err
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return "", errors.New("is not an executable file")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, path, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w (is it a kpsim binary? make variant builds one)", path, err)
	}
	return strings.Join(strings.Fields(strings.TrimSpace(string(b))), " "), nil
}

// variantRuns runs every mode entry Runs() times with each variant,
// alternating; each run in its own directory, <variant>-<run>.
func (r *run) variantRuns() []reports.ModeResult {
	var out []reports.ModeResult
	runs := r.main.s.Runs()
	for _, m := range r.modes {
		for n := 1; n <= runs; n++ {
			for _, v := range r.variants {
				if r.ctx.Err() != nil {
					return out
				}
				sub := fmt.Sprintf("%s-%d", v.Name, n)
				p := r.main
				p.dir, p.binary = filepath.Join(r.main.dir, sub), v.path
				info := &reports.VariantRun{Entry: m.Name, Variant: v.Name, Run: n, Dir: sub}
				fmt.Fprintf(r.stderr, "variant %s, run %d/%d: %s\n", v.Name, n, runs, m.Name)
				var mr reports.ModeResult
				if err := os.MkdirAll(p.dir, 0o755); err != nil {
					mr = reports.ModeResult{Mode: m.Mode, Backend: m.Backend, Error: err.Error()}
				} else {
					mr = r.runMode(p, m)
				}
				mr.Name, mr.Variant = info.RunName(), info
				out = append(out, mr)
			}
		}
	}
	return out
}

// variantInfo is the variants as the result records them.
func (r *run) variantInfo() []reports.Variant {
	var out []reports.Variant
	for _, v := range r.variants {
		out = append(out, reports.Variant{Name: v.Name, Binary: v.Binary, Version: v.version})
	}
	return out
}
