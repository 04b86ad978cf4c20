package reports

import (
	"strings"
	"testing"
)

// A guest clock within 1% of the host's is reported; beyond that the
// report says the VM's timings are off.
func TestGuestClock(t *testing.T) {
	ok := GuestClock{GuestSeconds: 200.4, HostSeconds: 200}.String()
	if !strings.Contains(ok, "+0.20%") || strings.Contains(ok, "off by") {
		t.Errorf("within tolerance: %q", ok)
	}
	off := GuestClock{GuestSeconds: 190, HostSeconds: 200}.String()
	if !strings.Contains(off, "-5.00%") || !strings.Contains(off, "its timings are off by as much") {
		t.Errorf("5%% slow: %q", off)
	}
}
