package adaptor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// The benchmarks compare the adaptor with the raw backend under it, on the
// same backend and the same records, so that the ratio of their records/s is
// the adaptor's cost (issue goals: append ≥ 0.9×, scan ≥ 0.8×):
//
//	go test -run '^$' -bench Append -benchtime 50000x ./adaptor/  # records
//	go test -run '^$' -bench Scan -benchtime 5x ./adaptor/        # whole scans
//
// Raw and adaptor runs alternate in rounds inside one benchmark, which
// reports raw-records/s, adaptor-records/s and their ratio: on a shared
// machine the load changes from second to second, and separate
// sub-benchmarks run seconds apart measured the neighbours more than the
// adaptor. It also reports the process CPU time per record of each side and
// cpu-ratio (raw CPU / adaptor CPU): what the records/s ratio would be on a
// machine of our own, where these CPU-bound loops are limited by CPU.

const (
	benchRecord    = 1 << 10
	benchAppenders = 16
	benchScanLog   = 100_000
)

// benchBackend makes a fresh opener of one backend for a benchmark.
type benchBackend struct {
	name string
	open func(b *testing.B) walimpls.Opener
}

func benchBackends(withSync bool) []benchBackend {
	bs := []benchBackend{
		{"memory", func(b *testing.B) walimpls.Opener {
			o, err := memory.New(context.Background(), memory.Config{})
			require.NoError(b, err)
			b.Cleanup(func() { _ = o.Close() })
			return o
		}},
		// A backend that cannot fence: the adaptor confirms every append
		// by reading it back before acknowledging it.
		{"memory-nofencing", func(b *testing.B) walimpls.Opener {
			c := memory.NewCluster()
			c.SetFencing(false)
			o, err := memory.New(context.Background(), memory.Config{Cluster: c})
			require.NoError(b, err)
			b.Cleanup(func() { _ = o.Close() })
			return o
		}},
		// Without fsync the backend's own cost is smallest, so the
		// adaptor's share shows most.
		{"local-nosync", localBackend(local.SyncNone)},
	}
	if withSync {
		bs = append(bs, benchBackend{"local", localBackend(local.SyncAlways)})
	}
	return bs
}

func localBackend(sync local.SyncPolicy) func(b *testing.B) walimpls.Opener {
	return func(b *testing.B) walimpls.Opener {
		s, err := local.New(context.Background(), local.Config{Dir: b.TempDir(), Sync: sync})
		require.NoError(b, err)
		b.Cleanup(func() { require.NoError(b, s.Close()) })
		return s
	}
}

func benchOptions() Options { return Options{Logger: slog.New(slog.DiscardHandler)} }

func benchMessage(b *testing.B) message.Message {
	m, err := message.New(make([]byte, benchRecord), nil)
	require.NoError(b, err)
	return m
}

// cost is what one side of a benchmark took.
type cost struct{ wall, cpu time.Duration }

func (c *cost) add(o cost) { c.wall += o.wall; c.cpu += o.cpu }

