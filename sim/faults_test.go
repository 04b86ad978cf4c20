package sim

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kpsim/kpsim/scenarios"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAPIFaultErrors: the next N matching calls fail with a server error,
// others and later ones go through; churn writes retry through them and the
// API still ends equal to the model.
func TestAPIFaultErrors(t *testing.T) {
	ctx := context.Background()
	s := testScenario(scenarios.ServiceGroup{Name: "web", Count: 4, Endpoints: fixed(3)})
	c := newTestCluster(t, s)
	f, err := c.InjectAPIFault(scenarios.APIFault{Resource: "endpointslices", Verbs: []string{"list", "update"}, Errors: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Services are not matched.
	if _, err := c.Clientset.CoreV1().Services("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list services: %v", err)
	}
	for i := range 2 {
		_, err := c.Clientset.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsInternalError(err) {
			t.Fatalf("list %d: got %v, want an injected internal error", i, err)
		}
	}
	// The third error falls on the churn's first update, which retries.
	e := newTestEngine(t, c)
	muts, err := e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnFlap, Group: "web", Count: 5})
	if err != nil {
		t.Fatalf("churn through the fault: %v", err)
	}
	retries := 0
	for _, m := range muts {
		for _, w := range m.Writes {
			retries += w.Retries
		}
	}
	if retries != 1 {
		t.Errorf("write retries: got %d, want 1", retries)
	}
	if _, err := c.Clientset.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list after the fault was used up: %v", err)
	}
	want := APIFaultCount{Errors: 3, ByVerb: map[string]int{"list": 2, "update": 1}}
	if diff := cmp.Diff(want, f.Count()); diff != "" {
		t.Errorf("fault count (-want +got):\n%s", diff)
	}
	assertAPIEqualsModel(t, c)
}

// TestAPIFaultDelay: delayed calls take at least the delay, only Delayed
// of them.
func TestAPIFaultDelay(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t, testScenario(scenarios.ServiceGroup{Name: "web", Count: 1, Endpoints: fixed(1)}))
	const d = 30 * time.Millisecond
	f, err := c.InjectAPIFault(scenarios.APIFault{Resource: "*", Verbs: []string{"get"}, Delay: scenarios.Duration{Duration: d}, Delayed: 2})
	if err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for range 3 {
		start := time.Now()
		if _, err := c.Clientset.CoreV1().Services("default").Get(ctx, "web-0000", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	if took[0] < d || took[1] < d {
		t.Errorf("delayed gets took %v, want at least %v each", took[:2], d)
	}
	if got := f.Count(); got.Delayed != 2 || got.Errors != 0 {
		t.Errorf("count: got %+v, want 2 delayed", got)
	}
}
