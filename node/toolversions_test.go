package node

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/toolexec"
)

// TestModePrograms: the programs follow every mode an entry runs, a
// migration's too.
func TestModePrograms(t *testing.T) {
	b, err := os.ReadFile("../scenarios/migrate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenarios.Load("migrate.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"iptables-to-nftables": {"iptables-legacy", "nft"},
		"ipvs-to-nftables":     {"iptables-legacy", "ipset", "nft"},
		"ipvs-to-iptables":     {"iptables-legacy", "ipset"},
	}
	for _, ms := range s.Spec.Modes {
		if d := cmp.Diff(want[ms.Name], modePrograms(s, ms)); d != "" {
			t.Errorf("%s (-want +got):\n%s", ms.Name, d)
		}
	}
}

// TestToolVersions: each program's first line of --version, and what
// went wrong for the others.
func TestToolVersions(t *testing.T) {
	run := &toolexec.Fake{
		Missing: []string{"iptables-nft"},
		Calls: []toolexec.FakeCall{
			{Cmd: toolexec.Command("iptables-legacy", "--version"), Stdout: "iptables v1.8.11 (legacy)\n"},
			{Cmd: toolexec.Command("ipset", "--version"), Stdout: "ipset v7.17, protocol version: 7\nWarning: something\n"},
			{Cmd: toolexec.Command("nft", "--version"), Err: errors.New("exit status 1: permission denied\nmore")},
		},
	}
	got := toolVersions(context.Background(), run, []string{"iptables-legacy", "ipset", "nft", "iptables-nft"})
	want := map[string]string{
		"iptables-legacy": "iptables v1.8.11 (legacy) (" + binaryLinkage("/usr/sbin/iptables-legacy") + ")",
		"ipset":           "ipset v7.17, protocol version: 7 (" + binaryLinkage("/usr/sbin/ipset") + ")",
		"ipvs reader":     ipvsReader,
		"nft":             "version unknown: nft --version: exit status 1: permission denied",
		"iptables-nft":    "not installed",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("toolVersions (-want +got):\n%s", d)
	}
	if err := run.Done(); err != nil {
		t.Error(err)
	}
}

// TestBinaryLinkage: a program with an interpreter is dynamic, one with
// neither interpreter nor libraries static; symlinks name their target.
func TestBinaryLinkage(t *testing.T) {
	dir := t.TempDir()
	static, dynamic := filepath.Join(dir, "static"), filepath.Join(dir, "dynamic")
	writeELF(t, static, false)
	writeELF(t, dynamic, true)
	if err := os.Symlink(static, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		static:                       static + ", static",
		dynamic:                      dynamic + ", dynamic",
		filepath.Join(dir, "link"):   static + ", static",
		filepath.Join(dir, "absent"): filepath.Join(dir, "absent") + ", linkage unknown: open " + filepath.Join(dir, "absent") + ": no such file or directory",
	} {
		if got := binaryLinkage(path); got != want {
			t.Errorf("binaryLinkage(%s) = %q, want %q", path, got, want)
		}
	}
	if _, err := os.Stat("/bin/sh"); err == nil {
		if got := binaryLinkage("/bin/sh"); !strings.Contains(got, ", dynamic: ") || !strings.Contains(got, "libc.so") {
			t.Errorf("binaryLinkage(/bin/sh) = %q, want dynamic with libc", got)
		}
	}
}

// writeELF writes a minimal x86-64 executable header with one program
// header: PT_INTERP when interp, else PT_LOAD.
func writeELF(t *testing.T, path string, interp bool) {
	t.Helper()
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1, Shentsize: 64,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	prog := elf.Prog64{Type: uint32(elf.PT_LOAD)}
	if interp {
		prog.Type = uint32(elf.PT_INTERP)
	}
	if err := binary.Write(&b, binary.LittleEndian, hdr); err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(&b, binary.LittleEndian, prog); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
}
