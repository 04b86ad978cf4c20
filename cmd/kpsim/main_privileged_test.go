package main

import (
	"bytes"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/reports"
)

func TestMain(m *testing.M) {
	// Node processes are this test binary re-executed (see package netns).
	if netns.Init() {
		return
	}
	// The fault test runs kpsim as a separate orchestrator process: this
	// test binary re-executed as the kpsim command (see runAsKpsim).
	if code, ok := runAsKpsim(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// runCLI runs the kpsim command line with args, as main does.
func runCLI(stdout, stderr io.Writer, args ...string) error {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.Execute()
}

func requireRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (sudo make deps)", tool)
		}
	}
}

// TestPrivilegedRunEndToEnd runs a small scenario through kpsim run for
// iptables (legacy) and nftables, and checks what a user relies on: every
// probe reached an endpoint of the probed Service, every sync was recorded
// exactly, the dataplane after churn equals a fresh proxier's, and the
// host is unchanged.
func TestPrivilegedRunEndToEnd(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "nft")
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := runCLI(&out, &errOut, "run", "testdata/e2e.yaml", "--kernel", "host", "--out", dir)
	if err != nil {
		t.Fatalf("run failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	r, err := reports.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Host.Checked || !r.Host.Unchanged {
		t.Errorf("host check: %+v", r.Host)
	}
	if len(r.Modes) != 2 {
		t.Fatalf("got %d mode results, want 2", len(r.Modes))
	}
	for _, m := range r.Modes {
		t.Run(m.Name, func(t *testing.T) {
			if m.Error != "" {
				t.Fatalf("mode failed: %s", m.Error)
			}
			// Recorded syncs against kube-proxy's own histogram.
			var n int
			var sum float64
			for _, s := range m.Syncs {
				n += max(s.Merged, 1)
				sum += s.Seconds
			}
			if uint64(n) != m.KubeProxyTotals.SyncCount {
				t.Errorf("recorded %d syncs, kube-proxy's histogram counted %d", n, m.KubeProxyTotals.SyncCount)
			}
			if tot := m.KubeProxyTotals.SyncSeconds; math.Abs(sum-tot) > 0.01*tot {
				t.Errorf("recorded syncs sum to %.6fs, kube-proxy's histogram to %.6fs", sum, tot)
			}
			if n < 2 || !m.Syncs[0].Full {
				t.Errorf("want a full first sync and later syncs, got %+v", m.Syncs)
			}
			// End to end: the new pods of the rolling update and scale-up
			// were reached through the ClusterIP, each timed.
			if xs := m.EndToEndSeconds(); len(xs) == 0 {
				t.Errorf("no end-to-end latency samples: %+v", m.EndToEnd)
			}
			for _, s := range m.EndToEnd {
				if s.Error != "" || (s.Superseded == 0 && (s.Seconds <= 0 || s.Probes == 0 || !s.Appear)) {
					t.Errorf("end-to-end sample %+v", s)
				}
			}
			if m.NetworkProgramming.Count == 0 {
				t.Errorf("no network programming latency observed although churn stamped trigger times")
			}
			// Behaviour: every probe reached one of the Service's endpoints.
			if len(m.Probes) != 4+1+2 {
				t.Errorf("got %d probe results, want 7 (4 web + 1 dns + 2 from the node)", len(m.Probes))
			}
			for _, p := range m.Probes {
				if p.OK != p.Sent || p.Sent == 0 || p.Stray != 0 {
					t.Errorf("probe %s %s from %s: %d/%d ok, %d stray, failures %v", p.Step, p.Service, p.From, p.OK, p.Sent, p.Stray, p.Failures)
				}
				if p.From == "pod" && p.SourcePreserved != p.OK {
					t.Errorf("probe %s %s: %d of %d pod-to-service replies saw a masqueraded source", p.Step, p.Service, p.OK-p.SourcePreserved, p.OK)
				}
			}
			// Three probe steps, each with a share test over its Services
			// and per-probe checks, all passing.
			if len(m.Distributions) != 3 {
				t.Errorf("got %d probe-step verdicts, want 3", len(m.Distributions))
			}
			for _, sd := range m.Distributions {
				if !sd.Passed || len(sd.Checks) == 0 || sd.Report == nil || len(sd.Report.Services) == 0 {
					t.Errorf("probe step %s: passed %v, %d checks, report %+v", sd.Step, sd.Passed, len(sd.Checks), sd.Report)
				}
				if sd.ImpliedError != "" {
					t.Errorf("probe step %s: rule-implied shares: %s", sd.Step, sd.ImpliedError)
				}
				if sd.Report != nil {
					for _, s := range sd.Report.Services {
						if s.RuleError == nil || *s.RuleError > 1e-6 {
							t.Errorf("%s: rule-implied error %v, want exact shares within 1e-6", s.Service, s.RuleError)
						}
					}
				}
			}
			if m.Oracle == nil || !m.Oracle.Checked || !m.Oracle.Equal {
				t.Errorf("oracle: %+v", m.Oracle)
			}
			if len(m.Rules) == 0 || len(m.RulesAfterFirstSync) == 0 {
				t.Errorf("no rule counts: %v / %v", m.RulesAfterFirstSync, m.Rules)
			}
			// kube-proxy's costs are read inside its own process, the
			// programs it ran (iptables-restore or nft) included; the
			// harness's beside them, each process with its own.
			res := m.Resources
			if res.CPUSeconds <= 0 || res.ChildCPUSeconds <= 0 || res.MaxRSSBytes <= 0 || len(res.Memory) == 0 {
				t.Errorf("kube-proxy's resources %+v: want its CPU, its programs' CPU, its peak RSS and memory samples", res)
			}
			if h := res.Harness; h == nil || h.NodeCPUSeconds <= 0 || h.DataplaneCPUSeconds <= 0 || h.DataplaneMaxRSSBytes <= 0 || h.Programs == 0 {
				t.Errorf("harness resources %+v: want the node's, the dataplane's and the rule readers' apart", h)
			}
		})
	}
	if !strings.Contains(out.String(), "How these were obtained") {
		t.Errorf("summary does not say how its numbers were obtained:\n%s", out.String())
	}
}

// TestPrivilegedRunMissedThreshold: an unreachable threshold makes kpsim
// run exit 1 and name it.
func TestPrivilegedRunMissedThreshold(t *testing.T) {
	requireRoot(t, "nft")
	scenario := filepath.Join(t.TempDir(), "strict.yaml")
	if err := os.WriteFile(scenario, []byte(`apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: strict}
spec:
  modes: [{mode: nftables}]
  serviceGroups: [{name: web, count: 2, endpoints: 2}]
  expectations:
    firstSync: 1ns
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := runCLI(&out, &errOut, "run", scenario, "--kernel", "host", "--out", t.TempDir())
	if code := exitCode(err); code != exitExpectation {
		t.Fatalf("want exit %d, got %v\n%s%s", exitExpectation, err, out.String(), errOut.String())
	}
	if !strings.Contains(err.Error(), "firstSync nftables") {
		t.Errorf("error %q does not name the missed threshold", err)
	}
	if !strings.Contains(out.String(), "MISSED") {
		t.Errorf("summary does not show the miss:\n%s", out.String())
	}
}
