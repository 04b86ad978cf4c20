package proxier

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/proxy/metrics"
)

// TestDefaultGatherReadsUpstreamMetrics: the recorder's own registry
// reads upstream's sync histogram (what kube-proxy observes), and only
// the dozen families the recorder watches: no process or Go runtime
// collectors. (It leaves metrics.RegisterMetrics alone: that runs once
// per process, for the mode a test's proxier starts.)
func TestDefaultGatherReadsUpstreamMetrics(t *testing.T) {
	count := func() (uint64, int) {
		fams, err := defaultGather()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, f := range fams {
			if f.GetName() == metricSync {
				for _, m := range f.GetMetric() {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
		return n, len(fams)
	}
	before, _ := count()
	metrics.SyncProxyRulesLatency.WithLabelValues("IPv4").Observe(0.25)
	after, fams := count()
	if after != before+1 {
		t.Errorf("sync histogram count %d after one observation, was %d", after, before)
	}
	legacy, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if fams > 12 || fams >= len(legacy) {
		t.Errorf("recorder's registry gathers %d families (legacyregistry %d): want at most the dozen it watches", fams, len(legacy))
	}
}

// BenchmarkDefaultGather is what one recorder poll costs kube-proxy's
// process; BenchmarkLegacyGather what legacyregistry's whole gatherer
// (process and Go runtime collectors included) cost before.
func BenchmarkDefaultGather(b *testing.B) {
	for b.Loop() {
		if _, err := defaultGather(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLegacyGather(b *testing.B) {
	for b.Loop() {
		if _, err := legacyregistry.DefaultGatherer.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
