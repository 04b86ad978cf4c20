package proxier

import (
	"strings"
	"testing"
)

// BenchmarkProxierLikeWork is the CPU calibration's unit of work (5,000
// rule lines): 7.0 ms on the development machine's host.
func BenchmarkProxierLikeWork(b *testing.B) {
	for b.Loop() {
		proxierLikeWork(5000)
	}
}

// The table restore's input has the size its op text gives, and its
// deletion removes every chain it declares.
func TestTableRestoreInput(t *testing.T) {
	add, del := tableRestoreInput(tableRestoreServices, tableRestoreEndpoints)
	count := func(s, prefix string) int {
		n := 0
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
		return n
	}
	rules, chains := count(add, "-A "), count(add, ":")
	if rules != 5200 || chains != 2001 || !strings.Contains(tableRestoreShape, "5,200 rules in 2,001 chains") {
		t.Errorf("%d rules in %d chains, the op says %q", rules, chains, tableRestoreShape)
	}
	if f, x := count(del, "-F "), count(del, "-X "); f != chains || x != chains {
		t.Errorf("the deletion flushes %d and deletes %d chains, want %d each", f, x, chains)
	}
	for _, in := range []string{add, del} {
		if !strings.HasPrefix(in, "*nat\n") || !strings.HasSuffix(in, "COMMIT\n") {
			t.Errorf("input not one nat table: %.40q ... %.40q", in, in[len(in)-40:])
		}
	}
}
