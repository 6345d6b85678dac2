package walmanager

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/atomic"
)

// BenchmarkOpenRemove opens and removes 10,000 channels per iteration over a
// trivial backend, and reports the call rate and the peak goroutine count
// (sampled): a removed channel's driver must exit, so the peak stays near
// the number of callers plus the channels open at one time.
func BenchmarkOpenRemove(b *testing.B) {
	const channels = 10_000
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			ctx := context.Background()
			base := runtime.NumGoroutine()
			var peak atomic.Int64
			stop := make(chan struct{})
			var sampler sync.WaitGroup
			sampler.Add(1)
			go func() {
				defer sampler.Done()
				t := time.NewTicker(200 * time.Microsecond)
				defer t.Stop()
				for {
					if n := int64(runtime.NumGoroutine()); n > peak.Load() {
						peak.Store(n)
					}
					select {
					case <-stop:
						return
					case <-t.C:
					}
				}
			}()

			var calls atomic.Int64
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				m, err := New(newFakeBackend(uint64(i), 0, 0), Options{})
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				for c := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := c; n < channels; n += callers {
							ch := Channel{Name: fmt.Sprintf("ch-%d", n), Term: 1}
							if err := m.Open(ctx, ch); err != nil {
								b.Error(err)
								return
							}
							if err := m.Remove(ctx, ch); err != nil {
								b.Error(err)
								return
							}
							calls.Add(2)
						}
					}()
				}
				wg.Wait()
				m.mu.Lock()
				drivers := m.drivers
				m.mu.Unlock()
				if drivers != 0 {
					b.Fatalf("%d drivers still running after every channel was removed", drivers)
				}
				if err := m.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			close(stop)
			sampler.Wait()
			b.ReportMetric(float64(calls.Load())/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(peak.Load()-int64(base)), "peak-goroutines")
		})
	}
}
