package chainread_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/message"
)

const benchScanLog = 100_000

// BenchmarkScanAcrossSeal: a catch-up scan of benchScanLog messages on a
// chain of two segments (half on each, the first sealed) against the same
// number of messages on one segment read by the adaptor itself, in the
// same op, one after the other. The chain's scan includes opening both
// segments (read-only WALs, the sealed one's Last). "ratio" is the chain's
// throughput ÷ the one segment's, read message by message (Chan);
// "batch-ratio" the same read in slices (Batches). Goal ≥ 0.95. One op is
// one scan of each; use -benchtime Nx.
//
//	go test -run '^$' -bench ScanAcrossSeal -benchtime 10x ./chainread/
func BenchmarkScanAcrossSeal(b *testing.B) {
	for _, pair := range [][2]string{{"memory", "memory2"}, {"local", "local2"}} {
		b.Run(pair[0], func(b *testing.B) {
			ctx := context.Background()
			bk := newBackends(b)
			one := newChain(b, bk, "one", pair[0])
			one.append(benchScanLog, 4)
			require.NoError(b, one.w.Sync(ctx))
			two := newChain(b, bk, "two", pair[0])
			two.append(benchScanLog/2, 4)
			two.migrate(pair[1], 2)
			two.append(benchScanLog/2, 4)
			require.NoError(b, two.w.Sync(ctx))

			o, err := bk.openers.Opener(one.last().Backend)
			require.NoError(b, err)
			ro, err := adaptor.Open(ctx, o, adaptor.Channel{Name: "one"}, adaptor.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(b, err)
			defer ro.Close()
			r := two.reader(b)

			var oneTook, twoTook, oneBatch, twoBatch time.Duration
			b.ResetTimer()
			for range b.N {
				oneTook += scanChan(b, func() (adaptor.Scanner, error) { return ro.Read(ctx, adaptor.ReadOption{}) })
				twoTook += scanChan(b, func() (adaptor.Scanner, error) { return r.Read(ctx, chainread.ReadOption{}) })
				oneBatch += scanBatches(b, func() (adaptor.BatchScanner, error) { return ro.ReadBatches(ctx, adaptor.ReadOption{}) })
				twoBatch += scanBatches(b, func() (adaptor.BatchScanner, error) { return r.ReadBatches(ctx, chainread.ReadOption{}) })
			}
			b.StopTimer()
			n := float64(b.N * benchScanLog)
			b.ReportMetric(n/oneTook.Seconds(), "one-segment-msgs/s")
			b.ReportMetric(n/twoTook.Seconds(), "two-segments-msgs/s")
			b.ReportMetric(oneTook.Seconds()/twoTook.Seconds(), "ratio")
			b.ReportMetric(oneBatch.Seconds()/twoBatch.Seconds(), "batch-ratio")
		})
	}
}

func scanChan(b *testing.B, read func() (adaptor.Scanner, error)) time.Duration {
	start := time.Now()
	s, err := read()
	require.NoError(b, err)
	for n := 0; n < benchScanLog; n++ {
		if _, ok := <-s.Chan(); !ok {
			require.FailNow(b, fmt.Sprintf("scanner ended after %d: %v", n, s.Error()))
		}
	}
	took := time.Since(start)
	require.NoError(b, s.Close())
	return took
}

func scanBatches(b *testing.B, read func() (adaptor.BatchScanner, error)) time.Duration {
	start := time.Now()
	s, err := read()
	require.NoError(b, err)
	var batch []message.Immutable
	for n := 0; n < benchScanLog; n += len(batch) {
		var ok bool
		if batch, ok = <-s.Batches(); !ok {
			require.FailNow(b, fmt.Sprintf("scanner ended after %d: %v", n, s.Error()))
		}
	}
	took := time.Since(start)
	require.NoError(b, s.Close())
	return took
}
