package orchestrator

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kpsim/kpsim/node"
)

func TestProgressStatus(t *testing.T) {
	var buf bytes.Buffer
	v := newProgressView(&buf, "nftables", time.Now().Add(-90*time.Second), false)
	defer v.close()
	if v.tty {
		t.Fatal("a buffer is not a terminal")
	}
	v.mu.Lock()
	got := v.status()
	v.mu.Unlock()
	if !strings.HasSuffix(got, ": starting") || !strings.HasPrefix(got, "nftables: 1m30s") {
		t.Errorf("before any step: %q", got)
	}
	v.line("nftables: step %d/%d %s", 2, 4, "flaps")
	v.setStep("step 2/4 flaps")
	v.setProgress(node.ProgressEvent{Step: "flaps", Unit: "mutations", Done: 150, OfSeconds: 30, Seconds: 7.5})
	if got := v.status(); !strings.HasSuffix(got, ": step 2/4 flaps: 150 mutations, 8/30s") {
		t.Errorf("churn by duration: %q", got)
	}
	v.mu.Lock()
	v.tty = true // the bar is drawn only on a terminal
	v.mu.Unlock()
	v.setProgress(node.ProgressEvent{Step: "probe", Unit: "Service ports probed", Done: 5, Of: 20})
	if got := v.status(); !strings.HasSuffix(got, ": 5/20 Service ports probed [######..................]") {
		t.Errorf("probe with a bar: %q", got)
	}
	v.mu.Lock()
	v.tty = false
	v.mu.Unlock()
	if !strings.Contains(buf.String(), "nftables: step 2/4 flaps\n") || strings.Contains(buf.String(), "\r") {
		t.Errorf("plain output: %q", buf.String())
	}
}
