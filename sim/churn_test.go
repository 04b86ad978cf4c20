package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kpsim/kpsim/scenarios"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func newTestEngine(t testing.TB, c *Cluster, opts ...EngineOption) *Engine {
	t.Helper()
	e, err := c.NewEngine(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func runSteps(t testing.TB, ctx context.Context, e *Engine, steps []scenarios.ChurnStep) {
	t.Helper()
	for _, st := range steps {
		if _, err := e.Run(ctx, st); err != nil {
			t.Fatalf("Run(%+v): %v", st, err)
		}
	}
}

// mixedSteps cycles every action over the groups, count mutations each.
func mixedSteps(rng *rand.Rand, groups []string, total, count int) []scenarios.ChurnStep {
	var steps []scenarios.ChurnStep
	for n := 0; n < total; n += count {
		steps = append(steps, scenarios.ChurnStep{
			Action: scenarios.ChurnActions[rng.IntN(len(scenarios.ChurnActions))],
			Group:  groups[rng.IntN(len(groups))],
			Count:  min(count, total-n),
		})
	}
	return steps
}

// TestPropertyUniqueAddresses generates many random scenarios, churns
// them, and checks after each that no address or port is handed out twice
// and every one lies in its range, and that the API equals the model.
func TestPropertyUniqueAddresses(t *testing.T) {
	types := []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}
	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			var groups []scenarios.ServiceGroup
			var names []string
			for i := range 1 + rng.IntN(3) {
				lo := rng.IntN(5)
				g := scenarios.ServiceGroup{
					Name:      fmt.Sprintf("g%d", i),
					Namespace: []string{"default", "other"}[rng.IntN(2)],
					Count:     rng.IntN(30),
					Endpoints: &scenarios.IntRange{Min: lo, Max: lo + rng.IntN(130)},
					Type:      types[rng.IntN(len(types))],
					Headless:  rng.IntN(8) == 0,
					Conditions: scenarios.ConditionMix{
						Ready: 0.6, ServingTerminating: 0.2, NotReady: 0.2,
					},
					LocalFraction: ptr.To(rng.Float64()),
				}
				if g.Headless {
					g.Type = corev1.ServiceTypeClusterIP
				}
				if g.Type == corev1.ServiceTypeLoadBalancer && rng.IntN(2) == 0 {
					g.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
				groups = append(groups, g)
				names = append(names, g.Name)
			}
			s := testScenario(groups...)
			s.Spec.Seed = seed
			s.Spec.Cluster.ServiceCIDR = "10.96.0.0/22"
			s.Spec.Cluster.PodCIDR = "10.244.0.0/18"
			s.Spec.Cluster.LoadBalancerCIDR = "192.168.100.0/24"
			s.Spec.Cluster.OtherNodes = []scenarios.Node{{Name: "n1", Zone: "zone-b"}, {Name: "n2"}}
			c := newTestCluster(t, s)
			assertUnique(t, c)
			e := newTestEngine(t, c)
			runSteps(t, context.Background(), e, mixedSteps(rng, names, 600, 25))
			assertUnique(t, c)
			assertAPIEqualsModel(t, c)
		})
	}
}

// apiObjects lists every Service and EndpointSlice in the clientset, keyed
// by kind/namespace/name.
func apiObjects(t testing.TB, c *Cluster) map[string]runtime.Object {
	t.Helper()
	ctx := context.Background()
	out := map[string]runtime.Object{}
	svcs, err := c.Clientset.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		out["Service/"+svcs.Items[i].Namespace+"/"+svcs.Items[i].Name] = &svcs.Items[i]
	}
	sls, err := c.Clientset.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sls.Items {
		out["EndpointSlice/"+sls.Items[i].Namespace+"/"+sls.Items[i].Name] = &sls.Items[i]
	}
	return out
}

