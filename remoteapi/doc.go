// Package remoteapi serves a client-go fake clientset's API to another
// process over net/rpc, and gives that process a clientset backed by it.
//
// kube-proxy runs in a process of its own inside the node (so that its CPU
// time and memory are its own, and so that it can be stopped and started
// again like the real one); the fake API server it watches stays in the
// node process with the churn that writes to it and the faults that
// intercept it. [Register] serves the node's clientset; [NewClientset]
// builds, in kube-proxy's process, a *fake.Clientset whose every action
// (get, list, watch) is forwarded there and answered by the node's
// reactors and object tracker, exactly as an in-process call would be.
//
// It also says how far a write's events have gone: [Service.Handed] how
// many each watch has handed to kube-proxy's process, and [Deliveries],
// there, when kube-proxy's handlers have returned from them, so that the
// node waits for a sync that began after that.
//
// What it must not do: hold API state of its own (the node's tracker is
// the only one); drop or reorder a watch's events; let a slow reader back
// up the node's watchers (the fake's watchers panic when their buffer
// fills: events are drained into a queue at once).
package remoteapi
