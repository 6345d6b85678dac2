package chainread_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

const benchScanLog = 100_000

// BenchmarkScanAcrossSeal: a catch-up scan of benchScanLog messages on a
// chain of two segments (half on each, the first sealed) against the same
// number of messages on one segment read by the adaptor itself, in the
// same op, one after the other (which goes first alternates). The chain's scan includes opening both
// segments (read-only WALs, the sealed one's Last). "ratio" is the chain's
// throughput ÷ the one segment's, read message by message (Chan);
// "batch-ratio" the same read in slices (Batches); "cpu-ratio" the
// process CPU per message of both (the steadiest on a shared machine);
// "seal-cpu-ratio" the CPU of the one segment read through this package
// (a chain of one) ÷ the chain of two: what the seal itself costs, apart
// from the chain reader's own layer.
// Goal ≥ 0.95. One op is one scan of each; use -benchtime Nx.
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
			r1 := one.reader(b)

			var oneTook, twoTook, oneBatch, twoBatch, oneCPU, twoCPU, chainOneCPU time.Duration
			b.ResetTimer()
			for i := range b.N {
				// Alternate which goes first, so that neither always
				// pays for the other's garbage.
				rounds := []func(){
					func() {
						cpu := cpuTime(b)
						oneTook += scanChan(b, func() (walimpls.Scanner, error) { return ro.Read(ctx, adaptor.ReadOption{}) })
						oneBatch += scanBatches(b, func() (walimpls.BatchScanner, error) { return ro.ReadBatches(ctx, adaptor.ReadOption{}) })
						oneCPU += cpuTime(b) - cpu
					},
					func() {
						cpu := cpuTime(b)
						twoTook += scanChan(b, func() (walimpls.Scanner, error) { return r.Read(ctx, chainread.ReadOption{}) })
						twoBatch += scanBatches(b, func() (walimpls.BatchScanner, error) { return r.ReadBatches(ctx, chainread.ReadOption{}) })
						twoCPU += cpuTime(b) - cpu
					},
				}
				rounds[i%2]()
				rounds[1-i%2]()
				cpu := cpuTime(b)
				scanChan(b, func() (walimpls.Scanner, error) { return r1.Read(ctx, chainread.ReadOption{}) })
				scanBatches(b, func() (walimpls.BatchScanner, error) { return r1.ReadBatches(ctx, chainread.ReadOption{}) })
				chainOneCPU += cpuTime(b) - cpu
			}
			b.StopTimer()
			n := float64(b.N * benchScanLog)
			b.ReportMetric(n/oneTook.Seconds(), "one-segment-msgs/s")
			b.ReportMetric(n/twoTook.Seconds(), "two-segments-msgs/s")
			b.ReportMetric(oneTook.Seconds()/twoTook.Seconds(), "ratio")
			b.ReportMetric(oneBatch.Seconds()/twoBatch.Seconds(), "batch-ratio")
			// The process's CPU per message (Chan and Batches together), which
			// other processes on the machine do not swing as they swing the
			// wall clock.
			b.ReportMetric(float64(oneCPU.Nanoseconds())/n/2, "one-cpu-ns/msg")
			b.ReportMetric(float64(twoCPU.Nanoseconds())/n/2, "two-cpu-ns/msg")
			b.ReportMetric(oneCPU.Seconds()/twoCPU.Seconds(), "cpu-ratio")
			// The seal alone: the same messages on a chain of one segment
			// read through this package, ÷ the chain of two.
			b.ReportMetric(chainOneCPU.Seconds()/twoCPU.Seconds(), "seal-cpu-ratio")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func scanChan(b *testing.B, read func() (walimpls.Scanner, error)) time.Duration {
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

func scanBatches(b *testing.B, read func() (walimpls.BatchScanner, error)) time.Duration {
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
