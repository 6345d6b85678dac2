package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// fillAt writes n messages "m-<i>" to channel c at term of a store in
// cfg.Dir, and closes it.
func fillAt(t *testing.T, cfg Config, term int64, n int) []message.ID {
	t.Helper()
	s, err := New(context.Background(), cfg)
	require.NoError(t, err)
	w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: term})
	require.NoError(t, err)
	ids := appendN(t, w, "m", n)
	require.NoError(t, s.Close())
	return ids
}

// requireChannel reopens the store in cfg.Dir and checks that channel c
// holds exactly ids, written by fillAt, and that its term is term: an open
// below it is fenced.
func requireChannel(t *testing.T, cfg Config, ids []message.ID, term int64) {
	t.Helper()
	s := openStore(t, cfg)
	_, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: term - 1})
	require.ErrorIs(t, err, walimpls.ErrFenced, "the channel's term was forgotten")
	w := openWAL(t, s, "c", term)
	got := readN(t, w, cursor.All(), len(ids))
	for i, m := range got {
		require.True(t, m.ID().EQ(ids[i]), "message %d: %s, want %s", i, m.ID(), ids[i])
		require.Equal(t, "m-"+itoa(i), string(m.Payload()))
	}
	last, err := w.Last(context.Background())
	require.NoError(t, err)
	require.True(t, last.EQ(ids[len(ids)-1]), "nothing after the last message")
	require.NoError(t, s.Close())
}

// removeMarker makes the root in dir look like one written by a version
// older than the marker.
func removeMarker(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, markerName)); !os.IsNotExist(err) {
		require.NoError(t, err)
	}
}

// requireSegmentsDeleted checks that opening cfg.Dir fails as format.go says
// for a root whose segment files were deleted, and changes nothing.
func requireSegmentsDeleted(t *testing.T, cfg Config) {
	t.Helper()
	for range 2 {
		_, err := New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		for _, want := range []string{
			cfg.Dir, "no segment file", "the segment files were deleted",
			"restore the directory from a backup", "remove " + filepath.Join(cfg.Dir, markerName),
		} {
			require.Contains(t, err.Error(), want)
		}
		require.FileExists(t, filepath.Join(cfg.Dir, markerName))
	}
}

// Deleting the only segment file, or every segment file, of a root that
// wrote records at term 5 is corruption that says what happened, not an
// empty store at term 0; removing the marker, as the error says, opens an
// empty store.
func TestRecoveryEverySegmentDeleted(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(dir string) Config
		segs int
	}{
		{"the only segment", testConfig, 1},
		{"several segments", smallSegments, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg(t.TempDir())
			s := openStore(t, cfg)
			w := openWAL(t, s, "c", 5)
			appendN(t, w, "m", 20)
			for i := 0; len(segPaths(t, cfg.Dir)) < c.segs; i++ {
				appendBig(t, w, i)
			}
			require.NoError(t, s.Close())
			paths := segPaths(t, cfg.Dir)
			require.Len(t, paths, c.segs)
			for _, p := range paths {
				require.NoError(t, os.Remove(p))
			}
			requireSegmentsDeleted(t, cfg)

			require.NoError(t, os.Remove(filepath.Join(cfg.Dir, markerName)))
			s = openStore(t, cfg)
			w = openWAL(t, s, "c", 4) // the term went with the segments
			last, err := w.Last(context.Background())
			require.NoError(t, err)
			require.True(t, last.IsZero())
		})
	}
}

// A root opened and closed without writing stays a root never written, and
// reopens empty; its first write marks it, before it is acknowledged.
func TestRecoveryRootNeverWritten(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	marker := filepath.Join(cfg.Dir, markerName)
	for range 2 {
		s := openStore(t, cfg)
		// Nothing here frames a record.
		_, err := s.Open(ctx, walimpls.Channel{Name: "c", Mode: walimpls.ReadOnly})
		require.ErrorIs(t, err, walimpls.ErrNoChannel)
		require.NoError(t, s.Delete(ctx, "c"))
		require.NoError(t, s.Close())
		require.Empty(t, segPaths(t, cfg.Dir))
		require.NoFileExists(t, marker)
	}
	s := openStore(t, cfg)
	openWAL(t, s, "c", 5)
	b, err := os.ReadFile(marker)
	require.NoError(t, err, "the first round is acknowledged after the marker")
	require.Equal(t, markerContent, string(b))
	require.NoFileExists(t, filepath.Join(cfg.Dir, markerTempName))
	require.NoError(t, s.Close())
}

