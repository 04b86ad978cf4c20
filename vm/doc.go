// Package vm runs a kpsim node in a qemu VM that boots a stock Debian
// kernel, for modes the host kernel cannot run (IPVS; dummy links).
//
// The guest runs the node exactly as netns.StartNode does on a host:
// /init (init.go) starts the same binary with the same environment under
// "unshare -n -m", so netns.Init, the node setup and its isolation checks
// run unchanged. Only the transport differs (netns's wire.go): fd 3 reads
// a file from a per-run cpio appended to the initramfs (what Send
// buffered), fd 4 writes a file that /init puts, with the node's stdout,
// stderr and exit code, as a tar stream on a raw virtio-blk disk the host
// reads after qemu ends. Events also go to the serial console, which the
// host reads live (netns.ConsoleEventMarker), with timing markers, and
// keeps the tail of for errors.
//
// It provides [Start] and [Node] (the running VM, with the calls the
// orchestrator makes of a host node), [EnsureKernel] (the Debian kernel
// package, fetched with apt-get through a private sources list), and the
// initramfs builder (initramfs.go, cpio.go): busybox, the kernel tools the
// proxiers run with their libraries, and the kernel modules they need.
//
// What it must not do: give the guest a network device, or change
// anything on the host but its own work directory ($TMPDIR/<run id>-vm,
// swept by netns.Cleanup) and the kernel cache; change apt's
// configuration; know what a node does (that is package node's).
package vm
