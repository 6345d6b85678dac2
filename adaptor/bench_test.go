package adaptor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// The benchmarks compare the adaptor with the raw backend under it, on the
// same backend and the same records, so that the ratio of their records/s is
// the adaptor's cost (issue goals: append ≥ 0.9×, scan ≥ 0.8×):
//
//	go test -run '^$' -bench . -benchtime 20000x ./adaptor/
//
// Each reports records/s; compare the raw and adaptor sub-benchmarks of a
// backend.

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
			o, err := memory.NewOpener(memory.NewCluster(), memory.Config{})
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
		s, err := local.Open(local.Config{Dir: b.TempDir(), Sync: sync})
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

// appendParallel calls appendOne b.N times from benchAppenders goroutines and
// reports records/s.
func appendParallel(b *testing.B, appendOne func(ctx context.Context) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchAppenders)
	b.SetBytes(benchRecord)
	b.ResetTimer()
	for range benchAppenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Inc() <= int64(b.N) {
				if err := appendOne(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	require.NoError(b, <-errs)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppend: 16 concurrent appenders of 1 KiB records, straight to the
// backend (raw) and through the adaptor (term, timetick, in-flight bound,
// metrics, watermarks, the tail reader feeding the write-ahead buffer).
func BenchmarkAppend(b *testing.B) {
	for _, be := range benchBackends(true) {
		b.Run(be.name+"/raw", func(b *testing.B) {
			o := be.open(b)
			impl, err := o.Open(context.Background(), walimpls.Channel{Name: "bench", Term: 1})
			require.NoError(b, err)
			defer impl.Close()
			m := benchMessage(b)
			appendParallel(b, func(ctx context.Context) error {
				_, err := impl.Append(ctx, m)
				return err
			})
		})
		b.Run(be.name+"/adaptor", func(b *testing.B) {
			o := be.open(b)
			w, err := Open(context.Background(), o, Channel{Name: "bench", Term: 1}, benchOptions())
			require.NoError(b, err)
			defer w.Close()
			m := benchMessage(b)
			appendParallel(b, func(ctx context.Context) error {
				_, err := w.Append(ctx, m)
				return err
			})
		})
	}
}

// fillLog appends n records through the adaptor (so the log holds what a
// real one does: term-begin, timeticks, watermarks) and closes the writer.
func fillLog(b *testing.B, o walimpls.Opener, n int) {
	ctx := context.Background()
	w, err := Open(ctx, o, Channel{Name: "bench", Term: 1}, benchOptions())
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
// log-level fencing, timetick ordering). The adaptor reads from a read-only
// WAL, whose write-ahead buffer holds nothing of the old log, so the
// scanner catches up from the backend all the way. One op is one whole scan;
// use -benchtime Nx.
func BenchmarkScan(b *testing.B) {
	for _, be := range benchBackends(false) {
		b.Run(be.name, func(b *testing.B) {
			o := be.open(b)
			fillLog(b, o, benchScanLog)
			b.Run("raw", func(b *testing.B) {
				ctx := context.Background()
				impl, err := o.Open(ctx, walimpls.Channel{Name: "bench", Mode: walimpls.ReadOnly})
				require.NoError(b, err)
				defer impl.Close()
				scanAll(b, func() (walimpls.Scanner, error) {
					return impl.Read(ctx, walimpls.ReadOption{Name: "bench", DeliverPolicy: walimpls.DeliverAll()})
				}, func(m message.Immutable) bool { return m.Kind() == message.KindData })
			})
			b.Run("adaptor", func(b *testing.B) {
				ctx := context.Background()
				opts := benchOptions()
				opts.ReadOnly = true
				w, err := Open(ctx, o, Channel{Name: "bench"}, opts)
				require.NoError(b, err)
				defer w.Close()
				scanAll(b, func() (walimpls.Scanner, error) {
					return w.Read(ctx, ReadOption{Name: "bench"})
				}, func(message.Immutable) bool { return true })
			})
		})
	}
}

// scanAll starts b.N scanners, one after the other, each reading until it
// counted benchScanLog records, and reports records/s.
func scanAll(b *testing.B, read func() (walimpls.Scanner, error), isRecord func(message.Immutable) bool) {
	b.SetBytes(benchRecord * benchScanLog)
	b.ResetTimer()
	for range b.N {
		s, err := read()
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
		require.NoError(b, s.Close())
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchScanLog)/b.Elapsed().Seconds(), "records/s")
}
