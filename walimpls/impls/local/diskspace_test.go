package local

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Below the hard watermark appends are refused, and nothing is stored;
// opens (and the fencing their term frames do), truncations, deletes and
// reads go on. The state is left only a segment above the watermark, and
// appends then pass again.
func TestDiskHardWatermark(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	fs := newFaultFS()
	cfg := withFS(testConfig(t.TempDir()), fs)
	cfg.DiskSoftFreeBytes = DiskWatermarkOff // the hard one alone here
	hard, seg := uint64(2*cfg.SegmentBytes), uint64(cfg.SegmentBytes)
	fs.space.setFree(1 << 30)
	reg := prometheus.NewRegistry()
	var logs logCapture
	s := openStore(t, cfg, walimpls.WithRegisterer(reg), walimpls.WithLogger(logs.logger()), walimpls.WithClock(clock))
	w := openWAL(t, s, "c", 1)
	appendN(t, w, "before", 3)
	// The preparer has read the free space after the spare it made for
	// the next segment, and reads it again only when asked.
	checkDiskNow(t, s)
	require.Equal(t, diskOK, s.disk.load())

	// The flusher asks for a reading once DiskCheckInterval has passed
	// since it last asked; the append whose round asks passes.
	fs.space.setFree(hard - 1)
	clock.Advance(DefaultDiskCheckInterval)
	stored := appendN(t, w, "trigger", 1)[0]
	awaitPressure(t, s, diskHard)

	_, err := walimpls.Append(ctx, w, msg(t, "refused"))
	requireDiskFull(t, err)
	require.Contains(t, err.Error(), "below the hard watermark")
	_, err = w.AppendBatch(ctx, []message.Message{msg(t, "r1"), msg(t, "r2")})
	requireDiskFull(t, err)
	answered := make(chan error, 1)
	w.(walimpls.AsyncAppender).AppendBatchAsync(ctx, []message.Message{msg(t, "r3")}, func(_ []message.ID, err error) { answered <- err })
	select {
	case err := <-answered:
		requireDiskFull(t, err)
	default:
		t.Fatal("a refused async append is answered before AppendBatchAsync returns")
	}
	last, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.EQ(stored), "nothing refused was stored")

	// Opens write their term frames and fence; truncations, deletes and
	// reads work.
	w2 := openWAL(t, s, "c", 2)
	_, err = walimpls.Append(ctx, w, msg(t, "stale"))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.NoError(t, w2.Truncate(ctx, stored))
	got, err := readAvailable(t, w2, cursor.All())
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].ID().EQ(stored))
	openWAL(t, s, "d", 1)
	require.NoError(t, s.Delete(ctx, "d"))
	_, err = walimpls.Append(ctx, w2, msg(t, "still refused"))
	requireDiskFull(t, err)

	// Hysteresis: above the watermark by less than a segment is still
	// below it.
	readDisk(t, s, fs, hard+1)
	require.Equal(t, diskHard, s.disk.load())
	readDisk(t, s, fs, hard+seg-1)
	require.Equal(t, diskHard, s.disk.load())
	readDisk(t, s, fs, hard-100)
	_, err = walimpls.Append(ctx, w2, msg(t, "refused again"))
	requireDiskFull(t, err)

	// Below a watermark the preparer reads the free space every
	// DiskCheckInterval by itself, appends or not.
	fs.space.setFree(hard + seg)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1), "the preparer's recheck timer")
	clock.Advance(DefaultDiskCheckInterval)
	awaitPressure(t, s, diskOK)
	appendN(t, w2, "after", 2)

	// One warning for the crossing, however many readings below; one
	// line for the way back.
	require.Len(t, logs.lines("level=WARN", "below the hard watermark"), 1)
	require.Len(t, logs.lines("level=INFO", "back above the watermarks"), 1)
	m := gathered(t, reg)
	require.Equal(t, float64(hard+seg), m["disk_free_bytes"])
	require.Zero(t, m["disk_pressure"])
	require.Equal(t, float64(5), m["disk_refused_appends_total"], "Append, AppendBatch, AppendBatchAsync and two more")
	require.Zero(t, m["disk_throttled_appends_total"])
	require.GreaterOrEqual(t, m["disk_checks_total"], float64(6))
}

