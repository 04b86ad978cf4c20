package remoteapi

import (
	"context"
	"net"
	"net/rpc"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestDeliveries: through a real informer (with kube-proxy's transform),
// WaitDone returns only once the handler has returned from every event
// handed, however late it runs, and no earlier than it returned; an event
// the handler never finishes makes it give up, say which watch, and not
// wait for that event again.
func TestDeliveries(t *testing.T) {
	api := fake.NewClientset()
	a, b := net.Pipe()
	srv := rpc.NewServer()
	svc := NewService(api)
	if err := srv.RegisterName(serviceName, svc); err != nil {
		t.Fatal(err)
	}
	go srv.ServeConn(a)
	c := rpc.NewClient(b)
	t.Cleanup(func() { c.Close() })
	d := NewDeliveries("endpointslices")
	remote := NewClientset(c, d)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(remote, 0, informers.WithTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}))
	slices := factory.Discovery().V1().EndpointSlices().Informer()
	// Services are watched but not followed: their events are never Done.
	services := factory.Core().V1().Services().Informer()
	release := make(chan struct{})
	returned := make(chan time.Time, 1)
	handle := func(obj any) {
		es := obj.(*discoveryv1.EndpointSlice)
		switch es.Name {
		case "lost":
			return // the handler never finishes with it
		case "slow":
			<-release
			returned <- time.Now()
		}
		d.Done(obj.(runtime.Object))
	}
	if _, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { handle(obj) },
		UpdateFunc: func(_, obj any) { handle(obj) },
		DeleteFunc: handle,
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), slices.HasSynced, services.HasSynced) {
		t.Fatal("informers did not sync")
	}

	write := func(names ...string) Handover {
		t.Helper()
		for _, name := range names {
			es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, AddressType: discoveryv1.AddressTypeIPv4}
			if _, err := api.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := api.CoreV1().Services("default").Create(ctx, service("svc-"+names[0], nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// As the node asks: until the same answer twice, a moment apart.
		var prev Handover
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			h, ok := svc.Handed()
			total := int64(0)
			for _, n := range h.Events {
				total += n
			}
			if ok && h.At.Equal(prev.At) && total > 0 {
				return h
			}
			prev = h
		}
		t.Fatal("the writes' events were never all handed")
		return Handover{}
	}

	names := []string{"a", "b", "c", "d", "e", "slow"}
	handed := write(names...)
	done := make(chan error, 1)
	var at time.Time
	go func() {
		var err error
		at, err = d.WaitDone(ctx, handed.Events)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("WaitDone returned (%v) while the handler was still on the last event", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	var slowAt time.Time
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		slowAt = <-returned
	case <-time.After(10 * time.Second):
		t.Fatal("WaitDone never returned after the handler did")
	}
	if at.Before(slowAt) {
		t.Errorf("WaitDone said %s, before the last handler returned at %s", at.Format(time.StampMicro), slowAt.Format(time.StampMicro))
	}

	handed = write("lost")
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := d.WaitDone(wctx, handed.Events)
	wcancel()
	if err == nil || !strings.Contains(err.Error(), "endpointslices") || !strings.Contains(err.Error(), "1 events not handled") {
		t.Errorf("WaitDone on an event never handled: %v, want the watch named and 1 event not handled", err)
	}
	wctx, wcancel = context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if _, err := d.WaitDone(wctx, handed.Events); err != nil {
		t.Errorf("a second wait for the event given up on: %v, want it forgotten", err)
	}
}
