package local

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errorfs"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// faultFS is the OS file system under errorfs, with the faults the tests
// arm and heal (Set): failures of writes and syncs of segment files (the
// spare's zero-fill and the directory are spared unless failPrepare is
// set), and of the journal marker's file alone (failMarkerWrite,
// failMarkerSync). It also counts syncs, can hold one, and reports the free
// space a test sets.
type faultFS struct {
	*errorfs.FS
	failWrite       *errorfs.Switch
	failSync        *errorfs.Switch
	failPrepare     *errorfs.Switch
	failMarkerWrite *errorfs.Switch
	failMarkerSync  *errorfs.Switch
	syncs           atomic.Int64
	// prepared counts the spares zero-filled and synced: the syncs of a
	// file under a spare's name, before it became a segment.
	prepared atomic.Int64
	// gate, when set, holds the next fdatasync of a file that holds data
	// (not the zero-fill of a spare) until release is closed.
	gate atomic.Pointer[syncGate]
	// space is the free space FreeBytes reports: the real file system's
	// until a test sets it.
	space freeSpace
}

func newFaultFS() *faultFS {
	f := &faultFS{}
	spare := func(i errorfs.Info) bool { return isSpareName(filepath.Base(i.Path)) }
	f.failWrite = errorfs.NewSwitch(errorfs.Fail(unix.ENOSPC).On(errorfs.OpWrite).
		// The spare's zero-fill is spared. Like a full disk, part of a
		// failed write may land.
		Where(func(i errorfs.Info) bool { return !(spare(i) && allZero(i.Data)) }).Torn())
	f.failSync = errorfs.NewSwitch(errorfs.Fail(unix.EIO).On(errorfs.OpSync))
	f.failPrepare = errorfs.NewSwitch(errorfs.Fail(unix.ENOSPC).On(errorfs.OpOpen, errorfs.OpCreate).Where(spare))
	f.failMarkerWrite = errorfs.NewSwitch(errorfs.Fail(unix.ENOSPC).On(errorfs.OpWrite).Path(markerTempName))
	f.failMarkerSync = errorfs.NewSwitch(errorfs.Fail(unix.EIO).On(errorfs.OpSync).Path(markerTempName))
	gate := errorfs.InjectorFunc(func(i errorfs.Info) error {
		if i.Op == errorfs.OpSync && !spare(i) {
			if g := f.gate.Swap(nil); g != nil {
				close(g.entered)
				<-g.release
			}
		}
		return nil
	})
	count := errorfs.InjectorFunc(func(i errorfs.Info) error {
		if i.Op == errorfs.OpSync {
			f.syncs.Add(1)
			if spare(i) {
				f.prepared.Add(1)
			}
		}
		return nil
	})
	f.FS = errorfs.Wrap(OSFS(), errorfs.Any(gate, f.failPrepare, f.failMarkerWrite, f.failWrite, f.failSync, f.failMarkerSync, count))
	return f
}

func (f *faultFS) FreeBytes(dir string) (uint64, error) {
	free, set, err := f.space.answer(func() uint64 { return dirBytes(dir) })
	if !set {
		return f.FS.FreeBytes(dir)
	}
	return free, err
}

type syncGate struct{ entered, release chan struct{} }

// holdNextSync arms the gate and returns it: entered is closed once the
// sync waits, and the sync goes on when release is closed.
func (f *faultFS) holdNextSync() *syncGate {
	g := &syncGate{entered: make(chan struct{}), release: make(chan struct{})}
	f.gate.Store(g)
	return g
}

func TestWriteErrorIsSticky(t *testing.T) {
	for _, c := range []struct {
		name string
		arm  func(*faultFS)
		want string
	}{
		{"write", func(f *faultFS) { f.failWrite.Set(true) }, "no space left"},
		{"sync", func(f *faultFS) { f.failSync.Set(true) }, "input/output error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := newFaultFS()
			dir := t.TempDir()
			s := openStore(t, withFS(testConfig(dir), fs))
			w := openWAL(t, s, "c", 1)
			acked := appendN(t, w, "ok", 5)

			// Concurrent appenders all fail with the cause, none hangs.
			c.arm(fs)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := walimpls.Append(context.Background(), w, msg(t, "doomed"))
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.ErrorIs(t, err, ErrJournalFailed)
				require.ErrorIs(t, err, walimpls.ErrUnrecoverable, "a failed journal is not worth retrying")
				require.Contains(t, err.Error(), c.want)
				require.False(t, errorsIsAny(err, walimpls.ErrFenced, walimpls.ErrClosed))
			}

			// Sticky: healing the disk does not bring the store back.
			fs.failWrite.Set(false)
			fs.failSync.Set(false)
			_, err := walimpls.Append(context.Background(), w, msg(t, "later"))
			require.ErrorIs(t, err, ErrJournalFailed)
			require.ErrorIs(t, err, walimpls.ErrUnrecoverable, "a failed journal is not worth retrying")
			_, err = s.Open(context.Background(), walimpls.Channel{Name: "d", Term: 1})
			require.ErrorIs(t, err, ErrJournalFailed)
			require.ErrorIs(t, err, walimpls.ErrUnrecoverable, "a failed journal is not worth retrying")
			require.NoError(t, s.Close())

			// Reopening recovers: every acknowledged message is there, and
			// nothing corrupt is delivered.
			s = openStore(t, testConfig(dir))
			w = openWAL(t, s, "c", 1)
			got, err := readAvailable(t, w, cursor.All())
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(got), len(acked))
			for i, id := range acked {
				require.True(t, got[i].ID().EQ(id))
			}
			for _, m := range got[len(acked):] {
				require.Equal(t, "doomed", string(m.Payload()))
			}
			appendN(t, w, "after", 2)
		})
	}
}

