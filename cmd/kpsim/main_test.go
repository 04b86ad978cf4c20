package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateExitCodes(t *testing.T) {
	shipped, _ := filepath.Glob("../../scenarios/*.yaml")
	invalid, _ := filepath.Glob("../../scenarios/testdata/invalid/*.yaml")
	if len(shipped) == 0 || len(invalid) < 20 {
		t.Fatalf("found %d shipped and %d invalid scenarios", len(shipped), len(invalid))
	}
	if code := run(append([]string{"validate"}, shipped...)); code != exitOK {
		t.Errorf("validate of shipped scenarios exited %d, want 0", code)
	}
	for _, f := range invalid {
		if code := run([]string{"validate", f}); code != exitBadInput {
			t.Errorf("validate %s exited %d, want %d", f, code, exitBadInput)
		}
	}
}

func TestValidateNamesFileAndLine(t *testing.T) {
	var out, errOut bytes.Buffer
	err := validateFiles(&out, &errOut, []string{"../../scenarios/testdata/invalid/count-is-a-string.yaml"})
	if err == nil {
		t.Fatal("no error for an invalid file")
	}
	want := "count-is-a-string.yaml:8: spec.serviceGroups[0].count:"
	if !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q does not contain %q", errOut.String(), want)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"no-such-command"}, {"validate"}, {"run"}, {"modes", "--no-such-flag"}} {
		if code := run(args); code != exitBadInput {
			t.Errorf("kpsim %v exited %d, want %d", args, code, exitBadInput)
		}
	}
}

// TestTwinRepeatsBadInput: --twin-repeats out of range, or on a run with
// no twin pair, is refused before anything is created.
func TestTwinRepeatsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"run", "../../scenarios/2000x10.yaml", "--twin-repeats", "-1"},
		{"run", "../../scenarios/2000x10.yaml", "--twin-repeats", "11"},
		{"run", "../../scenarios/2000x10.yaml", "--twin-repeats", "2", "--modes", "nftables,iptables-legacy"},
	} {
		if code := run(args); code != exitBadInput {
			t.Errorf("kpsim %v exited %d, want %d", args, code, exitBadInput)
		}
	}
}