// Truncation frees space below the hard watermark: the truncated
// segments are deleted, not recycled as spares, the free space is read
// again at once, and appends pass again. The test's file system has a
// capacity, so its free space is what the root's files leave of it.
func TestDiskTruncationEndsRefusal(t *testing.T) {
	ctx := context.Background()
	fs := newFaultFS()
	cfg := withFS(testConfig(t.TempDir()), fs)
	cfg.SegmentBytes, cfg.MaxMessageBytes = 64<<10, 8<<10
	cfg.DiskSoftFreeBytes = DiskWatermarkOff
	hard := uint64(2 * cfg.SegmentBytes)
	s := openStore(t, cfg)
	w := openWAL(t, s, "c", 1)
	big, err := message.New(make([]byte, 8000), nil)
	require.NoError(t, err)
	var lastID message.ID
	for {
		if seg, _ := segmentRoom(s); seg == 4 {
			break
		}
		lastID, err = walimpls.Append(ctx, w, big)
		require.NoError(t, err)
	}
	recycled := counterValue(t, s.m.recycled)

	fs.space.setCapacity(dirBytes(cfg.Dir) + hard - 1)
	s.prep.requestDiskCheck()
	awaitPressure(t, s, diskHard)
	_, err = walimpls.Append(ctx, w, big)
	requireDiskFull(t, err)

	before := s.prep.collections.Load()
	require.NoError(t, w.Truncate(ctx, lastID))
	require.Eventually(t, func() bool { return s.prep.collections.Load() > before }, 10*time.Second, time.Millisecond,
		"the collection pass the truncation asked for")
	awaitPressure(t, s, diskOK)
	require.Equal(t, recycled, counterValue(t, s.m.recycled), "under pressure a truncated segment is deleted, not kept as a spare")
	require.Len(t, segPaths(t, cfg.Dir), 1)
	_, err = walimpls.Append(ctx, w, big)
	require.NoError(t, err)
}

// Below the soft watermark appends wait for the pace of DiskSoftWriteRate,
// on the clock, and nothing else does; a waiting append goes on when the
// pressure ends, is refused when it turns hard, and gives up with its
// context.
func TestDiskSoftWatermarkThrottles(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	fs := newFaultFS()
	cfg := withFS(testConfig(t.TempDir()), fs)
	soft, hard := uint64(8*cfg.SegmentBytes), uint64(2*cfg.SegmentBytes)
	// Each append's frame takes 100ms of the rate: it waits 50ms beyond
	// the burst.
	frame := frameSize(len(encodeMessage(msg(t, "x"))))
	cfg.DiskSoftWriteRate = int64(frame) * 10
	fs.space.setFree(soft + 1)
	reg := prometheus.NewRegistry()
	s := openStore(t, cfg, walimpls.WithRegisterer(reg), walimpls.WithClock(clock))
	w := openWAL(t, s, "c", 1)
	early := appendN(t, w, "x", 5)
	require.Zero(t, counterValue(t, s.m.throttledAppends), "above the soft watermark nothing waits")

	readDisk(t, s, fs, soft-1)
	require.Equal(t, diskSoft, s.disk.load())
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	appendAsync := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := walimpls.Append(ctx, w, msg(t, "x"))
			done <- err
		}()
		return done
	}
	waitDone := func(done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("watchdog: a throttled append did not return")
			return nil
		}
	}
	notDone := func(done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("a throttled append returned before its time: %v", err)
		default:
		}
	}

	// Waits 50ms on the clock (the preparer's recheck timer is the other
	// waiter).
	done := appendAsync(ctx)
	require.NoError(t, clock.BlockUntilContext(wctx, 2))
	notDone(done)
	// The records that are never held back pass while it waits.
	openWAL(t, s, "sibling", 1)
	require.NoError(t, w.Truncate(ctx, early[2]))
	require.NoError(t, s.Delete(ctx, "sibling"))
	notDone(done)
	clock.Advance(50 * time.Millisecond)
	require.NoError(t, waitDone(done))
	require.Equal(t, float64(1), counterValue(t, s.m.throttledAppends))
	require.InDelta(t, 0.05, counterValue(t, s.m.throttleSeconds), 1e-9)

	// The next one is scheduled after it (100ms more); the pressure ends
	// while it waits, and it goes on without the clock moving.
	done = appendAsync(ctx)
	require.NoError(t, clock.BlockUntilContext(wctx, 2))
	notDone(done)
	readDisk(t, s, fs, soft+uint64(cfg.SegmentBytes))
	require.Equal(t, diskOK, s.disk.load())
	require.NoError(t, waitDone(done))

	// Below it again: a waiting append whose context ends stores nothing.
	readDisk(t, s, fs, soft-2)
	last, err := w.Last(ctx)
	require.NoError(t, err)
	cctx, ccancel := context.WithCancel(ctx)
	done = appendAsync(cctx)
	require.NoError(t, clock.BlockUntilContext(wctx, 2))
	ccancel()
	err = waitDone(done)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, walimpls.NotStored(err))
	after, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, after.EQ(last))

	// And one whose wait ends below the hard watermark is refused.
	done = appendAsync(ctx)
	require.NoError(t, clock.BlockUntilContext(wctx, 2))
	readDisk(t, s, fs, hard-1)
	requireDiskFull(t, waitDone(done))

	m := gathered(t, reg)
	require.Equal(t, float64(4), m["disk_throttled_appends_total"])
	require.InDelta(t, 0.05, m["disk_throttle_seconds_total"], 1e-9, "the waits cut short took no time on the clock")
	require.Equal(t, float64(1), m["disk_refused_appends_total"])
	require.Equal(t, float64(2), m["disk_pressure"])
	require.Equal(t, float64(hard-1), m["disk_free_bytes"])
}

