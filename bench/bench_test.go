package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/atomic"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// The comparisons; see README.md. Compare ratios measured in one run only:
// this kind of disk swings 2x between runs.
//
//	go test -run '^$' -bench . -benchtime 2s

// benchDir returns a fresh directory for one benchmark: under
// $STREAMWAL_BENCH_DIR when set (to measure another disk), else b.TempDir().
func benchDir(b *testing.B) string {
	root := os.Getenv("STREAMWAL_BENCH_DIR")
	if root == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(root, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// prezeroBytes is how much a pre-zeroed baseline file gets: room for b.N
// records of size bytes plus framing, within [4 MiB, 1 GiB].
func prezeroBytes(n, size int) int64 {
	return min(max(int64(n+1)*int64(size+64), 4<<20), 1<<30)
}

// runAppenders runs appenders goroutines that together append b.N records of
// size bytes through appendFn (given the goroutine's number), and reports
// records/s and the p50 and p99 latency of one append.
func runAppenders(b *testing.B, appenders, size int, appendFn func(g int, p []byte) error) {
	b.Helper()
	payloads := make([][]byte, appenders)
	for g := range payloads {
		payloads[g] = make([]byte, size)
		for i := range payloads[g] {
			payloads[g][i] = byte(rand.Uint32())
		}
	}
	// Warm up: open files, the first segment, the page cache.
	for g := range appenders {
		if err := appendFn(g, payloads[g]); err != nil {
			b.Fatal(err)
		}
	}
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
		lats   = make([]time.Duration, 0, b.N)
		failed atomic.Error
	)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, b.N/appenders+1)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := appendFn(g, payloads[g]); err != nil {
					failed.Store(err)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	if len(lats) > 0 {
		slices.Sort(lats)
		b.ReportMetric(float64(lats[len(lats)/2])/1e3, "p50-µs")
		b.ReportMetric(float64(lats[len(lats)*99/100])/1e3, "p99-µs")
	}
}

// reportSyncs reports records per fdatasync over the timed records (the
// warm-up's syncs are few and included) and the mean fdatasync duration.
func reportSyncs(b *testing.B, syncs, seconds float64) {
	if syncs > 0 {
		b.ReportMetric(float64(b.N)/syncs, "records/sync")
		b.ReportMetric(seconds*1e6, "sync-µs")
	}
}

func closeLog(b *testing.B, l io.Closer) {
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

func benchStreamwal(b *testing.B, sync local.SyncPolicy, channels, perChannel, size int) {
	l, err := openStreamwal(benchDir(b), sync, channels)
	if err != nil {
		b.Fatal(err)
	}
	defer closeLog(b, l)
	// Open prepares the first segment on the first append; the preparer
	// then zero-fills the next spare (64 MiB) in the background. Let it
	// finish so that a short run measures the steady state rather than
	// that one-off write, which the other logs' runs do not contain.
	for g := range channels {
		if err := l.AppendTo(g, make([]byte, size)); err != nil {
			b.Fatal(err)
		}
	}
	waitForSpare(b, l.dir)
	runAppenders(b, channels*perChannel, size, func(g int, p []byte) error { return l.AppendTo(g%channels, p) })
	syncs, seconds, perFlush := l.stats()
	if sync == local.SyncAlways {
		reportSyncs(b, syncs, seconds)
	}
	b.ReportMetric(perFlush, "records/flush")
}

// waitForSpare waits (up to 30s) until a streamwal root has a spare segment
// of full size, and fdatasyncs it.
func waitForSpare(b *testing.B, dir string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		spares, _ := filepath.Glob(filepath.Join(dir, "spare-*.tmp"))
		for _, p := range spares {
			if st, err := os.Stat(p); err == nil && st.Size() >= local.DefaultSegmentBytes {
				if f, err := os.Open(p); err == nil {
					_ = unix.Fdatasync(int(f.Fd()))
					_ = f.Close()
					return
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Log("no spare segment prepared within 30s")
}

func benchPebble(b *testing.B, appenders, size int, prezero bool) {
	var zeros int64
	if prezero {
		zeros = prezeroBytes(b.N, size)
	}
	l, err := openPebble(filepath.Join(benchDir(b), "000001.log"), zeros, true)
	if err != nil {
		b.Fatal(err)
	}
	defer closeLog(b, l)
	runAppenders(b, appenders, size, func(_ int, p []byte) error { return l.Append(p) })
	n, seconds := l.syncs()
	reportSyncs(b, n, seconds)
}

func benchRaw(b *testing.B, appenders, size int) {
	l, err := openRaw(filepath.Join(benchDir(b), "raw"), prezeroBytes(b.N, size))
	if err != nil {
		b.Fatal(err)
	}
	defer closeLog(b, l)
	runAppenders(b, appenders, size, func(_ int, p []byte) error { return l.Append(p) })
}

// BenchmarkSyncAlways: 64 concurrent appenders, every append acknowledged
// after the fdatasync that covers it. Goals at 128 B: streamwal >= 1.0x
// pebble's records/s and >= 15x raw.
func BenchmarkSyncAlways(b *testing.B) {
	const appenders = 64
	for _, size := range []int{128, 4096} {
		b.Run(fmt.Sprintf("size=%d/streamwal", size), func(b *testing.B) {
			benchStreamwal(b, local.SyncAlways, 1, appenders, size)
		})
		b.Run(fmt.Sprintf("size=%d/pebble", size), func(b *testing.B) {
			benchPebble(b, appenders, size, false)
		})
		b.Run(fmt.Sprintf("size=%d/pebble-prezeroed", size), func(b *testing.B) {
			benchPebble(b, appenders, size, true)
		})
		b.Run(fmt.Sprintf("size=%d/raw", size), func(b *testing.B) {
			benchRaw(b, appenders, size)
		})
	}
}

// BenchmarkChannels: 16 channels x 8 appenders against 1 channel x 128
// appenders, sync=always, 128 B. Goal: 16x8 >= 0.8x 1x128.
func BenchmarkChannels(b *testing.B) {
	b.Run("channels=1x128", func(b *testing.B) { benchStreamwal(b, local.SyncAlways, 1, 128, 128) })
	b.Run("channels=16x8", func(b *testing.B) { benchStreamwal(b, local.SyncAlways, 16, 8, 128) })
}

// BenchmarkSyncNone: one appender, 128 B, no fdatasync per record. Goal:
// streamwal >= 1.0x the faster of etcd and tidwall.
func BenchmarkSyncNone(b *testing.B) {
	const size = 128
	b.Run("size=128/streamwal", func(b *testing.B) { benchStreamwal(b, local.SyncNone, 1, 1, size) })
	b.Run("size=128/etcd", func(b *testing.B) {
		l, err := openEtcd(filepath.Join(benchDir(b), "etcd"), false)
		if err != nil {
			b.Fatal(err)
		}
		defer closeLog(b, l)
		runAppenders(b, 1, size, func(_ int, p []byte) error { return l.Append(p) })
	})
	b.Run("size=128/tidwall", func(b *testing.B) {
		l, err := openTidwall(filepath.Join(benchDir(b), "tidwall"), false)
		if err != nil {
			b.Fatal(err)
		}
		defer closeLog(b, l)
		runAppenders(b, 1, size, func(_ int, p []byte) error { return l.Append(p) })
	})
}

// scanBytes is how much BenchmarkScan writes: 1 GiB, 64 MiB with -short,
// or $STREAMWAL_BENCH_SCAN_MB MiB.
func scanBytes(b *testing.B) int64 {
	if s := os.Getenv("STREAMWAL_BENCH_SCAN_MB"); s != "" {
		mb, err := strconv.Atoi(s)
		if err != nil || mb <= 0 {
			b.Fatalf("bad STREAMWAL_BENCH_SCAN_MB %q", s)
		}
		return int64(mb) << 20
	}
	if testing.Short() {
		return 64 << 20
	}
	return 1 << 30
}

// dropCache writes back and evicts the files' pages from the page cache
// (posix_fadvise DONTNEED on each file: only these files, not the whole
// machine's cache).
func dropCache(b *testing.B, paths []string) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
}

// residentFraction is the fraction of the files' pages in the page cache.
func residentFraction(paths []string) float64 {
	var in, total int
	page := os.Getpagesize()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		st, err := f.Stat()
		if err != nil || st.Size() == 0 {
			_ = f.Close()
			continue
		}
		m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		_ = f.Close()
		if err != nil {
			continue
		}
		vec := make([]byte, (len(m)+page-1)/page)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno == 0 {
			for _, v := range vec {
				in += int(v & 1)
			}
			total += len(vec)
		}
		_ = unix.Munmap(m)
	}
	if total == 0 {
		return 0
	}
	return float64(in) / float64(total)
}

// BenchmarkScan reads one channel of 4 KiB messages (1 GiB, 64 MiB with
// -short) from the start with a streamwal scanner (cursor.All, every
// message received), against reading the same segment files with plain
// buffered reads (bufio over os.File, no decoding). "cold" evicts the files'
// pages before each pass; "warm" reads from the page cache. Goal: scanner >=
// 0.7x plain MB/s. MB/s counts payload bytes for the scanner and file bytes
// for the plain reads (which include framing and the unused tail of the last
// segment).
func BenchmarkScan(b *testing.B) {
	const size = 4096
	total := scanBytes(b)
	n := int(total / size)
	dir := benchDir(b)
	ctx := context.Background()
	{
		s, err := local.New(context.Background(), local.Config{Dir: dir, Sync: local.SyncNone})
		if err != nil {
			b.Fatal(err)
		}
		w, err := s.Open(ctx, walimpls.Channel{Name: "scan", Term: 1})
		if err != nil {
			b.Fatal(err)
		}
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(rand.Uint32())
		}
		m, _ := message.New(payload, nil)
		var wg sync.WaitGroup
		const writers = 8
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += writers {
					if _, err := walimpls.Append(ctx, w, m); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		_ = w.Close()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	s, err := local.New(context.Background(), local.Config{Dir: dir, Sync: local.SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	defer closeLog(b, s)
	w, err := s.Open(ctx, walimpls.Channel{Name: "scan", Term: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer closeLog(b, w)
	paths, err := segmentFiles(dir)
	if err != nil || len(paths) == 0 {
		b.Fatalf("no segment files: %v", err)
	}
	var fileBytes int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		fileBytes += st.Size()
	}

	scan := func(b *testing.B, cold bool, readAhead int) {
		b.SetBytes(int64(n) * size)
		var resident float64
		for b.Loop() {
			if cold {
				b.StopTimer()
				dropCache(b, paths)
				resident = residentFraction(paths)
				b.StartTimer()
			}
			sc, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.All(), ReadAheadBytes: readAhead})
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for got < n {
				m, ok := <-sc.Chan()
				if !ok {
					<-sc.Done()
					b.Fatalf("scanner ended after %d of %d: %v", got, n, sc.Error())
				}
				if len(m.Payload()) != size {
					b.Fatalf("payload of %d bytes, want %d", len(m.Payload()), size)
				}
				got++
			}
			_ = sc.Close()
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		if cold {
			b.ReportMetric(resident*100, "resident-%")
		}
	}
	plain := func(b *testing.B, cold bool) {
		b.SetBytes(fileBytes)
		buf := make([]byte, 64<<10)
		var resident float64
		for b.Loop() {
			if cold {
				b.StopTimer()
				dropCache(b, paths)
				resident = residentFraction(paths)
				b.StartTimer()
			}
			var read int64
			for _, p := range paths {
				f, err := os.Open(p)
				if err != nil {
					b.Fatal(err)
				}
				r := bufio.NewReaderSize(f, 1<<20)
				for {
					k, err := r.Read(buf)
					read += int64(k)
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				_ = f.Close()
			}
			if read != fileBytes {
				b.Fatalf("read %d bytes, want %d", read, fileBytes)
			}
		}
		if cold {
			b.ReportMetric(resident*100, "resident-%")
		}
	}
	b.Run("warm/scanner", func(b *testing.B) { scan(b, false, 0) })
	b.Run("warm/scanner-readahead=8MiB", func(b *testing.B) { scan(b, false, 8<<20) })
	b.Run("warm/plain-bufio", func(b *testing.B) { plain(b, false) })
	b.Run("cold/scanner", func(b *testing.B) { scan(b, true, 0) })
	b.Run("cold/plain-bufio", func(b *testing.B) { plain(b, true) })
}