func assertAPIEqualsModel(t testing.TB, c *Cluster) {
	t.Helper()
	want := map[string]runtime.Object{}
	for _, o := range c.DesiredObjects() {
		switch o := o.(type) {
		case *corev1.Service:
			want["Service/"+o.Namespace+"/"+o.Name] = o
		case *discoveryv1.EndpointSlice:
			want["EndpointSlice/"+o.Namespace+"/"+o.Name] = o
		}
	}
	if diff := cmp.Diff(want, apiObjects(t, c)); diff != "" {
		t.Errorf("API differs from the model (-model +api):\n%s", diff)
	}
}

// TestChurnDeterministic: the same scenario and seed give the same
// mutation sequence and the same final objects.
func TestChurnDeterministic(t *testing.T) {
	run := func() ([]Mutation, []runtime.Object) {
		s := testScenario(
			scenarios.ServiceGroup{Name: "a", Count: 30, Endpoints: &scenarios.IntRange{Min: 1, Max: 120}, Conditions: scenarios.ConditionMix{Ready: 0.8, NotReady: 0.2}},
			scenarios.ServiceGroup{Name: "b", Count: 3, Type: corev1.ServiceTypeNodePort},
		)
		s.Spec.Seed = 42
		c := newTestCluster(t, s)
		e := newTestEngine(t, c)
		runSteps(t, context.Background(), e, mixedSteps(rand.New(rand.NewPCG(5, 5)), []string{"a", "b"}, 2000, 50))
		log := e.Log()
		for i := range log {
			// Times differ between runs; everything else must not.
			m := &log[i]
			m.Due, m.TriggerTime, m.Start, m.End, m.Blocked = time.Time{}, time.Time{}, time.Time{}, time.Time{}, 0
			for j := range m.Writes {
				m.Writes[j].Start, m.Writes[j].End = time.Time{}, time.Time{}
			}
		}
		objs := c.DesiredObjects()
		for _, o := range objs {
			if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
				delete(sl.Annotations, TriggerTimeAnnoKey)
			}
		}
		return log, objs
	}
	log1, objs1 := run()
	log2, objs2 := run()
	if len(log1) != 2000 {
		t.Errorf("got %d mutations, want 2000", len(log1))
	}
	if diff := cmp.Diff(log1, log2, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("mutation sequences differ (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(objs1, objs2); diff != "" {
		t.Errorf("final objects differ (-first +second):\n%s", diff)
	}
}

func TestChurnActions(t *testing.T) {
	ctx := context.Background()
	s := testScenario(scenarios.ServiceGroup{Name: "web", Count: 1, Endpoints: fixed(100)})
	c := newTestCluster(t, s)
	e := newTestEngine(t, c)

	// Growing past 100 endpoints creates a second slice.
	ms, err := e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnScaleUp, Group: "web", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := ms[0].Writes; len(got) != 1 || got[0].Verb != VerbCreate || got[0].Name != "web-0-1" {
		t.Errorf("scaleUp past 100 writes %+v, want create of web-0-1", got)
	}
	sl := listSlices(t, c, "default")["web-0-1"]
	if sl == nil || len(sl.Endpoints) != 1 || sl.Annotations[TriggerTimeAnnoKey] != ms[0].TriggerTime.UTC().Format(time.RFC3339Nano) {
		t.Errorf("new slice = %+v", sl)
	}
	// Scaling back down empties the extra slice, which is deleted...
	for len(listSlices(t, c, "default")) > 1 {
		if _, err := e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnScaleDown, Group: "web", Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// ...and scaleDown never removes the last endpoint.
	ms, err = e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnScaleDown, Group: "web", Count: 200})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Snapshot().Services[0].EndpointCount(); n != 1 {
		t.Errorf("after scaling down: %d endpoints, want 1", n)
	}
	if last := ms[len(ms)-1]; last.Skipped == "" || len(last.Writes) != 0 {
		t.Errorf("scaleDown at one endpoint = %+v, want skipped", last)
	}
	// Flap toggles ready and serving together.
	before := c.Snapshot().Services[0].Endpoints()[0]
	ms, _ = e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnFlap, Group: "web", Count: 1})
	after := c.Snapshot().Services[0].Endpoints()[0]
	if before.Condition != Ready || after.Condition != NotReady || len(ms[0].Changed) != 1 || ms[0].Changed[0] != before.IP {
		t.Errorf("flap: %v -> %v, changed %v", before.Condition, after.Condition, ms[0].Changed)
	}
	// A rolling update replaces the address.
	ms, _ = e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnRollingUpdate, Group: "web", Count: 1})
	now := c.Snapshot().Services[0].Endpoints()[0]
	if now.IP == after.IP || ms[0].Removed[0] != after.IP || ms[0].Added[0] != now.IP {
		t.Errorf("rollingUpdate: %s -> %s, log %+v", after.IP, now.IP, ms[0])
	}
	// Deleting goes no lower than zero Services; creating adds them back.
	ms, _ = e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnDeleteServices, Group: "web", Count: 3})
	if ms[0].Skipped != "" || ms[1].Skipped == "" || len(c.Snapshot().Services) != 0 {
		t.Errorf("deleteServices: %+v", ms)
	}
	ms, _ = e.Run(ctx, scenarios.ChurnStep{Action: scenarios.ChurnCreateServices, Group: "web", Count: 2})
	if ms[0].Service != "default/web-1" || ms[1].Service != "default/web-2" || len(ms[0].Writes) != 2 {
		t.Errorf("createServices: %+v", ms)
	}
	assertAPIEqualsModel(t, c)
	assertUnique(t, c)
}

