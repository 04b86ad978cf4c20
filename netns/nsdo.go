package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// errNotNode is returned by everything that creates namespaces, links or
// addresses when the calling process is not a node process: the host
// namespace is never a place for them.
var errNotNode = errors.New("netns: not in a kpsim node process (call netns.Init first and start the process with StartNode)")

// doIn runs fn on an OS thread locked into the network namespace ns and moves
// the thread back to back (the namespace every other thread of the process is
// in) before unlocking it. If moving back fails the goroutine exits still
// locked, so the Go runtime terminates the thread instead of reusing it in the
// wrong namespace (the containernetworking/plugins pkg/ns pattern).
func doIn(ns, back netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			// setns failed: the thread is still where it was.
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns into %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := netns.Set(back); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back to %s: %w (thread discarded)", back, err))
			return // still locked: the runtime kills this thread
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// newNetNS creates an unnamed network namespace and returns a handle to it;
// the namespace lives as long as the handle (or anything inside it) does, so
// it vanishes with the process. The calling thread is untouched.
func newNetNS(back netns.NsHandle) (netns.NsHandle, error) {
	type res struct {
		h   netns.NsHandle
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.New()
		if err != nil {
			// netns.New fails either in unshare (thread unchanged) or in
			// opening the new namespace (thread moved): try to move back
			// and discard the thread unless we know where it is.
			if serr := netns.Set(back); serr != nil {
				c <- res{err: fmt.Errorf("create network namespace: %w", err)}
				return
			}
			runtime.UnlockOSThread()
			c <- res{err: fmt.Errorf("create network namespace: %w", err)}
			return
		}
		if err := netns.Set(back); err != nil {
			h.Close()
			c <- res{err: fmt.Errorf("setns back to %s after creating a namespace: %w (thread discarded)", back, err)}
			return
		}
		runtime.UnlockOSThread()
		c <- res{h: h}
	}()
	r := <-c
	return r.h, r.err
}

// nsInode returns the inode that identifies the namespace at path (for
// example /proc/self/ns/net); two equal inodes mean the same namespace.
func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}

// threadNetNSInode identifies the network namespace of the calling thread.
func threadNetNSInode() (uint64, error) {
	return nsInode(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
}
