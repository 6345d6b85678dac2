package adaptor

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func memOpener(t *testing.T, c *memory.Cluster, cfg memory.Config) walimpls.Opener {
	cfg.Cluster = c
	o, err := memory.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

func openWAL(t *testing.T, o walimpls.Opener, name string, term int64, opts Options) *wal {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w, err := Open(context.Background(), o, Channel{Name: name, Term: term}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w.(*wal)
}

func recvN(t *testing.T, s walimpls.Scanner, n int) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended after %d of %d: %v", len(out), n, s.Error())
			out = append(out, m)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "%d of %d", len(out), n)
		}
	}
	return out
}

// recvBatch takes the next slice from s; it must not be empty.
func recvBatch(t *testing.T, s walimpls.BatchScanner) []message.Immutable {
	t.Helper()
	select {
	case batch, ok := <-s.Batches():
		require.True(t, ok, "the batch scanner ended: %v", s.Error())
		require.NotEmpty(t, batch, "an empty slice")
		return batch
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no batch within 30s")
		return nil
	}
}

func quietFor(t *testing.T, s walimpls.Scanner, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-s.Chan():
		require.Falsef(t, ok, "unexpected message %s kind %s", m.ID(), m.Kind())
	case <-time.After(d):
	}
}

func TestSplitLargeMessages(t *testing.T) {
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{MaxMessageBytes: 1 << 20})
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	require.NoError(t, err)
	w := openWAL(t, o, "split", 1, Options{TimeTickInterval: time.Hour, Metrics: metrics})
	ctx := context.Background()
	s, err := w.Read(ctx, ReadOption{})
	require.NoError(t, err)

	r := rand.New(rand.NewPCG(1, 1))
	big := make([]byte, 10<<20)
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	m, _ := message.New(big, map[string]string{"name": "ten-mib"})
	res, err := w.Append(ctx, m.WithVChannel("vc"))
	require.NoError(t, err)

	// Inject what retries and dead writers leave: a duplicate of a part of
	// the big message, and the first part of a message whose writer died.
	// The raw writer shares the WAL's term; with the backend's fencing off
	// its open does not take the channel over (the same-term rule).
	c.SetFencing(false)
	raw, err := o.Open(ctx, walimpls.Channel{Name: "split", Term: 1})
	require.NoError(t, err)
	defer func() { _ = raw.Close() }()
	parts, err := splitMessage(m.WithKind(message.KindData).WithTerm(1).WithTimeTick(res.TimeTick), w.partBytes)
	require.NoError(t, err)
	require.Greater(t, len(parts), 10)
	_, err = walimpls.Append(ctx, raw, parts[3]) // a late duplicate of a completed message
	require.NoError(t, err)
	// Raw parts hold their timetick in flight while written, as the
	// adaptor's own appends do, so that no watermark overtakes them.
	rawParts := func(size int) ([]message.Message, func()) {
		m, _ := message.New(make([]byte, size), map[string]string{"raw": "yes"})
		tt, err := w.ticks.begin(ctx)
		require.NoError(t, err)
		ps, err := splitMessage(m.WithKind(message.KindData).WithTerm(1).WithTimeTick(tt), w.partBytes)
		require.NoError(t, err)
		return ps, func() { w.ticks.end(tt) }
	}
	dup, end := rawParts(3 << 20) // written with a retried part in the middle
	for _, i := range []int{0, 1, 1, 2, 3} {
		_, err = walimpls.Append(ctx, raw, dup[i])
		require.NoError(t, err)
	}
	end()
	orphanParts, end := rawParts(3 << 20) // a writer that died after its first part
	_, err = walimpls.Append(ctx, raw, orphanParts[0])
	require.NoError(t, err)
	end()

	small, _ := message.New([]byte("after"), nil)
	_, err = w.Append(ctx, small)
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))

	got := recvN(t, s, 3)
	require.Equal(t, big, got[0].Payload(), "the 10 MiB message is joined byte for byte")
	v, _ := got[0].Properties().Get("name")
	require.Equal(t, "ten-mib", v)
	require.Equal(t, "vc", got[0].VChannel())
	require.Equal(t, message.KindData, got[0].Kind())
	require.True(t, got[0].ID().EQ(res.ID), "a joined message has its first part's ID")
	require.Len(t, got[1].Payload(), 3<<20)
	require.Equal(t, "after", string(got[2].Payload()))
	quietFor(t, s, 100*time.Millisecond)

	// The retried part of the completed message is a duplicate, or late if a
	// watermark covered its message first; either way it is dropped, counted.
	dups := testutil.ToFloat64(metrics.dropped.WithLabelValues("split", dropPartDuplicate))
	late := testutil.ToFloat64(metrics.dropped.WithLabelValues("split", dropLate))
	require.GreaterOrEqual(t, dups, 1.0)
	require.EqualValues(t, 2, dups+late)
	require.EqualValues(t, 1, testutil.ToFloat64(metrics.dropped.WithLabelValues("split", dropPartOrphan)))

	tooBig, _ := message.New(make([]byte, defaultMaxMessageBytes+1), nil)
	_, err = w.Append(ctx, tooBig)
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
}

