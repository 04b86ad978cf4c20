package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpsim/kpsim/reports"
)

var (
	killSyncSeed = flag.Uint64("kill-sync-seed", 0, "seed of TestPrivilegedKillInSync's trials (0: from the clock; the seed used is logged)")
	killSyncRuns = flag.Int("kill-sync-runs", 0, "runs of TestPrivilegedKillInSync, each one trial per mode (iptables-legacy, nftables); 0 skips it (make test-faults runs 10)")
)

// killSyncScenario is one trial run: kube-proxy is killed (SIGKILL, with
// every program it runs) in the middle of a sync, at a random point, then
// started again; after its next sync the oracle must be equal. %d: seed;
// %d: Services; %s: the kill's random delay bound.
const killSyncScenario = `apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata:
  name: kill-in-sync
spec:
  seed: %d
  modes:
    - {mode: iptables, backend: legacy}
    - {mode: nftables}
  proxy:
    minSyncPeriod: 50ms
    syncPeriod: 2s
  serviceGroups:
    - {name: web, count: %d, endpoints: 2}
  steps:
    - name: kill
      restart: {during: sync, within: %s, timeout: 2m, probes: {services: 4, rate: 20}}
    - name: synced
      sync: {timeout: 2m}
  expectations:
    oracle: equal
`

// TestPrivilegedKillInSync kills kube-proxy in the middle of syncs, trial
// after trial: in its first sync, once it runs iptables-restore or nft,
// after a random delay of up to 100 ms (1000 Services) or 300 ms (2000
// Services, a longer transaction). The restarted kube-proxy's first sync
// then meets whatever the killed one left. Partial syncs are not
// trialled: a step cannot run beside churn, and after a churn step
// kube-proxy has caught up.
// After the restarted kube-proxy's next sync, its dataplane must equal a
// fresh proxier's (the oracle) in every trial. Replay with
// -kill-sync-seed.
func TestPrivilegedKillInSync(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore", "nft")
	if *killSyncRuns == 0 {
		t.Skip("runs a scenario 10 times: make test-faults runs it (-kill-sync-runs 10)")
	}
	seed := *killSyncSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test ./cmd/kpsim -run TestPrivilegedKillInSync -kill-sync-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 13))
	began := time.Now()
	var rows, bad []string
	for run := range *killSyncRuns {
		scenarioSeed := rng.Int64N(1 << 31)
		services, within, when := 1000, "100ms", "1000 Services"
		if run%2 == 1 {
			services, within, when = 2000, "300ms", "2000 Services"
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "kill-in-sync.yaml")
		if err := os.WriteFile(file, fmt.Appendf(nil, killSyncScenario, scenarioSeed, services, within), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		runErr := runCLI(&out, &errOut, "run", file, "--kernel", "host", "--out", filepath.Join(dir, "out"))
		b, err := os.ReadFile(filepath.Join(dir, "out", "result.json"))
		if err != nil {
			t.Fatalf("run %d (scenario seed %d): no result: %v (run: %v)\n%s", run+1, scenarioSeed, err, runErr, errOut.String())
		}
		var res reports.Result
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Modes {
			trial := fmt.Sprintf("run %2d %-15s %-12s seed %-10d", run+1, m.Name, when, scenarioSeed)
			killed := "no lifecycle entry"
			if len(m.Lifecycle) > 0 {
				lc := m.Lifecycle[0]
				if s := lc.Stop; s != nil {
					killed = fmt.Sprintf("killed %.0f ms after a writer started, after %d syncs, running: %s", s.DelaySeconds*1000, s.SyncsBefore, orNone(s.Programs))
				}
				if lc.Error != "" {
					killed += "; error: " + lc.Error
				}
			}
			verdict := "oracle equal"
			switch o := m.Oracle; {
			case m.Error != "":
				verdict = "FAILED: " + m.Error
			case o == nil || !o.Checked:
				verdict = "FAILED: no oracle"
			case !o.Equal:
				verdict = "FAILED: oracle differs:\n" + truncate(o.Diff, 2000)
			}
			rows = append(rows, trial+"  "+killed+"  "+verdict)
			if verdict != "oracle equal" {
				bad = append(bad, trial)
			}
		}
		if runErr != nil && len(bad) == 0 {
			t.Errorf("run %d (scenario seed %d): %v\n%s", run+1, scenarioSeed, runErr, errOut.String())
		}
	}
	t.Logf("trials (seed %d, %s):\n%s", seed, time.Since(began).Round(time.Second), strings.Join(rows, "\n"))
	if len(bad) > 0 {
		t.Errorf("%d of %d trials did not end with the oracle's dataplane (seed %d):\n%s", len(bad), len(rows), seed, strings.Join(bad, "\n"))
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no program (between programs)"
	}
	return strings.Join(s, ", ")
}