// Below the hard watermark no spare is zero-filled ahead of need, but the
// one a segment switch needs now is: a root that is opened below it still
// writes the term frames of its opens, durably, and deletes.
func TestDiskSparesBelowHardWatermark(t *testing.T) {
	ctx := context.Background()
	fs := newFaultFS()
	dir := t.TempDir()
	cfg := withFS(testConfig(dir), fs)
	cfg.DiskSoftFreeBytes = DiskWatermarkOff
	hard, seg := uint64(2*cfg.SegmentBytes), uint64(cfg.SegmentBytes)
	fs.space.setFree(1000)
	s := openStore(t, cfg)
	require.Equal(t, diskHard, s.disk.load(), "read once before the first append")
	require.Eventually(t, func() bool { return s.prep.deferrals.Load() >= 1 }, 10*time.Second, time.Millisecond,
		"the preparer declines to prepare the first spare ahead of need")
	require.Zero(t, fs.prepared.Load())

	// The first open starts segment 1: its spare is zero-filled on demand.
	w := openWAL(t, s, "c", 1)
	require.Equal(t, int64(1), fs.prepared.Load())
	_, err := walimpls.Append(ctx, w, msg(t, "refused"))
	requireDiskFull(t, err)
	openWAL(t, s, "c", 2)
	openWAL(t, s, "d", 1)
	require.NoError(t, s.Delete(ctx, "d"))
	// The reading after the zero-fill, and the loop's decision on it.
	require.Eventually(t, func() bool { return s.prep.deferrals.Load() >= 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(1), fs.prepared.Load(), "nothing prepared ahead of need")

	// Room for a spare above the watermark: the preparer makes one.
	readDisk(t, s, fs, hard+seg)
	require.Equal(t, diskOK, s.disk.load())
	require.Eventually(t, func() bool { return fs.prepared.Load() == 2 }, 10*time.Second, time.Millisecond,
		"the spare is prepared once there is room for it")
	require.NoError(t, s.Close())

	// The term frames written below the watermark are durable.
	s = openStore(t, testConfig(dir))
	_, err = s.Open(ctx, walimpls.Channel{Name: "c", Term: 1})
	require.ErrorIs(t, err, walimpls.ErrFenced)
	w = openWAL(t, s, "d", 1)
	last, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "d was deleted")
}

// With both watermarks off the free space is never read, and the disk
// series are not registered.
func TestDiskWatermarksOff(t *testing.T) {
	fs := newFaultFS()
	cfg := withFS(testConfig(t.TempDir()), fs)
	cfg.DiskSoftFreeBytes, cfg.DiskHardFreeBytes = DiskWatermarkOff, DiskWatermarkOff
	fs.space.setFree(0)
	reg := prometheus.NewRegistry()
	s := openStore(t, cfg, walimpls.WithRegisterer(reg))
	w := openWAL(t, s, "c", 1)
	appendN(t, w, "x", 20)
	require.Zero(t, fs.space.reads.Load())
	for name := range gathered(t, reg) {
		require.NotContains(t, name, "disk_")
	}
}

// A reading that fails keeps the pressure as it was, with one warning for
// a run of failures.
func TestDiskReadingFails(t *testing.T) {
	fs := newFaultFS()
	cfg := withFS(testConfig(t.TempDir()), fs)
	fs.space.setErr(unix.EIO)
	var logs logCapture
	s := openStore(t, cfg, walimpls.WithLogger(logs.logger()))
	w := openWAL(t, s, "c", 1)
	appendN(t, w, "x", 3)
	for range 3 {
		checkDiskNow(t, s)
	}
	require.Equal(t, diskOK, s.disk.load())
	require.Len(t, logs.lines("level=WARN", "cannot read the free space"), 1)
	appendN(t, w, "y", 3)

	readDisk(t, s, fs, 1000)
	require.Equal(t, diskHard, s.disk.load())
	fs.space.setErr(unix.EIO)
	checkDiskNow(t, s)
	require.Equal(t, diskHard, s.disk.load(), "a failed reading does not end the pressure")
	require.Len(t, logs.lines("level=WARN", "cannot read the free space"), 2, "a new run of failures")
}
