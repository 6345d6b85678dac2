package pool_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/pool"
)

// BenchmarkAllocate allocates b.N vchannels in batches of 1,000 on each
// store and reports vchannels/s (the figure is 100,000):
//
//	go test -run '^$' -bench Allocate -benchtime 100000x ./pool/
func BenchmarkAllocate(b *testing.B) {
	const batch = 1000
	for _, k := range storeKinds {
		b.Run(k.name, func(b *testing.B) {
			stores := k.store(b)
			p, err := pool.Open(b.Context(), stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 16}, pool.Options{})
			require.NoError(b, err)
			defer func() { _ = p.Close() }()
			names := make([]string, 0, batch)
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				names = names[:0]
				for i := done; i < min(done+batch, b.N); i++ {
					names = append(names, "vc-"+strconv.Itoa(i))
				}
				if _, err := p.Allocate(b.Context(), names...); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "vchannels/s")
			// A restart reads the whole table back.
			start := time.Now()
			p2, err := pool.Open(b.Context(), stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 16}, pool.Options{})
			require.NoError(b, err)
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "reopen-ms")
			_ = p2.Close()
		})
	}
}
