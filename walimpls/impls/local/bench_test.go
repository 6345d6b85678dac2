package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// The benchmarks report records/s and latency percentiles; compare ratios
// measured in one run only (this kind of disk swings 2x between runs):
//
//	go test -run '^$' -bench . -benchtime 2s ./walimpls/impls/local/

func BenchmarkAppendSyncAlways(b *testing.B) {
	for _, size := range []int{128, 4096} {
		b.Run(fmt.Sprintf("size=%d/appenders=64", size), func(b *testing.B) {
			benchAppend(b, Config{}, 1, 64, size)
		})
		b.Run(fmt.Sprintf("size=%d/raw-write-fdatasync-per-record", size), func(b *testing.B) {
			benchRaw(b, size)
		})
	}
}

// BenchmarkChannels compares many channels sharing the journal with one
// channel at the same total concurrency.
func BenchmarkChannels(b *testing.B) {
	b.Run("channels=1x128", func(b *testing.B) { benchAppend(b, Config{}, 1, 128, 128) })
	b.Run("channels=16x8", func(b *testing.B) { benchAppend(b, Config{}, 16, 8, 128) })
}

func BenchmarkAppendSyncNone(b *testing.B) {
	b.Run("size=128/appenders=1", func(b *testing.B) { benchAppend(b, Config{Sync: SyncNone}, 1, 1, 128) })
}

// benchAppend runs channels × perChannel appenders of size-byte payloads
// until b.N records are acknowledged.
func benchAppend(b *testing.B, cfg Config, channels, perChannel, size int) {
	cfg.Dir = b.TempDir()
	s, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	wals := make([]walimpls.WALImpl, channels)
	for i := range wals {
		if wals[i], err = s.Open(ctx, walimpls.Channel{Name: fmt.Sprintf("bench-%d", i), Term: 1}); err != nil {
			b.Fatal(err)
		}
	}
	m, _ := message.New(make([]byte, size), nil)
	// Warm up: the first segment and the page cache.
	for _, w := range wals {
		if _, err := walimpls.Append(ctx, w, m); err != nil {
			b.Fatal(err)
		}
	}
	var (
		next      atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		failed    atomic.Error
	)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for _, w := range wals {
		for range perChannel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]time.Duration, 0, b.N/(channels*perChannel)+1)
				for next.Add(1) <= int64(b.N) {
					t0 := time.Now()
					if _, err := walimpls.Append(ctx, w, m); err != nil {
						failed.Store(err)
						return
					}
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	report(b, elapsed, latencies)
	var h dto.Metric
	if err := s.m.batchRecords.Write(&h); err == nil && h.GetHistogram().GetSampleCount() > 0 {
		b.ReportMetric(h.GetHistogram().GetSampleSum()/float64(h.GetHistogram().GetSampleCount()), "records/flush")
	}
}

// benchRaw is the baseline: one write and one fdatasync per record, into a
// pre-zeroed file like the journal's segments.
func benchRaw(b *testing.B, size int) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	file := osFile{f: f}
	total := int64(b.N+1) * int64(size)
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < total; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := file.Sync(); err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, size)
	latencies := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := f.WriteAt(rec, int64(i)*int64(size)); err != nil {
			b.Fatal(err)
		}
		if err := file.Sync(); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, elapsed, latencies)
}

func report(b *testing.B, elapsed time.Duration, latencies []time.Duration) {
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkScan reads back 128 MiB of 4 KiB messages of one channel through
// a scanner, against reading the same segment files with plain buffered
// reads (no decoding). Both read from the page cache after the first pass.
func BenchmarkScan(b *testing.B) {
	const total, size = 128 << 20, 4096
	dir := b.TempDir()
	cfg := Config{Dir: dir, Sync: SyncNone}
	s, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	w, err := s.Open(ctx, walimpls.Channel{Name: "scan", Term: 1})
	if err != nil {
		b.Fatal(err)
	}
	m, _ := message.New(make([]byte, size), nil)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < total/size/16; i++ {
				if _, err := walimpls.Append(ctx, w, m); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			sc, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.All()})
			if err != nil {
				b.Fatal(err)
			}
			for n := 0; n < total/size; n++ {
				<-sc.Chan()
			}
			_ = sc.Close()
		}
	})
	b.Run("plain-buffered-read", func(b *testing.B) {
		paths, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
		buf := make([]byte, 1<<20)
		b.SetBytes(total)
		for b.Loop() {
			read := 0
			for _, p := range paths {
				f, err := os.Open(p)
				if err != nil {
					b.Fatal(err)
				}
				for read < total {
					n, err := f.Read(buf)
					read += n
					if err != nil {
						break
					}
				}
				_ = f.Close()
			}
		}
	})
	_ = s.Close()
}
