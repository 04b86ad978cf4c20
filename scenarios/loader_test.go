package scenarios

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestShippedScenarios checks every scenario file kpsim ships loads
// cleanly: a broken example is a broken promise.
func TestShippedScenarios(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ci, _ := filepath.Glob("ci/*.yaml")
	files = append(files, ci...)
	for _, name := range []string{"smoke.yaml", "2000x10.yaml", "churn.yaml", "policies.yaml", "sweep.yaml", "soak.yaml", "ci/faults.yaml"} {
		if _, err := os.Stat(name); err != nil {
			t.Errorf("scenario %s is missing: %v", name, err)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if _, err := LoadFile(f); err != nil {
				t.Errorf("%v", err)
			}
		})
	}
}

// TestInvalidScenarios loads every malformed file under testdata/invalid
// and compares the whole error text with its golden file. Each error must
// point at a line or a field path, so the user knows where to look.
func TestInvalidScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("want at least 20 malformed scenarios, found %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := LoadFile(f)
			if err == nil {
				t.Fatal("loaded without error")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want ErrorList: %v", err, err)
			}
			for _, e := range list {
				if e.Line == 0 && e.Field == "" {
					t.Errorf("error names neither a line nor a field: %v", e)
				}
				if e.File != f {
					t.Errorf("error names file %q, want %q", e.File, f)
				}
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			got := err.Error() + "\n"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden file (run go test -update): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("error text differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	s, err := Load("min.yaml", []byte("apiVersion: kpsim.dev/v1alpha1\nkind: Scenario\nmetadata: {name: min}\nspec:\n  serviceGroups: [{name: web, count: 2}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := s.Spec.ServiceGroups[0]
	want := ServiceGroup{
		Name:                  "web",
		Namespace:             "default",
		Count:                 2,
		Endpoints:             &IntRange{Min: 1, Max: 1},
		Ports:                 []ServicePort{{Name: "http", Port: 80, TargetPort: 8080, Protocol: corev1.ProtocolTCP}},
		Type:                  corev1.ServiceTypeClusterIP,
		SessionAffinity:       corev1.ServiceAffinityNone,
		InternalTrafficPolicy: corev1.ServiceInternalTrafficPolicyCluster,
		Conditions:            ConditionMix{Ready: 1},
	}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("defaulted group (-want +got):\n%s", diff)
	}
	if got := []string{s.Spec.Modes[0].Name, s.Spec.Modes[1].Name, s.Spec.Modes[2].Name}; !cmp.Equal(got, []string{"iptables-legacy", "nftables", "ipvs"}) {
		t.Errorf("default modes = %v", got)
	}
	if s.Spec.Seed != 1 || s.Spec.Cluster.ServiceCIDR != DefaultServiceCIDR || s.Spec.Cluster.Node.IP != DefaultNodeIP {
		t.Errorf("cluster defaults not applied: seed %d, %+v", s.Spec.Seed, s.Spec.Cluster)
	}
	if len(s.Spec.Steps) != 1 || s.Spec.Steps[0].Sync == nil || s.Spec.Steps[0].Sync.Timeout.Duration != DefaultSyncTimeout {
		t.Errorf("default steps = %+v", s.Spec.Steps)
	}

	// Default is idempotent.
	before := *s
	Default(s)
	if diff := cmp.Diff(before, *s); diff != "" {
		t.Errorf("second Default changed the scenario:\n%s", diff)
	}
}

func TestDecodeForms(t *testing.T) {
	s, err := Load("forms.yaml", []byte(`apiVersion: kpsim.dev/v1alpha1
kind: Scenario
metadata: {name: forms}
spec:
  cluster:
    otherNodes: [{name: b, zone: z}]
  serviceGroups:
    - {name: fixed, count: 1, endpoints: 7}
    - {name: ranged, count: 1, endpoints: {min: 2, max: 9}, localFraction: 0.25}
  steps:
    - churn: {action: flap, group: fixed, rate: 10, duration: 1m30s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := *s.Spec.ServiceGroups[0].Endpoints; got != (IntRange{7, 7}) {
		t.Errorf("endpoints: 7 decoded as %+v", got)
	}
	if got := *s.Spec.ServiceGroups[1].Endpoints; got != (IntRange{2, 9}) {
		t.Errorf("endpoints range decoded as %+v", got)
	}
	if got := s.Spec.Steps[0].Churn.Duration.Duration; got != 90*time.Second {
		t.Errorf("duration 1m30s decoded as %v", got)
	}
	if got := s.Spec.Steps[0].Name; got != "churn-0" {
		t.Errorf("default step name %q", got)
	}
}
