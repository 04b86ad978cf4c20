package node

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kpsim/kpsim/reports"
)

// memoryEvery is how often the node samples its memory: often enough for
// a trend over a 10-minute soak (120 samples), rare enough that
// runtime.ReadMemStats's brief stop of the world does not matter.
const memoryEvery = 5 * time.Second

// memorySampler records the node's resident set and Go heap until its
// context ends.
type memorySampler struct {
	mu      sync.Mutex
	samples []reports.MemorySample
	done    chan struct{}
}

func startMemorySampler(ctx context.Context) *memorySampler {
	m := &memorySampler{done: make(chan struct{})}
	m.sample()
	go func() {
		defer close(m.done)
		t := time.NewTicker(memoryEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

func (m *memorySampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := reports.MemorySample{At: time.Now(), RSSBytes: rssBytes(), HeapBytes: int64(ms.HeapAlloc)}
	m.mu.Lock()
	m.samples = append(m.samples, s)
	m.mu.Unlock()
}

// Samples takes a last sample and returns them all.
func (m *memorySampler) Samples() []reports.MemorySample {
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]reports.MemorySample(nil), m.samples...)
}

// rssBytes is the process's resident set from /proc/self/statm (pages);
// 0 if unreadable.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