// measure runs f and returns its wall and process CPU time.
func measure(b *testing.B, f func()) cost {
	cpu0, wall0 := cpuTime(b), time.Now()
	f()
	return cost{wall: time.Since(wall0), cpu: cpuTime(b) - cpu0}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// appendRound calls appendOne n times from benchAppenders goroutines and
// returns what that took.
func appendRound(b *testing.B, n int, appendOne func(ctx context.Context) error) cost {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Error
	took := measure(b, func() {
		for range benchAppenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Inc() <= int64(n) {
					if err := appendOne(ctx); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
	require.NoError(b, failed.Load())
	return took
}

// benchRound is how many records each side appends before the other's turn.
const benchRound = 2000

// BenchmarkAppend: 16 concurrent appenders of 1 KiB records, straight to the
// backend (raw) and through the adaptor (term, timetick, in-flight bound,
// watermarks; on a backend that cannot fence, the read-back that confirms
// each append; nobody reads, so where the backend fences no tail reader
// runs), on two channels of one backend, b.N records each.
func BenchmarkAppend(b *testing.B) {
	for _, be := range benchBackends(true) {
		b.Run(be.name, func(b *testing.B) {
			o := be.open(b)
			impl, w := openPair(b, o, benchOptions())
			m := benchMessage(b)
			raw := func(ctx context.Context) error { _, err := walimpls.Append(ctx, impl, m); return err }
			ad := func(ctx context.Context) error { _, err := w.Append(ctx, m); return err }
			var rawTook, adTook cost
			b.SetBytes(2 * benchRecord)
			b.ResetTimer()
			for done := 0; done < b.N; done += benchRound {
				n := min(benchRound, b.N-done)
				rawTook.add(appendRound(b, n, raw))
				adTook.add(appendRound(b, n, ad))
			}
			b.StopTimer()
			reportPair(b, float64(b.N), rawTook, adTook)
		})
	}
}

// BenchmarkAppendAsync: one goroutine appending 1 KiB records without
// waiting, up to 64 in flight: straight to the backend's asynchronous
// append (raw), through the adaptor's AppendAsync (which hands them to
// it), and through an adaptor on the same backend with its asynchronous
// append hidden (a goroutine per append, as before backends offered one).
// "ratio" is adaptor ÷ raw, "goroutines-ratio" the goroutine-per-append
// adaptor ÷ raw.
func BenchmarkAppendAsync(b *testing.B) {
	for _, be := range benchBackends(true) {
		if be.name == "memory-nofencing" {
			continue // the adaptor confirms every append there: no asynchronous path
		}
		b.Run(be.name, func(b *testing.B) {
			o := be.open(b)
			ctx := context.Background()
			opts := benchOptions()
			opts.MaxInflightAppends = 64
			impl, w := openPair(b, o, opts)
			aa := impl.(walimpls.AsyncAppender)
			wg, err := Open(ctx, walimplstest.PlainOpener(o), Channel{Name: "adaptor-goroutines", Term: 1}, opts)
			require.NoError(b, err)
			defer wg.Close()
			m := benchMessage(b)
			msgs := []message.Message{m}
			inflight := make(chan struct{}, 64)
			raw := func(done func(error)) {
				inflight <- struct{}{}
				aa.AppendBatchAsync(ctx, msgs, func(_ []message.ID, err error) { <-inflight; done(err) })
			}
			ad := func(done func(error)) { w.AppendAsync(ctx, m, func(_ AppendResult, err error) { done(err) }) }
			adg := func(done func(error)) { wg.AppendAsync(ctx, m, func(_ AppendResult, err error) { done(err) }) }
			var rawTook, adTook, adgTook cost
			b.SetBytes(3 * benchRecord)
			b.ResetTimer()
			for done := 0; done < b.N; done += benchRound {
				n := min(benchRound, b.N-done)
				rawTook.add(asyncRound(b, n, raw))
				adTook.add(asyncRound(b, n, ad))
				adgTook.add(asyncRound(b, n, adg))
			}
			b.StopTimer()
			reportPair(b, float64(b.N), rawTook, adTook)
			b.ReportMetric(rawTook.wall.Seconds()/adgTook.wall.Seconds(), "goroutines-ratio")
		})
	}
}

// asyncRound starts n appends from one goroutine and waits for every
// answer.
func asyncRound(b *testing.B, n int, appendOne func(done func(error))) cost {
	var wg sync.WaitGroup
	var failed atomic.Error
	took := measure(b, func() {
		wg.Add(n)
		for range n {
			appendOne(func(err error) {
				if err != nil {
					failed.Store(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
	})
	require.NoError(b, failed.Load())
	return took
}

// openPair opens the two sides of an append benchmark on o: channel "raw"
// straight on the backend and channel "adaptor" through it, closed when
// the benchmark ends.
func openPair(b *testing.B, o walimpls.Opener, opts Options) (walimpls.WALImpl, WAL) {
	ctx := context.Background()
	impl, err := o.Open(ctx, walimpls.Channel{Name: "raw", Term: 1})
	require.NoError(b, err)
	b.Cleanup(func() { _ = impl.Close() })
	w, err := Open(ctx, o, Channel{Name: "adaptor", Term: 1}, opts)
	require.NoError(b, err)
	b.Cleanup(func() { _ = w.Close() })
	return impl, w
}

// reportPair reports the records/s and CPU per record of each side and
// their ratios.
func reportPair(b *testing.B, records float64, raw, adaptor cost) {
	rawRate, adRate := records/raw.wall.Seconds(), records/adaptor.wall.Seconds()
	b.ReportMetric(rawRate, "raw-records/s")
	b.ReportMetric(adRate, "adaptor-records/s")
	b.ReportMetric(adRate/rawRate, "ratio")
	b.ReportMetric(float64(raw.cpu.Nanoseconds())/records, "raw-cpu-ns/record")
	b.ReportMetric(float64(adaptor.cpu.Nanoseconds())/records, "adaptor-cpu-ns/record")
	b.ReportMetric(raw.cpu.Seconds()/adaptor.cpu.Seconds(), "cpu-ratio")
}

// fillLog appends n records through the adaptor (so the log holds what a
// real one does: term-begin, timeticks, watermarks) and closes the writer.
func fillLog(b *testing.B, o walimpls.Opener, name string, n int) {
	ctx := context.Background()
	w, err := Open(ctx, o, Channel{Name: name, Term: 1}, benchOptions())
	require.NoError(b, err)
	defer func() { require.NoError(b, w.Close()) }()
	m := benchMessage(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Error
	for range benchAppenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Inc() <= int64(n) {
				if _, err := w.Append(ctx, m); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(b, failed.Load())
	require.NoError(b, w.Sync(ctx))
}

// BenchmarkScan: catch-up of a pre-filled log of 100k 1 KiB records, by a
// raw backend scanner and by an adaptor scanner (through the reorder buffer,
// log-level fencing, timetick ordering), one after the other in each op. The
// adaptor reads from a read-only WAL, whose tail cache holds nothing
// of the old log, so the scanner catches up from the backend all the way.
// The adaptor catches up through the backend's batch scanner where there
// is one (walimpls.BatchReader). "ratio" compares the two read message by
// message (Read's Chan); "batch-ratio" the two read in slices (ReadBatches,
// where the backend offers it). One op is one whole scan of each; use
// -benchtime Nx.
func BenchmarkScan(b *testing.B) {
	for _, be := range benchBackends(false) {
		b.Run(be.name, func(b *testing.B) {
			o := be.open(b)
			fillLog(b, o, "bench", benchScanLog)
			ctx := context.Background()
			impl, err := o.Open(ctx, walimpls.Channel{Name: "bench", Mode: walimpls.ReadOnly})
			require.NoError(b, err)
			defer impl.Close()
			opts := benchOptions()
			opts.ReadOnly = true
			w, err := Open(ctx, o, Channel{Name: "bench"}, opts)
			require.NoError(b, err)
			defer w.Close()
			br, batches := impl.(walimpls.BatchReader)
			var rawTook, batchTook, adTook, adBatchTook cost
			b.SetBytes(2 * benchRecord * benchScanLog)
			b.ResetTimer()
			for range b.N {
				rawTook.add(scanOnce(b, func() (walimpls.Scanner, error) {
					return impl.Read(ctx, walimpls.ReadOption{Name: "bench", DeliverPolicy: cursor.All()})
				}, func(m message.Immutable) bool { return m.Kind() == message.KindData }))
				adTook.add(scanOnce(b, func() (walimpls.Scanner, error) {
					return w.Read(ctx, ReadOption{Name: "bench"})
				}, func(message.Immutable) bool { return true }))
				if batches {
					batchTook.add(scanBatchesOnce(b, func() (walimpls.BatchScanner, error) {
						return br.ReadBatches(ctx, walimpls.ReadOption{Name: "bench", DeliverPolicy: cursor.All()})
					}, func(m message.Immutable) bool { return m.Kind() == message.KindData }))
					adBatchTook.add(scanBatchesOnce(b, func() (walimpls.BatchScanner, error) {
						return w.ReadBatches(ctx, ReadOption{Name: "bench"})
					}, func(message.Immutable) bool { return true }))
				}
			}
			b.StopTimer()
			records := float64(b.N * benchScanLog)
			reportPair(b, records, rawTook, adTook)
			if batches {
				// Both read in slices (ReadBatches).
				b.ReportMetric(batchTook.wall.Seconds()/adBatchTook.wall.Seconds(), "batch-ratio")
				b.ReportMetric(float64(batchTook.cpu.Nanoseconds())/records, "raw-batch-cpu-ns/record")
				b.ReportMetric(float64(adBatchTook.cpu.Nanoseconds())/records, "adaptor-batch-cpu-ns/record")
			}
		})
	}
}

// scanOnce starts a scanner and reads until it counted benchScanLog records.
func scanOnce(b *testing.B, read func() (walimpls.Scanner, error), isRecord func(message.Immutable) bool) cost {
	var s walimpls.Scanner
	took := measure(b, func() {
		var err error
		s, err = read()
		require.NoError(b, err)
		for n := 0; n < benchScanLog; {
			m, ok := <-s.Chan()
			if !ok {
				require.FailNow(b, fmt.Sprintf("scanner ended after %d records: %v", n, s.Error()))
			}
			if isRecord(m) {
				n++
			}
		}
	})
	require.NoError(b, s.Close())
	return took
}

// scanBatchesOnce is scanOnce through a batch scanner.
func scanBatchesOnce(b *testing.B, read func() (walimpls.BatchScanner, error), isRecord func(message.Immutable) bool) cost {
	var s walimpls.BatchScanner
	took := measure(b, func() {
		var err error
		s, err = read()
		require.NoError(b, err)
		for n := 0; n < benchScanLog; {
			batch, ok := <-s.Batches()
			if !ok {
				require.FailNow(b, fmt.Sprintf("scanner ended after %d records: %v", n, s.Error()))
			}
			for _, m := range batch {
				if isRecord(m) {
					n++
				}
			}
		}
	})
	require.NoError(b, s.Close())
	return took
}

// BenchmarkOpen: how long a read-write Open (a takeover at the next term)
// takes on a channel retaining 10 MiB and on one retaining 1 GiB of 1 KiB
// records, alternating in each op on one local store (no fsync, so the
// figure is the adaptor's recovery and the backend's open, not the disk).
// Reports both times, their ratio (goal ≤ 1.5×) and how many messages each
// open read. Filling takes a while: use -benchtime Nx.
//
//	go test -run '^$' -bench Open -benchtime 20x ./adaptor/
func BenchmarkOpen(b *testing.B) {
	o := localBackend(local.SyncNone)(b)
	sizes := []struct {
		name    string
		records int
	}{{"10MiB", 10 << 10}, {"1GiB", 1 << 20}}
	for _, sz := range sizes {
		fillLog(b, o, sz.name, sz.records)
	}
	ctx := context.Background()
	took := make([]time.Duration, len(sizes))
	read := make([]int, len(sizes))
	b.ResetTimer()
	for i := range b.N {
		for k := range sizes {
			j := (i + k) % len(sizes) // neither size always goes first
			sz := sizes[j]
			start := time.Now()
			w, err := Open(ctx, o, Channel{Name: sz.name, Term: int64(2 + i)}, benchOptions())
			require.NoError(b, err)
			took[j] += time.Since(start)
			read[j] = w.(*wal).recoveredMessages
			require.NoError(b, w.Close())
		}
	}
	b.StopTimer()
	for j, sz := range sizes {
		b.ReportMetric(float64(took[j].Microseconds())/float64(b.N)/1000, "open-"+sz.name+"-ms")
		b.ReportMetric(float64(read[j]), "read-"+sz.name+"-msgs")
	}
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio")
}

// BenchmarkFollowerLag: how long after Append returns a scanner of the
// writing WAL (local releases) and a read-only follower (watermarks only)
// deliver the message, one append at a time on a local store without
// fsync, for the default TimeTickInterval and a lowered one. Reports the
// median and the maximum of each.
//
//	go test -run '^$' -bench FollowerLag -benchtime 40x ./adaptor/
func BenchmarkFollowerLag(b *testing.B) {
	for _, interval := range []time.Duration{defaultTimeTickInterval, 10 * time.Millisecond} {
		b.Run(interval.String(), func(b *testing.B) {
			ctx := context.Background()
			o := localBackend(local.SyncNone)(b)
			opts := benchOptions()
			opts.TimeTickInterval = interval
			w, err := Open(ctx, o, Channel{Name: "lag", Term: 1}, opts)
			require.NoError(b, err)
			defer w.Close()
			ro := benchOptions()
			ro.ReadOnly = true
			f, err := Open(ctx, o, Channel{Name: "lag"}, ro)
			require.NoError(b, err)
			defer f.Close()
			own, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.Latest()})
			require.NoError(b, err)
			defer own.Close()
			follower, err := f.Read(ctx, ReadOption{DeliverPolicy: cursor.Latest()})
			require.NoError(b, err)
			defer follower.Close()
			m := benchMessage(b)
			var ownLag, followerLag []time.Duration
			b.ResetTimer()
			for range b.N {
				_, err := w.Append(ctx, m)
				require.NoError(b, err)
				acked := time.Now()
				<-own.Chan()
				ownLag = append(ownLag, time.Since(acked))
				<-follower.Chan()
				followerLag = append(followerLag, time.Since(acked))
			}
			b.StopTimer()
			for name, lags := range map[string][]time.Duration{"own": ownLag, "follower": followerLag} {
				slices.Sort(lags)
				b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, name+"-p50-ms")
				b.ReportMetric(float64(lags[len(lags)-1].Microseconds())/1000, name+"-max-ms")
			}
		})
	}
}