func TestRunRate(t *testing.T) {
	c := newTestCluster(t, testScenario(scenarios.ServiceGroup{Name: "web", Count: 5, Endpoints: fixed(3)}))
	e := newTestEngine(t, c)
	ms, err := e.Run(context.Background(), scenarios.ChurnStep{Action: scenarios.ChurnFlap, Group: "web", Rate: 200, Count: 20, Jitter: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	// Every due time is within ±2.5ms (jitter 0.5 of 5ms) of start+i*5ms,
	// so two of them differ from their nominal spacing by at most 5ms.
	for i, m := range ms {
		if m.Start.Before(m.Due) {
			t.Errorf("mutation %d started at %v before it was due at %v", i, m.Start, m.Due)
		}
		d := m.Due.Sub(ms[0].Due) - time.Duration(i)*5*time.Millisecond
		if d < -5*time.Millisecond || d > 5*time.Millisecond {
			t.Errorf("mutation %d due %v off its nominal spacing, want within the jitter", i, d)
		}
	}
	if _, err := e.Run(context.Background(), scenarios.ChurnStep{Action: scenarios.ChurnFlap, Group: "web", Rate: 1000, Duration: scenarios.D(20 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
}

func TestRunErrors(t *testing.T) {
	c := newTestCluster(t, testScenario(scenarios.ServiceGroup{Name: "web", Count: 1}))
	e := newTestEngine(t, c)
	if _, err := c.NewEngine(); err == nil {
		t.Error("second engine allowed")
	}
	for _, tc := range []struct {
		step scenarios.ChurnStep
		want string
	}{
		{scenarios.ChurnStep{Action: "flap", Group: "nope", Count: 1}, `unknown service group "nope"`},
		{scenarios.ChurnStep{Action: "explode", Group: "web", Count: 1}, `unknown action "explode"`},
		{scenarios.ChurnStep{Action: "flap", Group: "web"}, "set count or duration"},
		{scenarios.ChurnStep{Action: "flap", Group: "web", Count: 1, Jitter: 1}, "jitter in [0, 1)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if _, err := e.Run(context.Background(), tc.step); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Running out of pod addresses mid-churn is a clear error.
	s := testScenario(scenarios.ServiceGroup{Name: "web", Count: 1, Endpoints: fixed(200)})
	s.Spec.Cluster.PodCIDR = "10.244.0.0/24"
	c2 := newTestCluster(t, s)
	e2 := newTestEngine(t, c2)
	_, err := e2.Run(context.Background(), scenarios.ChurnStep{Action: scenarios.ChurnScaleUp, Group: "web", Count: 100})
	if err == nil || !strings.Contains(err.Error(), "pod CIDR 10.244.0.0/24 exhausted: all 239 usable addresses are in use") {
		t.Errorf("err = %v, want pod CIDR exhausted", err)
	}
}

// TestBackpressure: a watch nobody reads. Without the guard the fake
// panics with "channel full"; with it the engine blocks until ctx ends.
func TestBackpressure(t *testing.T) {
	setup := func(t *testing.T, opts ...EngineOption) (*Cluster, *Engine, func() int) {
		c := newTestCluster(t, testScenario(scenarios.ServiceGroup{Name: "web", Count: 3, Endpoints: fixed(2)}))
		w, err := c.Clientset.DiscoveryV1().EndpointSlices("").Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return c, newTestEngine(t, c, opts...), func() int { return len(w.ResultChan()) }
	}
	step := scenarios.ChurnStep{Action: scenarios.ChurnFlap, Group: "web", Count: 500}

	t.Run("without guard", func(t *testing.T) {
		_, e, _ := setup(t, withoutBackpressure())
		panicked := func() (p any) {
			defer func() { p = recover() }()
			_, _ = e.Run(context.Background(), step)
			return nil
		}()
		if panicked == nil || !strings.Contains(fmt.Sprint(panicked), "channel full") {
			t.Fatalf("recovered %v, want the fake's channel full panic", panicked)
		}
	})

	t.Run("with guard", func(t *testing.T) {
		c, e, buffered := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			ms  []Mutation
			err error
		}
		done := make(chan result, 1)
		go func() {
			ms, err := e.Run(ctx, step)
			done <- result{ms, err}
		}()
		// The watch received the 3 existing slices when it started; the
		// engine fills it to the brim and then must wait.
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return buffered() == 100, nil
		}); err != nil {
			t.Fatalf("watch buffer never filled: %d events", buffered())
		}
		select {
		case r := <-done:
			t.Fatalf("Run returned with a full unread watch: %d mutations, %v", len(r.ms), r.err)
		default:
		}
		cancel()
		r := <-done
		if r.err == nil || !strings.Contains(r.err.Error(), "context canceled") {
			t.Errorf("err = %v, want context canceled", r.err)
		}
		if len(r.ms) != 97 {
			t.Errorf("made %d mutations before blocking, want 97 (100 - 3 replayed)", len(r.ms))
		}
		if c.Watchers() != 1 {
			t.Errorf("Watchers() = %d, want 1", c.Watchers())
		}
	})
}

// TestChurnThroughInformers drives 10,000 mutations of every kind at rate
// 0 through real shared informers (as kube-proxy wires them, plus extra
// ones), then checks no event was lost: every cache equals the clientset.
func TestChurnThroughInformers(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 mutations through informers")
	}
	s := testScenario(
		scenarios.ServiceGroup{Name: "small", Count: 200, Endpoints: &scenarios.IntRange{Min: 1, Max: 8}, Conditions: scenarios.ConditionMix{Ready: 0.9, NotReady: 0.1}},
		scenarios.ServiceGroup{Name: "big", Namespace: "big", Count: 4, Endpoints: fixed(180), Type: corev1.ServiceTypeNodePort},
		scenarios.ServiceGroup{Name: "lb", Count: 20, Endpoints: fixed(3), Type: corev1.ServiceTypeLoadBalancer},
	)
	s.Spec.Cluster.LoadBalancerCIDR = "192.168.0.0/16"
	c := newTestCluster(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// kube-proxy's factories: unfiltered (ServiceCIDRs, Nodes), slices
	// without headless ones, Services without other proxies' ones; plus a
	// namespaced factory and a second unfiltered one to add watchers.
	noHeadless, _ := labels.Parse("!" + HeadlessLabel)
	noProxyName, _ := labels.Parse("!service.kubernetes.io/service-proxy-name")
	factories := []informers.SharedInformerFactory{
		informers.NewSharedInformerFactory(c.Clientset, 0),
		informers.NewSharedInformerFactoryWithOptions(c.Clientset, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = noHeadless.String() })),
		informers.NewSharedInformerFactoryWithOptions(c.Clientset, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = noProxyName.String() })),
		informers.NewSharedInformerFactoryWithOptions(c.Clientset, 0, informers.WithNamespace("big")),
		informers.NewSharedInformerFactory(c.Clientset, 0),
	}
	type watched struct {
		name, kind string
		inf        cache.SharedIndexInformer
		ns         string
	}
	var infs []watched
	for i, f := range factories {
		ns := ""
		if i == 3 {
			ns = "big"
		}
		infs = append(infs,
			watched{fmt.Sprintf("factory%d/services", i), "Service", f.Core().V1().Services().Informer(), ns},
			watched{fmt.Sprintf("factory%d/endpointslices", i), "EndpointSlice", f.Discovery().V1().EndpointSlices().Informer(), ns})
	}
	nodes := factories[0].Core().V1().Nodes().Informer()
	cidrs := factories[0].Networking().V1().ServiceCIDRs().Informer()
	// A slow handler, as a busy proxier: it must not matter.
	events := 0
	_, _ = infs[1].inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, _ any) {
		events++
		if events%500 == 0 {
			time.Sleep(time.Millisecond)
		}
	}})
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("informer %v did not sync", typ)
			}
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, cidrs.HasSynced) {
		t.Fatal("node and ServiceCIDR informers did not sync")
	}

	e := newTestEngine(t, c)
	steps := mixedSteps(rand.New(rand.NewPCG(1, 2)), []string{"small", "big", "lb"}, 10000, 100)
	start := time.Now()
	runSteps(t, ctx, e, steps)
	elapsed := time.Since(start)
	log := e.Log()
	blocked, writes := 0, 0
	for _, m := range log {
		writes += len(m.Writes)
		if m.Blocked > 0 {
			blocked++
		}
	}
	t.Logf("%d mutations (%d writes) in %v, %d waited for watchers (%d watchers)", len(log), writes, elapsed, blocked, c.Watchers())
	if len(log) != 10000 {
		t.Fatalf("got %d mutations, want 10000", len(log))
	}

	want := apiObjects(t, c)
	assertAPIEqualsModel(t, c)
	// The caches catch up with the last events; wait for the condition,
	// then compare contents.
	for _, w := range infs {
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(cacheDiff(want, w.inf.GetStore(), w.kind, w.ns)) == 0, nil
		}); err != nil {
			t.Errorf("%s: cache never matched the clientset:\n%s", w.name, strings.Join(cacheDiff(want, w.inf.GetStore(), w.kind, w.ns), "\n"))
		}
	}
	if len(nodes.GetStore().List()) != 1 || len(cidrs.GetStore().List()) != 1 {
		t.Errorf("nodes %d, ServiceCIDRs %d cached; want 1 each", len(nodes.GetStore().List()), len(cidrs.GetStore().List()))
	}
}

// cacheDiff compares an informer store with the clientset objects of its
// kind (in ns, "" for all), returning one line per difference.
func cacheDiff(api map[string]runtime.Object, store cache.Store, kind, ns string) []string {
	got := map[string]runtime.Object{}
	for _, o := range store.List() {
		obj := o.(runtime.Object)
		m, _ := meta.Accessor(obj)
		got[kind+"/"+m.GetNamespace()+"/"+m.GetName()] = obj
	}
	var out []string
	for k, want := range api {
		parts := strings.SplitN(k, "/", 3)
		if parts[0] != kind || (ns != "" && parts[1] != ns) {
			continue
		}
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+k)
		} else if d := cmp.Diff(want, g); d != "" {
			out = append(out, "differs "+k+":\n"+d)
		}
		delete(got, k)
	}
	for k := range got {
		out = append(out, "extra "+k)
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... and %d more", len(out)-10))
	}
	return out
}