// With backend fencing off, a stale writer keeps appending after a higher
// term opened; the log-level fence keeps its messages away from readers.
func TestStaleWriterFencedInTheLog(t *testing.T) {
	c := memory.NewCluster()
	c.SetFencing(false)
	ctx := context.Background()
	opts := Options{TimeTickInterval: 5 * time.Millisecond}
	w1 := openWAL(t, memOpener(t, c, memory.Config{}), "stale", 1, opts)
	m1, _ := message.New([]byte("term1-before"), nil)
	_, err := w1.Append(ctx, m1)
	require.NoError(t, err)

	w2 := openWAL(t, memOpener(t, c, memory.Config{}), "stale", 2, opts)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // the stale writer does not know it lost the channel
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m, _ := message.New(fmt.Appendf(nil, "term1-after-%d", i), nil)
			_, _ = w1.Append(ctx, m)
		}
	}()
	for i := range 50 {
		m, _ := message.New(fmt.Appendf(nil, "term2-%d", i), nil)
		_, err := w2.Append(ctx, m)
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	require.NoError(t, w2.Sync(ctx))

	ro := openWAL(t, memOpener(t, c, memory.Config{}), "stale", 0, Options{ReadOnly: true})
	for _, reader := range []WAL{w2, ro} {
		s, err := reader.Read(ctx, ReadOption{Filter: Filter{Kinds: []message.Kind{message.KindData, message.KindTermBegin}}})
		require.NoError(t, err)
		got := recvN(t, s, 1+1+1+50) // term-begin 1, the term-1 message, term-begin 2, term 2's messages
		var seenTerm2 bool
		for _, m := range got {
			term, _ := m.Term()
			if m.Kind() == message.KindTermBegin && term == 2 {
				seenTerm2 = true
				continue
			}
			if seenTerm2 {
				require.EqualValuesf(t, 2, term, "a term-1 message (%q) was delivered after term 2's term-begin", m.Payload())
			}
		}
		require.True(t, seenTerm2)
		quietFor(t, s, 50*time.Millisecond)
		require.NoError(t, s.Close())
	}
}

func TestRetriesRetryableErrors(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "retry", 1, Options{TimeTickInterval: time.Hour})
	c.FailNextAppends(3)
	m, _ := message.New([]byte("x"), nil)
	_, err := w.Append(context.Background(), m)
	require.NoError(t, err, "retryable failures are retried")

	c.FailNextAppends(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = w.Append(ctx, m)
	require.ErrorIs(t, err, context.DeadlineExceeded, "retries stop when the context ends")
	require.ErrorIs(t, err, memory.ErrInjected, "the last attempt's error is kept as a cause")
	require.True(t, walimpls.NotStored(err), "no attempt reached the log")
	c.FailNextAppends(0)
}

func TestAppendAsyncBackPressure(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "async", 1, Options{TimeTickInterval: time.Hour, MaxInflightAppends: 2})
	c.SetAppendLatency(100 * time.Millisecond)
	m, _ := message.New([]byte("x"), nil)
	var wg sync.WaitGroup
	results := make(chan error, 3)
	start := time.Now()
	for range 3 {
		wg.Add(1)
		w.AppendAsync(context.Background(), m, func(_ AppendResult, err error) { results <- err; wg.Done() })
	}
	// The third call had to wait for a slot.
	require.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
	wg.Wait()
	close(results)
	for err := range results {
		require.NoError(t, err)
	}
	c.SetAppendLatency(0)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errc := make(chan error, 3)
	c.SetAppendLatency(time.Hour)
	w.AppendAsync(context.Background(), m, func(_ AppendResult, err error) { errc <- err })
	w.AppendAsync(context.Background(), m, func(_ AppendResult, err error) { errc <- err })
	w.AppendAsync(ctx, m, func(_ AppendResult, err error) { errc <- err })
	require.ErrorIs(t, <-errc, context.Canceled, "a full pipeline and a done context")
	require.NoError(t, w.Close(), "Close ends appends in flight")
	require.ErrorIs(t, <-errc, walimpls.ErrClosed)
	require.ErrorIs(t, <-errc, walimpls.ErrClosed)
}

