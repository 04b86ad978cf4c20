package proxier

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Command faults make runs of the programs the proxiers exec (iptables-
// restore, iptables, nft, ipset) fail on demand, to see how kube-proxy
// reports a failed restore and whether its retries bring the dataplane
// back. kube-proxy is not touched: a directory of wrapper scripts comes
// first in the node's PATH, and each wrapper either fails or execs the
// program its name resolved to before. knftables looks nft up once, when
// the proxier is built, so the wrappers go in before it.
//
// The armed failures are files, one per failure, so that concurrent runs
// take each at most once without a lock: a wrapper that removes a slot file
// fails (and leaves an "injected" file), one that finds none runs the real
// program. Runs that only read (list, save, --version, -V, version) always
// go through: they are kpsim's own rule readers or kube-proxy's checks.

// FaultPrograms are the programs ArmCommandFault can fail.
var FaultPrograms = []string{"iptables-restore", "iptables", "nft", "ipset"}

const wrapperScript = `#!/bin/sh
# kpsim command fault wrapper for %[1]s: fails a run while failures are
# armed (slot files), otherwise runs %[2]s.
case " $* " in
*" list "*|*" save "*|*" --version "*|*" -V "*|*" version "*) exec %[2]q "$@" ;;
esac
for slot in %[3]q/%[1]s.armed.*; do
	[ -e "$slot" ] || break
	if rm "$slot" 2>/dev/null; then
		cat >/dev/null
		: >"%[3]s/%[1]s.injected.${slot##*.}"
		echo "kpsim: injected failure of %[1]s (command fault)" >&2
		exit 1
	fi
done
exec %[2]q "$@"
`

// wrapPrograms puts a wrapper for each of names first in PATH, in a new
// directory under parent (default os.TempDir()) removed when ctx is done.
// Each wrapper execs the file its name resolves to now: call it after any
// other PATH change (the iptables backend directory). It returns the
// directory and, per name, the program the wrapper runs.
func wrapPrograms(ctx context.Context, parent string, names []string) (string, map[string]string, error) {
	real := map[string]string{}
	for _, name := range names {
		if !slices.Contains(FaultPrograms, name) {
			return "", nil, fmt.Errorf("command fault: %q is not one of %v", name, FaultPrograms)
		}
		path, err := exec.LookPath(name)
		if err != nil {
			return "", nil, fmt.Errorf("command fault for %s: %w", name, err)
		}
		real[name] = path
	}
	dir, err := os.MkdirTemp(parent, "kpsim-faults-")
	if err != nil {
		return "", nil, fmt.Errorf("command fault directory: %w", err)
	}
	for name, path := range real {
		script := fmt.Sprintf(wrapperScript, name, path, dir)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			os.RemoveAll(dir)
			return "", nil, fmt.Errorf("command fault wrapper: %w", err)
		}
	}
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	go func() {
		<-ctx.Done()
		os.RemoveAll(dir)
	}()
	return dir, real, nil
}

// addFaultWrappers wraps opts.FaultPrograms (if any) and records them in
// tools.
func addFaultWrappers(ctx context.Context, opts Options, tools *Tools) error {
	if len(opts.FaultPrograms) == 0 {
		return nil
	}
	dir, real, err := wrapPrograms(ctx, opts.ToolsDir, opts.FaultPrograms)
	if err != nil {
		return err
	}
	tools.FaultDir = dir
	for name, n := range opts.FaultsArmed {
		if err := armSlots(dir, name, n); err != nil {
			return err
		}
	}
	for name, path := range real {
		if prev, ok := tools.Binaries[name]; ok {
			path = prev // already "path -> resolved"
		}
		tools.Binaries[name] = filepath.Join(dir, name) + " -> " + path
	}
	return nil
}

// ArmCommandFault makes the next failures runs of name that change rules
// fail. name must be one of the Options.FaultPrograms the proxier was
// started with.
func (p *Proxier) ArmCommandFault(name string, failures int) error {
	dir := p.tools.FaultDir
	if dir == "" || !slices.Contains(p.faultPrograms, name) {
		return fmt.Errorf("command fault: %s was not wrapped when the proxier started (Options.FaultPrograms %v)", name, p.faultPrograms)
	}
	return armSlots(dir, name, failures)
}

// armSlots adds n failure slots for name: files named name.armed.<unique>.
func armSlots(dir, name string, n int) error {
	for range n {
		f, err := os.CreateTemp(dir, name+".armed.*")
		if err != nil {
			return fmt.Errorf("command fault: %w", err)
		}
		f.Close()
	}
	return nil
}

// CommandFaults returns, per wrapped program, how many runs the wrappers
// failed so far and how many armed failures are left.
func (p *Proxier) CommandFaults() map[string]CommandFaultCount {
	if p.tools.FaultDir == "" {
		return nil
	}
	entries, _ := os.ReadDir(p.tools.FaultDir)
	out := map[string]CommandFaultCount{}
	for _, name := range p.faultPrograms {
		out[name] = CommandFaultCount{}
	}
	for _, e := range entries {
		name, kind, ok := strings.Cut(e.Name(), ".")
		if !ok {
			continue
		}
		c := out[name]
		switch {
		case strings.HasPrefix(kind, "injected."):
			c.Injected++
		case strings.HasPrefix(kind, "armed."):
			c.Armed++
		default:
			continue
		}
		out[name] = c
	}
	return out
}

// CommandFaultCount counts one program's command faults.
type CommandFaultCount struct {
	// Injected runs failed by the wrapper.
	Injected int `json:"injected"`
	// Armed failures not yet used.
	Armed int `json:"armed"`
}
