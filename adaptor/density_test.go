package adaptor

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// densityChannels is how many channels BenchmarkIdleChannels opens.
const densityChannels = 10_000

// BenchmarkIdleChannels: what an open, idle channel costs. It opens
// densityChannels channels read-write on one local store (the default sync
// policy, always), 64 opens at a time, and reports per channel the
// goroutines and the heap that stay once they are open and idle, and the
// time the opens took in all (goals: ≤ 0.05 goroutines and ≤ 16 KiB per
// idle channel; all opened in < 5 s). One op opens them all; use
// -benchtime 1x.
//
//	go test -run '^$' -bench IdleChannels -benchtime 1x ./adaptor/
func BenchmarkIdleChannels(b *testing.B) {
	n := densityChannels
	if testing.Short() {
		n = 1000
	}
	for range b.N {
		b.StopTimer()
		s, err := local.New(context.Background(), local.Config{Dir: b.TempDir()})
		require.NoError(b, err)
		runtime.GC()
		goBefore, heapBefore := runtime.NumGoroutine(), heapInUse()
		wals := make([]WAL, n)
		var next atomic.Int64
		var failed atomic.Error
		var wg sync.WaitGroup
		b.StartTimer()
		start := time.Now()
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Inc()) - 1; i < n; i = int(next.Inc()) - 1 {
					w, err := Open(context.Background(), s, Channel{Name: fmt.Sprintf("ch-%05d", i), Term: 1}, benchOptions())
					if err != nil {
						failed.Store(err)
						return
					}
					wals[i] = w
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		b.StopTimer()
		require.NoError(b, failed.Load())
		runtime.GC()
		goroutines := float64(runtime.NumGoroutine()-goBefore) / float64(n)
		heap := float64(heapInUse()-heapBefore) / float64(n)
		b.ReportMetric(goroutines, "goroutines/channel")
		b.ReportMetric(heap/1024, "heap-KiB/channel")
		b.ReportMetric(took.Seconds(), "open-all-s")
		b.ReportMetric(float64(took.Microseconds())/float64(n), "open-µs/channel")
		for _, w := range wals {
			require.NoError(b, w.Close())
		}
		require.NoError(b, s.Close())
		b.StartTimer()
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
