package reports

import (
	"fmt"
	"time"

	"gonum.org/v1/gonum/stat"
)

// MemoryTrend is how the node's resident set moved after the first sync.
type MemoryTrend struct {
	// Samples used, from From to To.
	Samples  int
	From, To time.Time
	// FirstRSS and LastRSS are the first and last sample used, in bytes.
	FirstRSS, LastRSS int64
	// SlopeMiBPerMinute is the least-squares slope of RSS over time
	// (gonum stat.LinearRegression).
	SlopeMiBPerMinute float64
}

// memoryTrendMinSamples: fewer samples (under a minute at one per 5 s)
// give no trend worth printing.
const memoryTrendMinSamples = 12

// MemoryTrend fits the node's RSS samples taken after the end of the
// mode's first sync step (the steady phase: the cluster and the first
// dataplane are built). ok is false with too few samples.
func (m *ModeResult) MemoryTrend() (MemoryTrend, bool) {
	var after time.Time
	for _, st := range m.Steps {
		if st.Action == "sync" {
			after = st.End
			break
		}
	}
	var xs, ys []float64
	var t MemoryTrend
	for _, s := range m.Resources.Memory {
		if s.At.Before(after) || s.RSSBytes == 0 {
			continue
		}
		if t.Samples == 0 {
			t.From, t.FirstRSS = s.At, s.RSSBytes
		}
		t.Samples++
		t.To, t.LastRSS = s.At, s.RSSBytes
		xs = append(xs, s.At.Sub(t.From).Minutes())
		ys = append(ys, float64(s.RSSBytes)/(1<<20))
	}
	if t.Samples < memoryTrendMinSamples {
		return t, false
	}
	_, t.SlopeMiBPerMinute = stat.LinearRegression(xs, ys, nil, false)
	return t, true
}

func (t MemoryTrend) String() string {
	return fmt.Sprintf("RSS %.0f -> %.0f MiB over %s after the first sync, slope %+.2f MiB/min (least squares over %d samples)",
		float64(t.FirstRSS)/(1<<20), float64(t.LastRSS)/(1<<20), t.To.Sub(t.From).Round(time.Second), t.SlopeMiBPerMinute, t.Samples)
}