func TestBatchAndTimetickOrder(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "batch", 1, Options{TimeTickInterval: 5 * time.Millisecond})
	msgs := make([]message.Message, 20)
	for i := range msgs {
		msgs[i], _ = message.New(fmt.Appendf(nil, "%d", i), nil)
	}
	res, err := w.AppendBatch(context.Background(), msgs)
	require.NoError(t, err)
	seen := map[uint64]bool{}
	for _, r := range res {
		require.False(t, seen[r.TimeTick])
		seen[r.TimeTick] = true
	}
	// Reopening at a higher term continues above every recovered timetick,
	// even from an allocator whose clock is far behind.
	require.NoError(t, w.Close())
	w2 := openWAL(t, memOpener(t, c, memory.Config{}), "batch", 2, Options{Allocator: fixedAllocator(1)})
	r2, err := w2.Append(context.Background(), msgs[0])
	require.NoError(t, err)
	for _, r := range res {
		require.Greater(t, r2.TimeTick, r.TimeTick)
	}
}

type fixedAllocator uint64

func (f fixedAllocator) Allocate(context.Context) (uint64, error) { return uint64(f), nil }

// A tailing scanner whose reader stops reading stalls once it released
// something: it reads no further while the tail cache moves on
// without it. Read again, it finds its position evicted, falls back to
// reading the backend, and still delivers everything in order.
//
// The stall is made, not waited for: the test does not read, the scanner's
// stalled hook says which buffer index it will read next, and the buffer is
// then filled until it evicted that index. Nothing here depends on
// scheduling; the only waits are for things that must happen.
func TestStalledScannerFallsBackToCatchUp(t *testing.T) {
	c := memory.NewCluster()
	metrics, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	const name = "evict"
	w := openWAL(t, memOpener(t, c, memory.Config{}), name, 1, Options{
		TimeTickInterval: time.Hour, TailCacheBytes: 16 << 10, Metrics: metrics})
	type stall struct {
		tailing bool
		cursor  int64
	}
	stalls := make(chan stall, 1)
	w.scanHooks.stalled = func(tailing bool, cursor int64) {
		select {
		case stalls <- stall{tailing, cursor}:
		default: // only the first stall matters
		}
	}
	ctx := context.Background()
	s, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	first, _ := message.New([]byte("first"), nil)
	_, err = w.Append(ctx, first)
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))

	// The scanner switches to tailing when it reads "first" (the buffer
	// holds it, or is about to), releases it and, with nobody reading,
	// waits for the reader before it reads on: it must stall, tailing.
	var st stall
	select {
	case st = <-stalls:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "watchdog: the scanner never waited for its reader")
	}
	require.True(t, st.tailing, "the scanner stalled while still catching up")

	// While "first" is not taken the scanner stays stalled (waitRoom wakes
	// only when the sender has handed a whole chunk over), so its next read
	// is at st.cursor however long the rest takes. 300 messages of 576
	// bytes are twelve times the buffer's budget.
	const n = 300
	for i := range n {
		m, _ := message.New(append(fmt.Appendf(nil, "%04d", i), make([]byte, 512)...), nil)
		_, err := w.Append(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, w.Sync(ctx))
	// The tail reader pushes all of it, evicting past the scanner.
	require.Eventually(t, func() bool {
		w.cache.mu.Lock()
		defer w.cache.mu.Unlock()
		return w.cache.base > st.cursor
	}, 30*time.Second, time.Millisecond, "the tail cache evicts past the stalled scanner")
	require.Positive(t, s.(*scanner).box.bytes.Load(), "the scanner is still stalled on \"first\"")
	require.Zero(t, testutil.ToFloat64(metrics.fallbacks.WithLabelValues(name)), "a stalled scanner does not read")

	got := recvN(t, s, 1+n)
	require.Equal(t, "first", string(got[0].Payload()))
	for i, m := range got[1:] {
		require.Equal(t, fmt.Sprintf("%04d", i), string(m.Payload()[:4]))
	}
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.fallbacks.WithLabelValues(name)), 1.0,
		"the scanner fell back to reading the backend")
	quietFor(t, s, 10*time.Millisecond)
	require.NoError(t, s.Close())
	require.NoError(t, s.Error())
	require.NoError(t, w.Close())
	require.Zero(t, testutil.CollectAndCount(metrics.appends), "a closed channel's series are deleted")
}

