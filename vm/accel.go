package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A /dev/kvm that opens is not proof that KVM can run the guest kernel
// (nested or partial virtualisation may emulate and crash), so the
// accelerator is chosen by booting the kernel once with KVM and a tiny
// initramfs; if /init does not report back, the VM uses TCG (software
// emulation). The answer is kept per kernel image for the process.

var (
	accelMu    sync.Mutex
	accelCache = map[string][2]string{} // vmlinuz -> accel, note
)

// vmProbeTimeout bounds the KVM probe boot (a working KVM takes about a
// second).
const vmProbeTimeout = 30 * time.Second

const vmProbeInit = `#!/usr/bin/busybox sh
echo "` + vmMarker + `probe-ok"
/usr/bin/busybox poweroff -f
`

// probeAccel returns "kvm" if a probe boot with KVM works, else "tcg" and
// why not KVM.
func probeAccel(ctx context.Context, qemu string, k *Kernel, busybox, workDir string) (accel, note string) {
	accelMu.Lock()
	defer accelMu.Unlock()
	if r, ok := accelCache[k.Vmlinuz]; ok {
		return r[0], r[1]
	}
	accel, note = "tcg", ""
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		note = fmt.Sprintf("no usable /dev/kvm: %v", err)
	} else {
		f.Close()
		if err := probeKVM(ctx, qemu, k, busybox, workDir); err != nil {
			note = fmt.Sprintf("KVM probe boot failed, using TCG: %v", err)
			if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
				// Measured here: with -cpu host the MSR setup aborts;
				// without arch-capabilities the guest hangs after the
				// real-mode setup.
				note += " (this host's KVM is kvm_pvm, pagetable-based virtualisation, which runs only guest kernels built for PVM, not a stock Debian kernel)"
			}
		} else {
			accel = "kvm"
		}
	}
	if ctx.Err() == nil {
		accelCache[k.Vmlinuz] = [2]string{accel, note}
	}
	return accel, note
}

func probeKVM(ctx context.Context, qemu string, k *Kernel, busybox, workDir string) error {
	initrd := filepath.Join(workDir, "probe.img")
	defer os.Remove(initrd)
	f, err := os.Create(initrd)
	if err != nil {
		return err
	}
	b := newRootfsBuilder(f)
	b.mkdirAll("/proc")
	b.charDev("/dev/console", 0o600, 5, 1)
	if err := b.file("/usr/bin/busybox", busybox, 0o755); err != nil {
		f.Close()
		return err
	}
	b.bytes(guestInitPath, []byte(vmProbeInit), 0o755)
	err = b.close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("probe initramfs: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, vmProbeTimeout)
	defer cancel()
	c := &vmConsole{marks: map[string]time.Time{}}
	_, err = runQEMU(ctx, qemu, qemuArgs(k, initrd, "", machine{accel: "kvm", memMiB: 256, cpus: 1}), c, "", func(*os.Process) {})
	if c.has("probe-ok") {
		return nil
	}
	last := c.tail()
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if err == nil {
		err = fmt.Errorf("no probe marker")
	}
	return fmt.Errorf("%w (last console line: %q)", err, last)
}
