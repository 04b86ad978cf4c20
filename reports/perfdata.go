package reports

import (
	"encoding/json"
	"fmt"
	"io"
)

// PerfData is ClusterLoader2's result format (perf-tests
// clusterloader2/pkg/measurement/util PerfData), which perfdash and other
// dashboards read.
type PerfData struct {
	// Version is the format version, "v1".
	Version   string     `json:"version"`
	DataItems []DataItem `json:"dataItems"`
	// Labels apply to every item.
	Labels map[string]string `json:"labels,omitempty"`
}

// DataItem is one measured series: named figures (Perc50, Perc90, Perc99,
// Average) in one unit, told apart by their labels.
type DataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels,omitempty"`
}

// Metric label values of the items WritePerfData writes.
const (
	MetricSyncProxyRules           = "SyncProxyRules"
	MetricSyncProxyRulesPartial    = "SyncProxyRulesPartial"
	MetricFirstSync                = "FirstSyncProxyRules"
	MetricNetworkProgrammingE2E    = "NetworkProgrammingLatencyEndToEnd"
	MetricNetworkProgrammingKProxy = "NetworkProgrammingLatencyKubeProxy"
)

// NewPerfData converts a run: per mode that ran, the sync durations (all,
// partial only, and the first sync), kpsim's end-to-end network
// programming latency and kube-proxy's mean, in milliseconds. Labels are
// Metric, Mode (the mode entry name), ProxyMode, and for the run the
// scenario, kernel and kube-proxy version. Samples with no values are left
// out.
func NewPerfData(r *Result) *PerfData {
	pd := &PerfData{Version: "v1", DataItems: []DataItem{}, Labels: map[string]string{
		"RunID":            r.RunID,
		"Scenario":         r.Scenario.Name,
		"Seed":             fmt.Sprint(r.Scenario.Seed),
		"Kernel":           r.Environment.KernelRelease,
		"KernelKind":       r.Environment.Kernel,
		"KubeProxyVersion": r.Environment.KubeProxyVersion,
	}}
	for i := range r.Modes {
		m := &r.Modes[i]
		if m.Skipped != "" {
			continue
		}
		labels := func(metric string) map[string]string {
			return map[string]string{"Metric": metric, "Mode": m.Name, "ProxyMode": m.Mode}
		}
		percentiles := func(metric string, xs []float64) {
			if len(xs) == 0 {
				return
			}
			s := Summarize(xs)
			pd.DataItems = append(pd.DataItems, DataItem{
				Data: map[string]float64{"Perc50": ms(s.P50), "Perc90": ms(s.P90), "Perc99": ms(s.P99)},
				Unit: "ms", Labels: labels(metric)})
		}
		partial := false
		percentiles(MetricSyncProxyRules, m.SyncSeconds(nil))
		percentiles(MetricSyncProxyRulesPartial, m.SyncSeconds(&partial))
		if f := m.FirstSync(); f != nil {
			pd.DataItems = append(pd.DataItems, DataItem{Data: map[string]float64{"Value": ms(f.Seconds)}, Unit: "ms", Labels: labels(MetricFirstSync)})
		}
		percentiles(MetricNetworkProgrammingE2E, m.EndToEndSeconds())
		if np := m.NetworkProgramming; np.Count > 0 {
			pd.DataItems = append(pd.DataItems, DataItem{Data: map[string]float64{"Average": ms(np.MeanSeconds)}, Unit: "ms", Labels: labels(MetricNetworkProgrammingKProxy)})
		}
	}
	return pd
}

func ms(s float64) float64 { return s * 1000 }

// WritePerfData writes NewPerfData(r) as indented JSON.
func WritePerfData(w io.Writer, r *Result) error {
	data, err := json.MarshalIndent(NewPerfData(r), "", "  ")
	if err != nil {
		return fmt.Errorf("encoding perfdata: %w", err)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}