// A root with segments and no marker - written by a version older than the
// marker, or by a process that died between its first sync and the marker
// - opens with its records and its term, and is marked, so that a later
// deletion of its segments is detected.
func TestRecoveryMarksSegmentsWithoutMarker(t *testing.T) {
	cfg := testConfig(t.TempDir())
	marker := filepath.Join(cfg.Dir, markerName)
	ids := fillAt(t, cfg, 5, 20)
	removeMarker(t, cfg.Dir)

	logs := &logCapture{}
	s := openStore(t, cfg, walimpls.WithLogger(logs.logger()))
	require.FileExists(t, marker, "marked by recovery, before any write")
	require.NotEmpty(t, logs.lines("journal marker written"))
	require.NoError(t, s.Close())
	requireChannel(t, cfg, ids, 5)

	for _, p := range segPaths(t, cfg.Dir) {
		require.NoError(t, os.Remove(p))
	}
	requireSegmentsDeleted(t, cfg)
}

// A failed write or sync of the marker is a failed journal: the first round
// of a root is never acknowledged after it, and an Open that would write
// it in recovery fails. Nothing acknowledged is lost, and the next Open
// writes the marker.
func TestJournalMarkerFailure(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		arm  func(*faultFS, bool)
		want string
	}{
		{"write", func(f *faultFS, on bool) { f.failMarkerWrite.Set(on) }, "no space left"},
		{"sync", func(f *faultFS, on bool) { f.failMarkerSync.Set(on) }, "input/output error"},
	} {
		t.Run("first round/"+c.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			fs := newFaultFS()
			c.arm(fs, true)
			s := openStore(t, withFS(cfg, fs))
			_, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 5})
			require.ErrorIs(t, err, ErrJournalFailed)
			require.ErrorIs(t, err, walimpls.ErrUnrecoverable)
			require.Contains(t, err.Error(), c.want)
			require.Contains(t, err.Error(), markerTempName)
			// Sticky: healing the disk does not bring the store back.
			c.arm(fs, false)
			_, err = s.Open(ctx, walimpls.Channel{Name: "d", Term: 1})
			require.ErrorIs(t, err, ErrJournalFailed)
			_ = s.Close() // reports the failure, or nothing
			require.NoFileExists(t, filepath.Join(cfg.Dir, markerName))

			// The segment was synced before the marker: recovery finds it
			// unmarked, marks it, and the term frame is there.
			s = openStore(t, cfg)
			require.FileExists(t, filepath.Join(cfg.Dir, markerName))
			require.NoFileExists(t, filepath.Join(cfg.Dir, markerTempName))
			_, err = s.Open(ctx, walimpls.Channel{Name: "c", Term: 4})
			require.ErrorIs(t, err, walimpls.ErrFenced)
			ids := appendN(t, openWAL(t, s, "c", 5), "m", 3)
			require.NoError(t, s.Close())
			requireChannel(t, cfg, ids, 5)
		})
		t.Run("recovery/"+c.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			ids := fillAt(t, cfg, 5, 20)
			removeMarker(t, cfg.Dir)
			fs := newFaultFS()
			c.arm(fs, true)
			_, err := New(ctx, withFS(cfg, fs))
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), c.want)
			require.NoFileExists(t, filepath.Join(cfg.Dir, markerName))

			s := openStore(t, cfg)
			require.FileExists(t, filepath.Join(cfg.Dir, markerName))
			require.NoFileExists(t, filepath.Join(cfg.Dir, markerTempName))
			require.NoError(t, s.Close())
			requireChannel(t, cfg, ids, 5)
		})
	}
}

// A marker that does not hold its 24 bytes is corruption naming it.
func TestRecoveryDamagedMarker(t *testing.T) {
	for _, c := range []struct{ name, content string }{
		{"empty", ""},
		{"other bytes", strings.Repeat("x", len(markerContent))},
		{"longer", markerContent + "more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			fillAt(t, cfg, 5, 3)
			marker := filepath.Join(cfg.Dir, markerName)
			require.NoError(t, os.WriteFile(marker, []byte(c.content), 0o644))
			_, err := New(context.Background(), cfg)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), marker+" is not a journal marker")
		})
	}
}

