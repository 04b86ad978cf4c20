package remoteapi

import (
	"context"
	"fmt"
	"net"
	"net/rpc"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// pair serves api and returns a clientset forwarding to it, as kube-proxy's
// process gets one.
func pair(t *testing.T, api *fake.Clientset) *fake.Clientset {
	t.Helper()
	a, b := net.Pipe()
	srv := rpc.NewServer()
	if err := Register(srv, api); err != nil {
		t.Fatal(err)
	}
	go srv.ServeConn(a)
	c := rpc.NewClient(b)
	t.Cleanup(func() { c.Close() })
	return NewClientset(c, nil)
}

func service(name string, labels map[string]string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []v1.ServicePort{{Port: 80}}}}
}

func TestGetAndList(t *testing.T) {
	api := fake.NewClientset(service("a", nil), service("b", map[string]string{"service.kubernetes.io/service-proxy-name": "other"}),
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	remote := pair(t, api)
	ctx := context.Background()

	n, err := remote.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || n.Name != "node-a" {
		t.Fatalf("Get node-a = %v, %v", n, err)
	}
	if _, err := remote.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get node-b: %v, want NotFound", err)
	}
	// The typed fake filters lists by label on the reading side, as in
	// one process.
	l, err := remote.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: "!service.kubernetes.io/service-proxy-name"})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "a" || l.Items[0].Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("List = %+v, %v; want only Service a, whole", l, err)
	}
	if _, err := remote.CoreV1().Services("default").Create(ctx, service("c", nil), metav1.CreateOptions{}); err == nil {
		t.Error("Create was forwarded: only get, list and watch are served")
	}
	// A fault injected in the node's reactors reaches the reader.
	api.PrependReactor("list", "endpointslices", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("injected", 1)
	})
	if _, err := remote.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); !apierrors.IsTooManyRequests(err) {
		t.Errorf("List with an injected 429: %v, want TooManyRequests", err)
	}
}

// TestInformer: an informer in "kube-proxy's process" sees the node's
// objects and every later change, in order, through a burst far larger
// than a fake watcher's buffer.
func TestInformer(t *testing.T) {
	api := fake.NewClientset(service("s0", nil))
	remote := pair(t, api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	factory := informers.NewSharedInformerFactory(remote, 0)
	inf := factory.Discovery().V1().EndpointSlices().Informer()
	svcs := factory.Core().V1().Services().Informer()
	seen := make(chan string, 2000)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen <- "add " + obj.(*discoveryv1.EndpointSlice).Name },
		UpdateFunc: func(_, obj any) { seen <- "update " + obj.(*discoveryv1.EndpointSlice).Name },
		DeleteFunc: func(obj any) { seen <- "delete " + obj.(*discoveryv1.EndpointSlice).Name },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, svcs.HasSynced) {
		t.Fatal("informers did not sync")
	}
	if got := len(svcs.GetStore().List()); got != 1 {
		t.Errorf("Service store holds %d, want the 1 listed", got)
	}

	const n = 500
	var want []string
	for i := range n {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("es-%d", i), Namespace: "default"}, AddressType: discoveryv1.AddressTypeIPv4}
		if _, err := api.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, "add "+es.Name)
	}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "es-0", Namespace: "default", Labels: map[string]string{"x": "y"}}, AddressType: discoveryv1.AddressTypeIPv4}
	if _, err := api.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.DiscoveryV1().EndpointSlices("default").Delete(ctx, "es-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "update es-0", "delete es-1")
	for i, w := range want {
		select {
		case got := <-seen:
			if got != w {
				t.Fatalf("event %d: %s, want %s", i, got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d (%s) never came", i, w)
		}
	}
}

// TestWatchStop: a watch stopped by its reader ends on the node's side
// too, and a broken connection ends the reader's watch.
func TestWatchStop(t *testing.T) {
	api := fake.NewClientset()
	a, b := net.Pipe()
	srv := rpc.NewServer()
	svc := &Service{api: api, watches: map[int64]*queue{}}
	if err := srv.RegisterName(serviceName, svc); err != nil {
		t.Fatal(err)
	}
	go srv.ServeConn(a)
	c := rpc.NewClient(b)
	remote := NewClientset(c, nil)

	w, err := remote.CoreV1().Services("").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		svc.mu.Lock()
		left := len(svc.watches)
		svc.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches left on the node's side after Stop", left)
		}
		time.Sleep(10 * time.Millisecond)
	}

	w2, err := remote.CoreV1().Services("").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case _, ok := <-w2.ResultChan():
		if ok {
			t.Error("an event after the connection closed")
		}
	case <-time.After(5 * time.Second):
		t.Error("the watch did not end when the connection did")
	}
	if _, err := remote.CoreV1().Services("").List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Errorf("List on a closed connection: %v, want an error", err)
	}
}

// TestHanded: Handed says no while a write's event waits on the node's
// side, and when the client took it; StopAll ends every watch.
func TestHanded(t *testing.T) {
	api := fake.NewClientset()
	svc := NewService(api)
	// A watch the test drains itself, through Next, as a client would.
	var reply WatchReply
	req, err := request(clienttesting.NewWatchActionWithOptions(v1.SchemeGroupVersion.WithResource("services"), "", metav1.ListOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Watch(req, &reply); err != nil || reply.Failure != nil {
		t.Fatal(err, reply.Failure)
	}
	if _, ok := svc.Handed(); !ok {
		t.Fatal("Handed is false before any write")
	}
	written := time.Now()
	if _, err := api.CoreV1().Services("default").Create(context.Background(), service("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// (An event between the watch's channel and its queue is not seen
	// for an instant: callers ask twice.)
	time.Sleep(10 * time.Millisecond)
	if _, ok := svc.Handed(); ok {
		t.Error("Handed is true while the create's event waits")
	}
	var evs Events
	if err := svc.Next(reply.ID, &evs); err != nil || len(evs.Events) != 1 {
		t.Fatalf("Next: %v, %d events", err, len(evs.Events))
	}
	h, ok := svc.Handed()
	if !ok || h.At.Before(written) || h.Events[reply.ID] != 1 {
		t.Errorf("Handed = %+v %v after Next, want true, after the write at %s, 1 event on watch %d", h, ok, written, reply.ID)
	}
	svc.StopAll()
	if err := svc.Next(reply.ID, &evs); err != nil || !evs.Closed {
		t.Errorf("Next after StopAll: %v, closed %v", err, evs.Closed)
	}
}