func TestOptionsValidate(t *testing.T) {
	require.ErrorIs(t, Options{TimeTickInterval: -1}.Validate(), ErrInvalidOptions)
	require.ErrorIs(t, Options{PartBytes: 10}.Validate(), ErrInvalidOptions)
	_, err := Open(context.Background(), nil, Channel{Name: "x"}, Options{})
	require.ErrorIs(t, err, ErrInvalidOptions)
	_, err = Open(context.Background(), memOpener(t, memory.NewCluster(), memory.Config{}), Channel{Name: "bad name"}, Options{})
	require.ErrorIs(t, err, walimpls.ErrInvalidChannel)
}

// The tail cache still holds messages a truncation removed: a new
// scanner from before the truncation point is ErrPositionGone (the backend
// decides), and a tailing scanner that the truncation overtakes ends with
// it instead of handing out removed messages.
func TestTruncateBypassesTheTailCache(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "trunc-tail-cache", 1, Options{TimeTickInterval: time.Hour})
	ctx := context.Background()
	lagging, err := w.Read(ctx, ReadOption{Name: "lagging"})
	require.NoError(t, err)
	var ids []message.ID
	for i := range 20 {
		m, _ := message.New(fmt.Appendf(nil, "m%02d", i), nil)
		res, err := w.Append(ctx, m)
		require.NoError(t, err)
		ids = append(ids, res.ID)
		require.NoError(t, w.Sync(ctx)) // a watermark each: every message released on its own
	}
	got := recvN(t, lagging, 1)
	require.Equal(t, "m00", string(got[0].Payload()))
	require.NoError(t, w.Truncate(ctx, ids[15]))

	s, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.StartFrom(ids[3])})
	if err == nil {
		select {
		case m, ok := <-s.Chan():
			require.Falsef(t, ok, "a read from a truncated position delivered %q", m.Payload())
		case <-time.After(10 * time.Second):
			require.FailNow(t, "watchdog")
		}
		require.ErrorIs(t, s.Error(), walimpls.ErrPositionGone)
	} else {
		require.ErrorIs(t, err, walimpls.ErrPositionGone)
	}
	from, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.StartFrom(ids[15])})
	require.NoError(t, err)
	require.Equal(t, "m15", string(recvN(t, from, 1)[0].Payload()))
	require.NoError(t, from.Close())

	// The lagging scanner delivers at most what it had read ahead, in
	// order, then ends with ErrPositionGone; it never jumps to m15.
	next := 1
	for m := range lagging.Chan() {
		require.Equal(t, fmt.Sprintf("m%02d", next), string(m.Payload()), "an overtaken scanner skipped")
		next++
	}
	require.Less(t, next, 15, "the overtaken scanner handed out removed messages")
	require.ErrorIs(t, lagging.Error(), walimpls.ErrPositionGone)
}

// A message the writer accepts is readable with the same options: with the
// defaults, a message of exactly MaxMessageBytes among small ones reaches a
// default reader, whole or split into parts; options whose scanners could
// not hold it do not validate.
func TestLimitSizedMessageIsReadable(t *testing.T) {
	require.ErrorIs(t, Options{MaxMessageBytes: 24 << 20, ScannerBufferBytes: 16 << 20}.Validate(), ErrInvalidOptions)
	require.ErrorIs(t, Options{MaxMessageBytes: 64 << 20}.Validate(), ErrInvalidOptions, "the old defaults' 64 MiB with a 32 MiB budget")
	require.NoError(t, Options{}.Validate())
	limit := Options{}.withDefaults().MaxMessageBytes
	for _, backendLimit := range []int{0, 1 << 20} {
		t.Run(fmt.Sprintf("backend-limit-%d", backendLimit), func(t *testing.T) {
			c := memory.NewCluster()
			w := openWAL(t, memOpener(t, c, memory.Config{MaxMessageBytes: backendLimit}), "big", 1, Options{})
			ro := openWAL(t, memOpener(t, c, memory.Config{MaxMessageBytes: backendLimit}), "big", 0, Options{ReadOnly: true})
			ctx := context.Background()
			r := rand.New(rand.NewPCG(3, 3))
			big := make([]byte, limit-64)
			for i := range big {
				big[i] = byte(r.Uint32())
			}
			m, _ := message.New(big, map[string]string{"k": strings.Repeat("v", 63)})
			require.Equal(t, limit, m.Size())
			var want []string
			for i := range 5 {
				small, _ := message.New(fmt.Appendf(nil, "small-%d", i), nil)
				_, err := w.Append(ctx, small)
				require.NoError(t, err)
				want = append(want, string(small.Payload()))
				if i == 2 {
					_, err := w.Append(ctx, m)
					require.NoError(t, err)
					want = append(want, "big")
				}
			}
			require.NoError(t, w.Sync(ctx))
			s, err := ro.Read(ctx, ReadOption{})
			require.NoError(t, err)
			defer func() { _ = s.Close() }()
			got := recvN(t, s, len(want))
			for i, g := range got {
				if want[i] == "big" {
					require.Equal(t, big, g.Payload(), "the limit-sized message, byte for byte")
					continue
				}
				require.Equal(t, want[i], string(g.Payload()))
			}
		})
	}
	big, _ := message.New(make([]byte, limit+1), nil)
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "over", 1, Options{})
	_, err := w.Append(context.Background(), big)
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
}

