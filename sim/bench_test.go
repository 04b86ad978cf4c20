package sim

import (
	"testing"

	"github.com/kpsim/kpsim/scenarios"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// BenchmarkBuild2000x10 builds the reference fake cluster: 2000
// ClusterIP/TCP Services x 10 endpoints (2000 Services + 2000 slices in
// the clientset). Target: <= 0.5 s per op.
func BenchmarkBuild2000x10(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		s := testScenario(scenarios.ServiceGroup{Name: "svc", Count: 2000, Endpoints: fixed(10)})
		if _, err := New(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClientsetAdd compares the two fake clientset constructors on
// the 2000x10 objects; it is why New uses NewSimpleClientset.
func BenchmarkClientsetAdd(b *testing.B) {
	c, err := New(testScenario(scenarios.ServiceGroup{Name: "svc", Count: 2000, Endpoints: fixed(10)}))
	if err != nil {
		b.Fatal(err)
	}
	objs := c.DesiredObjects()
	for _, tc := range []struct {
		name string
		new  func(...runtime.Object) *fake.Clientset
	}{
		{"NewSimpleClientset", fake.NewSimpleClientset},
		{"NewClientset", fake.NewClientset},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				tc.new(objs...)
			}
		})
	}
}
