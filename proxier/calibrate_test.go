package proxier

import "testing"

// BenchmarkProxierLikeWork is the CPU calibration's unit of work (5,000
// rule lines): 7.0 ms on the development machine's host.
func BenchmarkProxierLikeWork(b *testing.B) {
	for b.Loop() {
		proxierLikeWork(5000)
	}
}