// TestTooLargeNamesTheLimit: every refusal for size is a TooLargeError
// (errors.Is ErrTooLarge, nothing stored) that names the limit applied.
func TestTooLargeNamesTheLimit(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{MaxMessageBytes: 4 << 10}), "too-large", 1,
		Options{TimeTickInterval: time.Hour, MaxMessageBytes: 64 << 10})
	big, err := message.New(make([]byte, 65<<10), nil)
	require.NoError(t, err)
	props := map[string]string{"k": strings.Repeat("v", 5<<10)}
	fatProps, err := message.New([]byte("x"), props)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		m    message.Message
		what string
	}{
		"above MaxMessageBytes":     {big, "MaxMessageBytes"},
		"properties above one part": {fatProps, "PartBytes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := w.Append(ctx, tc.m)
			require.ErrorIs(t, err, walimpls.ErrTooLarge)
			require.True(t, walimpls.NotStored(err))
			var tl *walimpls.TooLargeError
			require.ErrorAs(t, err, &tl)
			require.Contains(t, tl.Error(), tc.what)
			require.Equal(t, 1, strings.Count(err.Error(), "too-large"), "the channel is named once: %v", err)
		})
	}
	last, err := w.impl.Last(ctx)
	require.NoError(t, err)
	require.Equal(t, w.marks.lastWritten(), last, "nothing was stored after the first watermark")
}

// On a backend that appends asynchronously, AppendAsync hands the batch
// over without a goroutine per append: fifty appends held up by the
// backend add no fifty goroutines. Close answers them all.
func TestAppendAsyncNeedsNoGoroutinePerAppend(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "async-goroutines", 1, Options{TimeTickInterval: time.Hour, MaxInflightAppends: 64})
	require.NotNil(t, w.async, "the memory backend appends asynchronously")
	m, _ := message.New([]byte("x"), nil)
	c.SetAppendLatency(time.Hour)
	before := runtime.NumGoroutine()
	const n = 50
	errs := make(chan error, n)
	for range n {
		w.AppendAsync(context.Background(), m, func(_ AppendResult, err error) { errs <- err })
	}
	require.Less(t, runtime.NumGoroutine()-before, 10, "goroutines added by %d appends in flight", n)
	require.NoError(t, w.Close())
	for range n {
		require.ErrorIs(t, <-errs, walimpls.ErrClosed)
	}
}

// A first asynchronous attempt that fails retryably is retried as a
// synchronous append would be, and the message is stored once.
func TestAppendAsyncRetriesAFailedFirstAttempt(t *testing.T) {
	c := memory.NewCluster()
	metrics, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	w := openWAL(t, memOpener(t, c, memory.Config{}), "async-retry", 1, Options{TimeTickInterval: time.Hour, Metrics: metrics})
	s, err := w.Read(context.Background(), ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	c.FailNextAppends(1)
	done := make(chan AppendResult, 1)
	w.AppendAsync(context.Background(), payload(1, 10), func(r AppendResult, err error) {
		assert.NoError(t, err)
		done <- r
	})
	r := <-done
	require.EqualValues(t, 1, testutil.ToFloat64(metrics.retries.WithLabelValues("async-retry")), "the first attempt failed and was retried")
	got := recvN(t, s, 1)[0]
	require.Equal(t, r.ID, got.ID())
	_, err = w.Append(context.Background(), payload(2, 10))
	require.NoError(t, err)
	require.Equal(t, string(payload(2, 10).Payload()), string(recvN(t, s, 1)[0].Payload()), "the retried message is delivered once")
}