func TestSpareFailureFailsTheSwitch(t *testing.T) {
	fs := newFaultFS()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 64 << 10
	cfg.MaxMessageBytes = 8 << 10
	fs.failPrepare.Set(true)
	s := openStore(t, withFS(cfg, fs))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 1})
	require.ErrorIs(t, err, ErrJournalFailed)
	require.ErrorIs(t, err, walimpls.ErrUnrecoverable, "a failed journal is not worth retrying")
	require.Contains(t, err.Error(), "no space left")
}

// A round that fails after it installed the next segment does not list it:
// a listed segment's start frame is durable, and the collector frees the
// segment before a listed one. Here the seal's write fails, after segment 2
// is in place and before its start frame is written.
func TestFailedSwitchListsNoSegment(t *testing.T) {
	ctx := context.Background()
	fs := newFaultFS()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes, cfg.MaxMessageBytes = 64<<10, 16<<10
	cfg.Sync, cfg.SyncInterval = SyncInterval, time.Hour
	s := openStore(t, withFS(cfg, fs))
	openWAL(t, s, "d", 7)
	w := openWAL(t, s, "c", 5)
	big, err := message.New(make([]byte, 8000), nil)
	require.NoError(t, err)
	for {
		seg, room := segmentRoom(s)
		require.Equal(t, uint64(1), seg)
		if room < int64(frameSize(8000)) {
			break
		}
		appendN(t, w, "m", 1)
	}
	fs.failWrite.Set(true)
	_, err = walimpls.Append(ctx, w, big)
	require.ErrorIs(t, err, ErrJournalFailed)
	seg, _ := segmentRoom(s)
	require.Equal(t, uint64(2), seg, "the big message started segment 2")
	s.segMu.RLock()
	var listed []uint64
	for _, seg := range s.segments {
		listed = append(listed, seg.num)
	}
	s.segMu.RUnlock()
	require.Equal(t, []uint64{1}, listed)
	_ = s.Close() // reports the failure, or nothing

	fs.failWrite.Set(false)
	s = openStore(t, withFS(cfg, fs))
	for _, ch := range []walimpls.Channel{{Name: "c", Term: 4}, {Name: "d", Term: 6}} {
		_, err = s.Open(ctx, ch)
		require.ErrorIs(t, err, walimpls.ErrFenced, "the term of %s was forgotten", ch.Name)
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if strings.Contains(err.Error(), t.Error()) {
			return true
		}
	}
	return false
}

func TestSyncPolicies(t *testing.T) {
	const n = 30
	run := func(t *testing.T, cfg Config, opts ...walimpls.Option) (*faultFS, walimpls.WALImpl) {
		fs := newFaultFS()
		s := openStore(t, withFS(cfg, fs), opts...)
		w := openWAL(t, s, "c", 1)
		// The preparer syncs the next spare in the background: wait for it
		// (one spare became segment 1, the next is ready) so that its sync
		// is not counted as the appends'.
		require.Eventually(t, func() bool { return fs.prepared.Load() >= 2 }, 10*time.Second, time.Millisecond,
			"the next spare is prepared")
		return fs, w
	}
	t.Run("always", func(t *testing.T) {
		fs, w := run(t, testConfig(t.TempDir()))
		before := fs.syncs.Load()
		appendN(t, w, "x", n)
		require.GreaterOrEqual(t, fs.syncs.Load()-before, int64(n), "one sync per sequential append")
	})
	t.Run("none", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		cfg.Sync = SyncNone
		fs, w := run(t, cfg)
		before := fs.syncs.Load()
		ids := appendN(t, w, "x", n)
		require.LessOrEqual(t, fs.syncs.Load()-before, int64(1), "appends are not synced")
		// Truncation points are synced whatever the policy.
		require.NoError(t, w.Truncate(context.Background(), ids[5]))
		require.Greater(t, fs.syncs.Load()-before, int64(0))
	})
	t.Run("interval", func(t *testing.T) {
		clock := clockwork.NewFakeClock()
		cfg := testConfig(t.TempDir())
		cfg.Sync = SyncInterval
		cfg.SyncInterval = 20 * time.Millisecond
		fs, w := run(t, cfg, walimpls.WithClock(clock))
		before := fs.syncs.Load()
		appendN(t, w, "x", n)
		require.Equal(t, before, fs.syncs.Load(), "appends within the interval are not synced (the clock has not moved)")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the flusher's ticker")
		clock.Advance(cfg.SyncInterval)
		require.Eventually(t, func() bool { return fs.syncs.Load() > before }, 10*time.Second, time.Millisecond,
			"an idle journal with unsynced appends is synced by the ticker once the interval has passed")
	})
}
