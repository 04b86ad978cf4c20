package vm

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/netns"
)

// The VM runner boots a stock Debian kernel because the host kernel may lack
// IPVS or dummy interfaces. The kernel comes from the Debian archive through
// apt-get download and is unpacked with dpkg-deb -x into a cache directory:
// it is never installed, so the host's /boot and /lib/modules stay as they
// are.

// KernelMetaPackage is the Debian package whose dependency names the kernel
// the VM boots.
const KernelMetaPackage = "linux-image-cloud-amd64"

// vmToolsInstall is the command that installs what the VM runner needs.
const vmToolsInstall = "apt-get install -y --no-install-recommends qemu-system-x86 busybox-static"

// Tools the VM runner runs on the host.
const (
	qemuBinary    = "qemu-system-x86_64"
	busyboxBinary = "busybox"
)

// Kernel is an unpacked kernel package in the cache.
type Kernel struct {
	// Package is the versioned package, e.g. linux-image-6.1.0-56-cloud-amd64.
	Package string `json:"package"`
	// Version is the kernel release (uname -r), e.g. 6.1.0-56-cloud-amd64.
	Version string `json:"version"`
	// Vmlinuz is the kernel image.
	Vmlinuz string `json:"vmlinuz"`
	// ModulesDir is the unpacked /lib/modules/<Version>.
	ModulesDir string `json:"modulesDir"`
	// DebBytes is the size of the downloaded .deb (0 if it was removed).
	DebBytes int64 `json:"debBytes"`
}

// DefaultKernelCacheDir is where the kernel is cached unless
// Options.KernelCacheDir says otherwise: $XDG_CACHE_HOME/kpsim-vm-kernel
// (~/.cache when unset), or /var/cache/kpsim-vm-kernel without a home.
func DefaultKernelCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, netns.Prefix+"vm-kernel")
	}
	return filepath.Join("/var/cache", netns.Prefix+"vm-kernel")
}

// FindKernel returns the kernel already unpacked in cacheDir, or an error
// wrapping os.ErrNotExist when there is none. It never downloads.
func FindKernel(cacheDir string) (*Kernel, error) {
	// A package directory only exists once fully unpacked (it is renamed
	// into place), so its presence means complete.
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "linux-image-*"))
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		k, err := kernelInDir(dirs[i])
		if err == nil {
			if fi, err := os.Stat(filepath.Join(cacheDir, "debs", k.Package+".deb")); err == nil {
				k.DebBytes = fi.Size()
			}
			return k, nil
		}
	}
	return nil, fmt.Errorf("no kernel package unpacked in %s: %w", cacheDir, os.ErrNotExist)
}

func kernelInDir(dir string) (*Kernel, error) {
	imgs, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(imgs) != 1 {
		return nil, fmt.Errorf("%s: want one boot/vmlinuz-*, found %d: %w", dir, len(imgs), os.ErrNotExist)
	}
	ver := strings.TrimPrefix(filepath.Base(imgs[0]), "vmlinuz-")
	mods := filepath.Join(dir, "lib", "modules", ver)
	if _, err := os.Stat(filepath.Join(mods, "kernel")); err != nil {
		return nil, fmt.Errorf("%s: modules of %s: %w", dir, ver, err)
	}
	return &Kernel{Package: filepath.Base(dir), Version: ver, Vmlinuz: imgs[0], ModulesDir: mods}, nil
}

// EnsureKernel returns the kernel cached in cacheDir, downloading and
// unpacking it first if it is not there (apt-get download of
// KernelMetaPackage and the linux-image package it depends on, then
// dpkg-deb -x). It is idempotent; a second call does not touch the network.
func EnsureKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	if cacheDir == "" {
		cacheDir = DefaultKernelCacheDir()
	}
	if k, err := FindKernel(cacheDir); err == nil {
		return k, nil
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("fetch kernel %s: %s not found (the VM runner needs a Debian-like host with apt and dpkg): %w", KernelMetaPackage, tool, err)
		}
	}
	pkg, err := kernelDependency(ctx)
	if err != nil {
		return nil, err
	}
	debs := filepath.Join(cacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, fmt.Errorf("fetch kernel: %w", err)
	}
	deb, err := findDeb(debs, pkg)
	if err != nil {
		cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
		cmd.Dir = debs
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("fetch kernel: apt-get download %s in %s: %w: %s (try apt-get update)", pkg, debs, err, tail(out, 1000))
		}
		if deb, err = findDeb(debs, pkg); err != nil {
			return nil, fmt.Errorf("fetch kernel: %w", err)
		}
	}
	// Unpack next to the final place, then rename: a crash leaves a
	// kpsim-unpack-* directory, never a half-unpacked kernel.
	tmp, err := os.MkdirTemp(cacheDir, netns.Prefix+"unpack-*")
	if err != nil {
		return nil, fmt.Errorf("fetch kernel: %w", err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, tmp).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("fetch kernel: dpkg-deb -x %s: %w: %s", deb, err, tail(out, 1000))
	}
	if _, err := kernelInDir(tmp); err != nil {
		return nil, fmt.Errorf("fetch kernel: unpacked %s: %w", deb, err)
	}
	// Keep a stable name for the .deb so its size can be reported.
	_ = os.Rename(deb, filepath.Join(debs, pkg+".deb"))
	if err := os.Rename(tmp, filepath.Join(cacheDir, pkg)); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("fetch kernel: %w", err)
	}
	return FindKernel(cacheDir)
}

// kernelDependency resolves KernelMetaPackage to the versioned
// linux-image-<version>-cloud-amd64 package it depends on.
func kernelDependency(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", KernelMetaPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("fetch kernel: apt-cache depends %s: %w: %s (try apt-get update)", KernelMetaPackage, err, tail(out, 1000))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("fetch kernel: apt-cache depends %s names no linux-image-* package: %s", KernelMetaPackage, tail(out, 1000))
}

func findDeb(dir, pkg string) (string, error) {
	if p := filepath.Join(dir, pkg+".deb"); fileExists(p) {
		return p, nil
	}
	m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(m) == 0 {
		return "", fmt.Errorf("no %s_*.deb in %s: %w", pkg, dir, os.ErrNotExist)
	}
	sort.Strings(m)
	return m[len(m)-1], nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// vmTools finds qemu and a static busybox, or says how to install them.
func vmTools() (qemu, busybox string, err error) {
	qemu, err = exec.LookPath(qemuBinary)
	if err != nil {
		return "", "", fmt.Errorf("VM runner: %s not found (Debian package qemu-system-x86; %s): %w", qemuBinary, vmToolsInstall, err)
	}
	busybox, err = exec.LookPath(busyboxBinary)
	if err != nil {
		return "", "", fmt.Errorf("VM runner: %s not found (Debian package busybox-static; %s): %w", busyboxBinary, vmToolsInstall, err)
	}
	if _, dynamic, err := elfInterp(busybox); err != nil {
		return "", "", fmt.Errorf("VM runner: %w", err)
	} else if dynamic {
		return "", "", fmt.Errorf("VM runner: %s is dynamically linked; the guest needs busybox-static (%s)", busybox, vmToolsInstall)
	}
	return qemu, busybox, nil
}

// elfInterp returns the program interpreter of an ELF file and whether it
// has one (is dynamically linked).
func elfInterp(path string) (string, bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", false, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", false, fmt.Errorf("read interpreter of %s: %w", path, err)
			}
			return string(bytes.TrimRight(b, "\x00")), true, nil
		}
	}
	return "", false, nil
}

// tail returns at most the last n bytes of b, as a trimmed string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