// With a marker, a lone segment without a valid start frame is not taken
// for a crash during the root's first round (which would open an empty
// store at term 0): the marker proves its start frame had been durable.
func TestRecoveryLoneSegmentWithoutStartFrame(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	openWAL(t, s, "c", 5) // one round: the start frame and a term frame
	require.NoError(t, s.Close())
	paths := segPaths(t, cfg.Dir)
	require.Len(t, paths, 1)
	fr := segmentFrames(t, paths[0], 1)
	require.Equal(t, typeSegmentStart, fr[0].typ)
	patch(t, paths[0], func(b []byte) []byte { clear(b[:fr[0].size]); return b })

	_, err := New(context.Background(), cfg)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "segment 1, the only segment file, has no valid start frame")
	require.Contains(t, err.Error(), filepath.Join(cfg.Dir, markerName))
	require.Equal(t, paths, segPaths(t, cfg.Dir), "removes nothing")
}

// A power loss at every step of a root's first writes (before each write,
// sync, rename, directory sync, ... from the first New on, keeping every
// unsynced byte, none, or a random mix) never leaves a marker without a
// segment: recovery never reports corruption, keeps every acknowledged
// record and term (SyncAlways), and leaves the root marked exactly when it
// has segments. Some power losses come between the first sync and the
// marker, and recovery marks those roots.
func TestPowerLossAroundTheJournalMarker(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(string(policy), func(t *testing.T) { powerLossAroundTheMarker(t, policy) })
	}
}

func powerLossAroundTheMarker(t *testing.T, policy SyncPolicy) {
	ctx := context.Background()
	fs := newMemFS()
	cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 8 << 10, Sync: policy}
	type snapshot struct {
		fs     *memFS
		opened bool // the Open at term 5 had returned
		acked  int
		step   string
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	all, none := crashExtremes()
	var (
		mu     sync.Mutex
		opened bool
		acked  []message.ID
		snaps  []snapshot
	)
	hook := func(op, name string) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range []*rand.Rand{all, none, rng} {
			snaps = append(snaps, snapshot{fs: fs.crash(r), opened: opened, acked: len(acked), step: op + " " + filepath.Base(name)})
		}
	}
	fs.before.Store(&hook)
	s, err := New(ctx, withFS(cfg, fs.hooked()))
	require.NoError(t, err)
	w, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 5})
	require.NoError(t, err)
	mu.Lock()
	opened = true
	mu.Unlock()
	for i := 0; i < 20; i++ {
		id := appendBig(t, w, i)
		mu.Lock()
		acked = append(acked, id)
		mu.Unlock()
	}
	require.NoError(t, s.Close())
	fs.before.Store(nil)
	require.GreaterOrEqual(t, countSegments(fs), 2, "the appends crossed a segment switch")

	hasMarker := func(fs *memFS) bool {
		names, err := fs.ReadDir("/root")
		require.NoError(t, err)
		return slices.Contains(names, markerName)
	}
	unmarked, marked := 0, 0
	for i, sn := range snaps {
		what := fmt.Sprintf("power loss %d, before %s", i, sn.step)
		wasMarked := hasMarker(sn.fs)
		if wasMarked {
			require.Positive(t, countSegments(sn.fs), "%s: a marker without a segment", what)
			marked++
		}
		s, err := New(ctx, withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		require.Equal(t, countSegments(sn.fs) > 0, hasMarker(sn.fs), "%s: marked exactly when it has segments", what)
		if !wasMarked && hasMarker(sn.fs) {
			unmarked++ // recovery marked it
		}
		if policy == SyncAlways && sn.opened {
			_, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 4})
			require.ErrorIs(t, err, walimpls.ErrFenced, "%s: term 5 forgotten", what)
		}
		w, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 5})
		require.NoError(t, err, what)
		end, err := walimpls.Append(ctx, w, msg(t, "end"))
		require.NoError(t, err, what)
		seen := map[string]bool{}
		for _, m := range readUntil(t, w, end) {
			if p := string(m.Payload()); p != "end" {
				n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, "m-"), strings.Repeat("x", 4000)))
				require.NoError(t, err, what)
				require.Equal(t, bigPayload(n), p, what)
			}
			seen[m.ID().Marshal()] = true
		}
		if policy == SyncAlways {
			for _, id := range acked[:sn.acked] {
				require.Truef(t, seen[id.Marshal()], "%s: acknowledged %s lost", what, id)
			}
		}
		require.NoError(t, s.Close(), what)
		require.True(t, hasMarker(sn.fs), "%s: marked once written", what)
	}
	t.Logf("%d power losses checked: %d left a marker, %d left segments that recovery marked", len(snaps), marked, unmarked)
	require.Positive(t, marked)
	require.Positive(t, unmarked, "some power loss came between the first sync and the marker")
}
