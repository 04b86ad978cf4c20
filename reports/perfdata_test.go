package reports

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWritePerfDataShape(t *testing.T) {
	r := testResult(t)
	var buf bytes.Buffer
	if err := WritePerfData(&buf, r); err != nil {
		t.Fatal(err)
	}
	// Decode into ClusterLoader2's shape, strictly.
	var pd struct {
		Version   string `json:"version"`
		DataItems []struct {
			Data   map[string]float64 `json:"data"`
			Unit   string             `json:"unit"`
			Labels map[string]string  `json:"labels"`
		} `json:"dataItems"`
		Labels map[string]string `json:"labels"`
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pd); err != nil {
		t.Fatal(err)
	}
	if pd.Version != "v1" || pd.Labels["Kernel"] != "6.18.44-fc-v669" {
		t.Errorf("version %q, labels %v", pd.Version, pd.Labels)
	}
	got := map[string][]string{}
	for _, it := range pd.DataItems {
		if it.Unit != "ms" {
			t.Errorf("%v: unit %q", it.Labels, it.Unit)
		}
		var keys []string
		for k, v := range it.Data {
			keys = append(keys, k)
			if v <= 0 || math.IsNaN(v) {
				t.Errorf("%v: %s = %v", it.Labels, k, v)
			}
		}
		slices.Sort(keys)
		got[it.Labels["Mode"]+" "+it.Labels["Metric"]] = keys
	}
	perc := []string{"Perc50", "Perc90", "Perc99"}
	want := map[string][]string{}
	for _, mode := range []string{"iptables-legacy", "iptables-nft", "nftables"} {
		want[mode+" SyncProxyRules"] = perc
		want[mode+" SyncProxyRulesPartial"] = perc
		want[mode+" FirstSyncProxyRules"] = []string{"Value"}
		want[mode+" NetworkProgrammingLatencyEndToEnd"] = perc
		want[mode+" NetworkProgrammingLatencyKubeProxy"] = []string{"Average"}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("data items (-want +got):\n%s", diff)
	}

	// The figures are the summary's, in milliseconds.
	s := Summarize(r.Modes[0].SyncSeconds(nil))
	for _, it := range pd.DataItems {
		if it.Labels["Mode"] == "iptables-legacy" && it.Labels["Metric"] == "SyncProxyRules" {
			if it.Data["Perc99"] != s.P99*1000 {
				t.Errorf("Perc99 %v, want %v", it.Data["Perc99"], s.P99*1000)
			}
		}
	}
}
