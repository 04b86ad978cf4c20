package node

import (
	"context"
	"errors"
	"os"
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
		"iptables-legacy": "iptables v1.8.11 (legacy)",
		"ipset":           "ipset v7.17, protocol version: 7",
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
