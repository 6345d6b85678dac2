package local

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

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
