package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// freeSpace is what a test file system's FreeBytes reports once a test
// sets it: a number of bytes, or a capacity less what the root's files
// take (so that deleting segments frees space and zero-filling a spare
// takes it), or an error. Until then the file system answers as it would.
type freeSpace struct {
	mu       sync.Mutex
	set      bool
	free     uint64
	capacity uint64 // not 0: free is the capacity less the root's bytes
	err      error
	reads    atomic.Int64
}

func (s *freeSpace) setFree(free uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set, s.free, s.capacity, s.err = true, free, 0, nil
}

func (s *freeSpace) setCapacity(capacity uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set, s.free, s.capacity, s.err = true, 0, capacity, nil
}

func (s *freeSpace) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set, s.err = true, err
}

// answer returns what FreeBytes reports, with used measuring the root's
// bytes for a capacity; set is false while the test set nothing.
func (s *freeSpace) answer(used func() uint64) (free uint64, set bool, err error) {
	s.reads.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.set:
		return 0, false, nil
	case s.err != nil:
		return 0, true, s.err
	case s.capacity != 0:
		return s.capacity - min(used(), s.capacity), true, nil
	}
	return s.free, true, nil
}

// dirBytes is the size of the files in dir.
func dirBytes(dir string) uint64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += uint64(info.Size())
		}
	}
	return n
}

// awaitPressure waits until the store's disk pressure is want, woken by
// each change.
func awaitPressure(t *testing.T, s *Store, want diskPressure) {
	t.Helper()
	watchdog := time.After(10 * time.Second)
	for {
		s.disk.mu.Lock()
		p, changed := s.disk.load(), s.disk.changed
		s.disk.mu.Unlock()
		if p == want {
			return
		}
		select {
		case <-changed:
		case <-watchdog:
			t.Fatalf("disk pressure is %s, not %s", p, want)
		}
	}
}

// checkDiskNow has the preparer read the free space and waits until it
// has taken the reading, and every reading it took before: after it the
// preparer reads the free space again only when something asks it to.
func checkDiskNow(t *testing.T, s *Store) {
	t.Helper()
	taken := make(chan struct{})
	watchdog := time.After(10 * time.Second)
	select {
	case s.prep.diskReq <- taken:
	case <-watchdog:
		t.Fatal("watchdog: the preparer takes no request for a reading")
	}
	select {
	case <-taken:
	case <-watchdog:
		t.Fatal("watchdog: the preparer takes no reading")
	}
}

// readDisk has the preparer read free bytes from the test's file system,
// and waits until it has taken the reading and the pressure it decides.
func readDisk(t *testing.T, s *Store, fs *faultFS, free uint64) {
	t.Helper()
	fs.space.setFree(free)
	checkDiskNow(t, s)
	require.Equal(t, free, s.disk.now.Load().free)
}

func requireDiskFull(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, ErrDiskFull)
	require.True(t, walimpls.NotStored(err), "a refused append stored nothing: %v", err)
	require.True(t, walimpls.IsRetryable(err), "truncation frees space: %v", err)
	require.NotErrorIs(t, err, ErrJournalFailed)
	require.NotErrorIs(t, err, walimpls.ErrUnrecoverable)
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// gathered returns the values of the store's series named
// streamwal_local_<name> in reg.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		name := strings.TrimPrefix(mf.GetName(), "streamwal_local_")
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// The pressure a reading decides, step by step: a state is entered below
// its watermark and left only a margin above it.
func TestDiskLevels(t *testing.T) {
	both := diskLevels{soft: 1000, hard: 400, margin: 100}
	for _, step := range []struct {
		levels diskLevels
		cur    diskPressure
		free   uint64
		want   diskPressure
	}{
		{both, diskOK, 2000, diskOK},
		{both, diskOK, 1000, diskOK}, // at the watermark is not below it
		{both, diskOK, 999, diskSoft},
		{both, diskSoft, 1000, diskSoft}, // back above: not by the margin
		{both, diskSoft, 1099, diskSoft},
		{both, diskSoft, 1100, diskOK},
		{both, diskSoft, 399, diskHard},
		{both, diskHard, 400, diskHard},
		{both, diskHard, 499, diskHard},
		{both, diskHard, 500, diskSoft}, // out of hard, still below soft + margin
		{both, diskHard, 1099, diskSoft},
		{both, diskHard, 1100, diskOK},
		{both, diskOK, 399, diskHard}, // straight in
		{both, diskOK, 0, diskHard},
		{both, diskSoft, 400, diskSoft},

		{diskLevels{hard: 400, margin: 100}, diskOK, 0, diskHard},
		{diskLevels{hard: 400, margin: 100}, diskOK, 400, diskOK},
		{diskLevels{hard: 400, margin: 100}, diskHard, 499, diskHard},
		{diskLevels{hard: 400, margin: 100}, diskHard, 500, diskOK},

		{diskLevels{soft: 1000, margin: 100}, diskOK, 0, diskSoft},
		{diskLevels{soft: 1000, margin: 100}, diskSoft, 1099, diskSoft},
		{diskLevels{soft: 1000, margin: 100}, diskSoft, 1100, diskOK},

		{diskLevels{margin: 100}, diskOK, 0, diskOK},
	} {
		require.Equal(t, step.want, step.levels.next(step.cur, step.free), "%+v: %s with %d free", step.levels, step.cur, step.free)
	}
	require.False(t, diskLevels{margin: 1}.enabled())
	require.True(t, diskLevels{hard: 1}.enabled())
	require.True(t, diskLevels{soft: 1}.enabled())

	require.True(t, both.spareFits(400+256, 256))
	require.False(t, both.spareFits(400+255, 256))
	require.True(t, diskLevels{soft: 1000}.spareFits(0, 256), "without a hard watermark a spare always fits")
}

