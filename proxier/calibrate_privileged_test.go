package proxier

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/kubernetes/pkg/proxy/util/nfacct"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/toolexec"
)

const calibrateNodeMain = "proxier-calibrate-test"

func init() { netns.RegisterNodeMain(calibrateNodeMain, runCalibrateNode) }

type calibrateOutput struct {
	Calibration Calibration `json:"calibration"`
	// Before and After are the node's nat table and ipsets around
	// Calibrate; TableRules is the nat table's rule count while the
	// table restore's input is in place.
	Before, After string
	TableRules    int
}

func runCalibrateNode(ctx context.Context, env *netns.NodeEnv) error {
	state := func() (string, error) {
		var b strings.Builder
		for _, c := range [][]string{{"iptables-legacy-save", "-t", "nat"}, {"ipset", "list"}} {
			out, err := exec.CommandContext(ctx, c[0], c[1:]...).Output()
			if err != nil {
				return "", fmt.Errorf("%v: %w", c, err)
			}
			// iptables-save's header and footer carry the time.
			for _, l := range strings.Split(string(out), "\n") {
				if !strings.HasPrefix(l, "#") {
					b.WriteString(l + "\n")
				}
			}
		}
		// The nfacct counters: the own-work proxier's first sync ensures
		// two.
		if acct, err := nfacct.New(); err == nil {
			counters, err := acct.List()
			if err != nil {
				return "", fmt.Errorf("nfacct list: %w", err)
			}
			for _, c := range counters {
				fmt.Fprintf(&b, "nfacct %s\n", c.Name)
			}
		}
		return b.String(), nil
	}
	var out calibrateOutput
	var err error
	if out.Before, err = state(); err != nil {
		return err
	}
	out.Calibration = Calibrate(ctx, &toolexec.Exec{}, BackendLegacy)
	if out.After, err = state(); err != nil {
		return err
	}
	add, del := tableRestoreInput(tableRestoreServices, tableRestoreEndpoints)
	for i, in := range []string{add, del} {
		cmd := exec.CommandContext(ctx, "iptables-legacy-restore", "--noflush")
		cmd.Stdin = strings.NewReader(in)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("restore: %w: %s", err, b)
		}
		if i == 0 {
			b, err := exec.CommandContext(ctx, "iptables-legacy-save", "-t", "nat").Output()
			if err != nil {
				return err
			}
			out.TableRules = strings.Count(string(b), "\n-A ")
		}
	}
	return env.SetResult(out)
}

// TestPrivilegedCalibrate runs the calibration in a node: every kind is
// measured with its samples, the table restore really programs its rules,
// and the node's nat table, ipsets and nfacct counters are as they were
// afterwards.
func TestPrivilegedCalibrate(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "iptables-legacy-save", "ipset")
	var out calibrateOutput
	runTestNode(t, calibrateNodeMain, struct{}{}, &out)
	for _, kind := range []string{CalibrationCPU, CalibrationTableRestore, KernelKindIPTables, KernelKindIPSet, KernelKindIPVS} {
		k, ok := out.Calibration.Kinds[kind]
		if !ok {
			t.Errorf("no %s calibration (kinds %v)", kind, out.Calibration.Kinds)
			continue
		}
		t.Logf("%s: median %.3f ms over %d runs: %s", kind, 1000*k.Median, k.Runs, k.Op)
		if len(k.Samples) != k.Runs || k.Min <= 0 || k.Min > k.Median || k.Median > k.Max {
			t.Errorf("%s: %d samples for %d runs, min %g median %g max %g", kind, len(k.Samples), k.Runs, k.Min, k.Median, k.Max)
		}
	}
	if tr, small := out.Calibration.Kinds[CalibrationTableRestore], out.Calibration.Kinds[KernelKindIPTables]; tr.Median <= small.Median {
		t.Errorf("a %d-rule table restore (%g s) costs no more than a 50-rule chain's (%g s)", tableRestoreServices*(1+3*tableRestoreEndpoints), tr.Median, small.Median)
	}
	if want := tableRestoreServices * (1 + 3*tableRestoreEndpoints); out.TableRules != want {
		t.Errorf("the table restore programmed %d nat rules, want %d", out.TableRules, want)
	}
	if out.Before != out.After {
		t.Errorf("the calibration left the node changed:\nbefore:\n%s\nafter:\n%s", out.Before, out.After)
	}
}