// The pace of throttled appends, step by step.
func TestPacer(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	const rate = 1000 // bytes per second: 100 bytes take 100ms
	require.Equal(t, 50*time.Millisecond, p.reserve(t0, 100, rate), "100ms of bytes, less the burst")
	require.Equal(t, 150*time.Millisecond, p.reserve(t0, 100, rate), "scheduled after the first")
	require.Equal(t, 100*time.Millisecond, p.reserve(t0.Add(100*time.Millisecond), 50, rate))
	// Idle for a second: the schedule does not bank the idle time.
	t1 := t0.Add(2 * time.Second)
	require.Zero(t, p.reserve(t1, 10, rate), "within the burst")
	require.Zero(t, p.reserve(t1, 40, rate), "the burst exactly")
	require.Equal(t, time.Millisecond, p.reserve(t1, 1, rate))
}

func TestDiskConfig(t *testing.T) {
	d := Config{Dir: "d"}.withDefaults()
	require.Equal(t, int64(2*DefaultSegmentBytes), d.DiskHardFreeBytes)
	require.Equal(t, int64(8*DefaultSegmentBytes), d.DiskSoftFreeBytes)
	require.Equal(t, int64(DefaultDiskSoftWriteRate), d.DiskSoftWriteRate)
	require.Equal(t, DefaultDiskCheckInterval, d.DiskCheckInterval)
	require.Equal(t, diskLevels{soft: 8 * DefaultSegmentBytes, hard: 2 * DefaultSegmentBytes, margin: DefaultSegmentBytes}, d.diskLevels())

	d = Config{Dir: "d", SegmentBytes: 1 << 20, DiskHardFreeBytes: 3 << 20}.withDefaults()
	require.Equal(t, int64(12<<20), d.DiskSoftFreeBytes, "four times the hard watermark")
	d = Config{Dir: "d", DiskHardFreeBytes: DiskWatermarkOff}.withDefaults()
	require.Equal(t, int64(8*DefaultSegmentBytes), d.DiskSoftFreeBytes)
	require.Equal(t, diskLevels{soft: 8 * DefaultSegmentBytes, margin: DefaultSegmentBytes}, d.diskLevels())
	off := Config{Dir: "d", DiskHardFreeBytes: DiskWatermarkOff, DiskSoftFreeBytes: DiskWatermarkOff}
	require.NoError(t, off.Validate())
	require.False(t, off.withDefaults().diskLevels().enabled())

	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{DiskHardFreeBytes: -2}, "diskHardFreeBytes -2 is neither a size nor -1"},
		{Config{DiskSoftFreeBytes: -5}, "diskSoftFreeBytes -5 is neither a size nor -1"},
		{Config{SegmentBytes: 1 << 20, MaxMessageBytes: 64 << 10, DiskHardFreeBytes: 1<<20 - 1}, "diskHardFreeBytes 1048575 is below segmentBytes 1048576"},
		{Config{DiskHardFreeBytes: 1 << 30, DiskSoftFreeBytes: 1<<30 - 1}, "diskSoftFreeBytes 1073741823 is below diskHardFreeBytes 1073741824"},
		{Config{DiskSoftWriteRate: -1}, "negative diskSoftWriteRate"},
		{Config{DiskCheckInterval: -time.Second}, "negative diskCheckInterval"},
	} {
		c.cfg.Dir = "d"
		err := c.cfg.Validate()
		require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
		require.Contains(t, err.Error(), c.want)
	}
	require.NoError(t, Config{Dir: "d", DiskHardFreeBytes: DefaultSegmentBytes, DiskSoftFreeBytes: DefaultSegmentBytes}.Validate(),
		"equal watermarks: no throttling before the refusal")
	require.NoError(t, Config{Dir: "d", DiskHardFreeBytes: DiskWatermarkOff, DiskSoftFreeBytes: 1}.Validate())
}

func TestOSFSFreeBytes(t *testing.T) {
	free, err := OSFS().FreeBytes(t.TempDir())
	require.NoError(t, err)
	require.Positive(t, free)
	_, err = OSFS().FreeBytes(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// Below the hard watermark appends are refused, and nothing is stored;
// opens (and the fencing their term frames do), truncations, deletes and
// reads go on. The state is left only a segment above the watermark, and
// appends then pass again.
func TestDiskHardWatermark(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	fs := newFaultFS()
	cfg := withFS(testConfig(t.TempDir()), fs)
	cfg.Clock = clock
	cfg.DiskSoftFreeBytes = DiskWatermarkOff // the hard one alone here
	hard, seg := uint64(2*cfg.SegmentBytes), uint64(cfg.SegmentBytes)
	fs.space.setFree(1 << 30)
	reg := prometheus.NewRegistry()
	var logs logCapture
	s := openStore(t, cfg, walimpls.WithRegisterer(reg), walimpls.WithLogger(logs.logger()))
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
	got, err := readAvailable(t, w2, walimpls.DeliverAll())
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
	cfg.Clock = clock
	soft, hard := uint64(8*cfg.SegmentBytes), uint64(2*cfg.SegmentBytes)
	// Each append's frame takes 100ms of the rate: it waits 50ms beyond
	// the burst.
	frame := frameSize(len(encodeMessage(msg(t, "x"))))
	cfg.DiskSoftWriteRate = int64(frame) * 10
	fs.space.setFree(soft + 1)
	reg := prometheus.NewRegistry()
	s := openStore(t, cfg, walimpls.WithRegisterer(reg))
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
