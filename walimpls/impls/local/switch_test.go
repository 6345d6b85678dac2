package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

// smallSegments makes a segment hold about fifteen 4000-byte messages.
func smallSegments(dir string) Config {
	return Config{Dir: dir, SegmentBytes: 64 << 10, MaxMessageBytes: 8 << 10}
}

// fillSegments appends 4000-byte messages "m-<i>" to channel c of a fresh
// store until it has at least segs segment files, and closes it.
func fillSegments(t *testing.T, cfg Config, segs int) []message.ID {
	t.Helper()
	s, err := New(context.Background(), cfg)
	require.NoError(t, err)
	w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 1})
	require.NoError(t, err)
	var ids []message.ID
	for len(segPaths(t, cfg.Dir)) < segs {
		ids = append(ids, appendBig(t, w, len(ids)))
	}
	require.NoError(t, s.Close())
	return ids
}

func bigPayload(i int) string { return "m-" + itoa(i) + strings.Repeat("x", 4000) }

func appendBig(t *testing.T, w walimpls.WALImpl, i int) message.ID {
	t.Helper()
	id, err := walimpls.Append(context.Background(), w, msg(t, bigPayload(i)))
	require.NoError(t, err)
	return id
}

// requireAll reads channel c from the start and checks that it holds
// exactly the messages ids, written by appendBig.
func requireAll(t *testing.T, w walimpls.WALImpl, ids []message.ID) {
	t.Helper()
	got := readN(t, w, cursor.All(), len(ids))
	for i, m := range got {
		require.True(t, m.ID().EQ(ids[i]), "message %d: %s, want %s", i, m.ID(), ids[i])
		require.Equal(t, bigPayload(i), string(m.Payload()))
	}
	last, err := w.Last(context.Background())
	require.NoError(t, err)
	require.True(t, last.EQ(ids[len(ids)-1]), "nothing after the last message")
}

// Every segment but the last ends with a seal naming the next one.
func TestSegmentsEndWithASeal(t *testing.T) {
	cfg := smallSegments(t.TempDir())
	fillSegments(t, cfg, 4)
	paths := segPaths(t, cfg.Dir)
	for i, p := range paths {
		num := uint64(i + 1)
		fr := segmentFrames(t, p, num)
		require.Equal(t, typeSegmentStart, fr[0].typ)
		lastFrame := fr[len(fr)-1]
		if i == len(paths)-1 {
			require.NotEqual(t, typeSeal, lastFrame.typ, "the last segment is not sealed")
			continue
		}
		require.Equal(t, typeSeal, lastFrame.typ, "segment %d", num)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		_, body, _, st := decodeFrame(b[lastFrame.off:], uint32(num))
		require.Equal(t, frameOK, st)
		next, err := decodeSeal(body)
		require.NoError(t, err)
		require.Equal(t, num+1, next)
		require.True(t, allZero(b[lastFrame.off+lastFrame.size:lastFrame.off+lastFrame.size+headerSize]), "an end marker follows the seal")
	}
}

// Deleting the newest segment files by hand is corruption that names the
// missing file, not a silent loss of its acknowledged records.
func TestRecoveryNewestSegmentDeleted(t *testing.T) {
	for _, deleted := range []int{1, 2} {
		t.Run(strconv.Itoa(deleted), func(t *testing.T) {
			cfg := smallSegments(t.TempDir())
			fillSegments(t, cfg, 4)
			paths := segPaths(t, cfg.Dir)
			for _, p := range paths[len(paths)-deleted:] {
				require.NoError(t, os.Remove(p))
			}
			_, err := New(context.Background(), cfg)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), paths[len(paths)-deleted], "names the first missing file")
			require.Contains(t, err.Error(), "deleted")
		})
	}
}

// Deleting the oldest segment file while a channel keeps messages in it is
// corruption naming the file; the journal's own deletions are not.
func TestRecoveryOldestSegmentDeleted(t *testing.T) {
	cfg := smallSegments(t.TempDir())
	fillSegments(t, cfg, 4)
	paths := segPaths(t, cfg.Dir)
	require.NoError(t, os.Remove(paths[0]))
	_, err := New(context.Background(), cfg)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), paths[0])
	require.Contains(t, err.Error(), `channel "c"`)
}

// A crash after the seal naming segment N was synced and before N's start
// frame landed: recovery completes the switch and goes on in N, never
// after the seal.
func TestRecoveryCompletesAnInterruptedSwitch(t *testing.T) {
	for _, c := range []struct {
		name string
		junk func(size int) []byte
	}{
		{"zeroed", func(size int) []byte { return make([]byte, size) }},
		{"torn start frame", func(size int) []byte {
			b := make([]byte, size)
			copy(b, "\x01\x02\x03torn start frame")
			return b
		}},
		{"empty", func(int) []byte { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := smallSegments(t.TempDir())
			ids := fillSegments(t, cfg, 2)
			paths := segPaths(t, cfg.Dir)
			// Keep only the messages of segment 1: in a real crash the ones
			// after the start frame of segment 2 were never acknowledged.
			kept := len(messageFrames(segmentFrames(t, paths[0], 1)))
			require.NoError(t, os.WriteFile(paths[1], c.junk(int(cfg.SegmentBytes)), 0o644))

			logs := &logCapture{}
			s := openStore(t, cfg, walimpls.WithLogger(logs.logger()))
			require.NotEmpty(t, logs.lines("completed an interrupted segment switch", "segment=2"))
			w := openWAL(t, s, "c", 1)
			requireAll(t, w, ids[:kept])
			ids = append(ids[:kept], appendBig(t, w, kept))
			require.NoError(t, s.Close())

			require.Len(t, segPaths(t, cfg.Dir), 2)
			fr := segmentFrames(t, paths[1], 2)
			require.Equal(t, typeSegmentStart, fr[0].typ)
			require.Equal(t, typeMessage, fr[1].typ, "the journal went on in segment 2")
			fr1 := segmentFrames(t, paths[0], 1)
			require.Equal(t, typeSeal, fr1[len(fr1)-1].typ, "nothing appended after the seal")

			s = openStore(t, cfg)
			require.Zero(t, s.Recovery().DroppedBytes)
			requireAll(t, openWAL(t, s, "c", 1), ids)
		})
	}
}

// A crash after segment N was renamed into place and before the seal naming
// it was durable: N is removed and the journal goes on in N-1, cutting a
// torn seal like any torn tail.
func TestRecoveryTornSealRemovesTheNextSegment(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(b []byte, seal frameLoc) []byte
	}{
		{"torn seal", func(b []byte, seal frameLoc) []byte { b[seal.off+headerSize] ^= 0xff; return b }},
		{"no seal", func(b []byte, seal frameLoc) []byte { clear(b[seal.off : seal.off+seal.size]); return b }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := smallSegments(t.TempDir())
			ids := fillSegments(t, cfg, 2)
			paths := segPaths(t, cfg.Dir)
			fr := segmentFrames(t, paths[0], 1)
			seal := fr[len(fr)-1]
			require.Equal(t, typeSeal, seal.typ)
			kept := len(messageFrames(fr))
			patch(t, paths[0], func(b []byte) []byte { return c.damage(b, seal) })
			require.NoError(t, os.WriteFile(paths[1], make([]byte, cfg.SegmentBytes), 0o644))

			s := openStore(t, cfg)
			require.Len(t, segPaths(t, cfg.Dir), 1, "the next segment is removed")
			w := openWAL(t, s, "c", 1)
			ids = ids[:kept]
			requireAll(t, w, ids)
			// Appends go on, through a new switch to segment 2.
			for len(segPaths(t, cfg.Dir)) < 3 {
				ids = append(ids, appendBig(t, w, len(ids)))
			}
			require.NoError(t, s.Close())
			s = openStore(t, cfg)
			requireAll(t, openWAL(t, s, "c", 1), ids)
		})
	}
}

// A power loss at every step of segment switches (before each write, sync,
// rename, directory sync, ... of the store, keeping every unsynced byte,
// none, or a random mix): recovery never reports corruption, never returns
// a damaged message, with SyncAlways never loses an acknowledged append,
// completes or undoes the interrupted switch, and the store it leaves opens
// again cleanly. With SyncNone several switches happen between syncs.
func TestPowerLossAtEveryStepOfASegmentSwitch(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(string(policy), func(t *testing.T) { powerLossAtEveryStep(t, policy) })
	}
}

func powerLossAtEveryStep(t *testing.T, policy SyncPolicy) {
	fs := newMemFS()
	cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 8 << 10, Sync: policy}
	s, err := New(context.Background(), withFS(cfg, fs.hooked()))
	require.NoError(t, err)
	w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 1})
	require.NoError(t, err)

	type snapshot struct {
		fs    *memFS
		acked int
		step  string
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	all, none := crashExtremes()
	var (
		mu    sync.Mutex
		acked []message.ID
		snaps []snapshot
	)
	hook := func(op, name string) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range []*rand.Rand{all, none, rng} {
			snaps = append(snaps, snapshot{fs: fs.crash(r), acked: len(acked), step: op + " " + filepath.Base(name)})
		}
	}
	fs.before.Store(&hook)
	for i := 0; i < 60; i++ {
		id := appendBig(t, w, i)
		mu.Lock()
		acked = append(acked, id)
		mu.Unlock()
	}
	// With SyncNone the appends were acknowledged before they were
	// written: Close writes and syncs them, under the hook too.
	require.NoError(t, s.Close())
	fs.before.Store(nil)
	require.GreaterOrEqual(t, countSegments(fs), 4, "the appends crossed segment switches")

	completed, undone := 0, 0
	for i, sn := range snaps {
		what := fmt.Sprintf("power loss %d, before %s", i, sn.step)
		logs := &logCapture{}
		s, err := New(context.Background(), withFS(cfg, sn.fs), walimpls.WithLogger(logs.logger()))
		require.NoError(t, err, what)
		if len(logs.lines("completed an interrupted segment switch")) > 0 {
			completed++
		}
		if len(logs.lines("removed a segment whose switch did not complete")) > 0 {
			undone++
		}
		w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 2})
		require.NoError(t, err, what)
		end, err := walimpls.Append(context.Background(), w, msg(t, "end"))
		require.NoError(t, err, what)
		got := readUntil(t, w, end)
		seen := map[string]bool{}
		for _, m := range got[:len(got)-1] {
			p := string(m.Payload())
			require.True(t, strings.HasPrefix(p, "m-"), "%s: message %s: %.10q", what, m.ID(), p)
			n, err := strconv.Atoi(strings.TrimSuffix(p[2:], strings.Repeat("x", 4000)))
			require.NoError(t, err, what)
			require.Equal(t, bigPayload(n), p, what)
			seen[m.ID().Marshal()] = true
		}
		if policy == SyncAlways {
			for _, id := range acked[:sn.acked] {
				require.Truef(t, seen[id.Marshal()], "%s: acknowledged %s lost", what, id)
			}
		}
		require.NoError(t, s.Close(), what)

		// What recovery left opens again, without anything to repair.
		s, err = New(context.Background(), withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		require.Zero(t, s.Recovery().DroppedBytes, what)
		w, err = s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 2, Mode: walimpls.ReadOnly})
		require.NoError(t, err, what)
		last, err := w.Last(context.Background())
		require.NoError(t, err, what)
		require.True(t, last.EQ(end), what)
		require.NoError(t, s.Close(), what)
	}
	t.Logf("%d power losses checked; %d completed an interrupted switch, %d removed a segment", len(snaps), completed, undone)
	require.Positive(t, completed, "some power loss came between a seal and the next start frame")
	require.Positive(t, undone, "some power loss came between a rename and its seal")
}

func countSegments(fs *memFS) int {
	names, _ := fs.ReadDir("/root")
	n := 0
	for _, name := range names {
		if _, ok := parseSegmentName(name); ok {
			n++
		}
	}
	return n
}

// Reopening with another SegmentBytes is accepted and logged: the segments
// written keep their size (the one being written is filled up to its own),
// the next ones take the new one, and all of them read back.
func TestReopenWithAnotherSegmentSize(t *testing.T) {
	dir := t.TempDir()
	small := smallSegments(dir)
	large := small
	large.SegmentBytes = 128 << 10
	ids := fillSegments(t, small, 3)
	sizes := func() map[string]int64 {
		out := map[string]int64{}
		for _, p := range segPaths(t, dir) {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			out[p] = fi.Size()
		}
		return out
	}
	reopen := func(cfg Config, grow int, wantLog string) {
		t.Helper()
		before := sizes()
		logs := &logCapture{}
		s := openStore(t, cfg, walimpls.WithLogger(logs.logger()))
		changed := logs.lines("segment size changed")
		if wantLog == "" {
			require.Empty(t, changed)
		} else {
			require.Len(t, changed, 1)
			require.Contains(t, changed[0], "level=INFO")
			require.Contains(t, changed[0], wantLog)
		}
		w := openWAL(t, s, "c", 1)
		requireAll(t, w, ids)
		for range grow {
			ids = append(ids, appendBig(t, w, len(ids)))
		}
		require.NoError(t, s.Close())
		after := sizes()
		for p, size := range after {
			if old, ok := before[p]; ok {
				require.Equal(t, old, size, "%s keeps its size", filepath.Base(p))
			} else {
				require.Equal(t, cfg.SegmentBytes, size, "%s takes the new size", filepath.Base(p))
			}
		}
		require.Greater(t, len(after), len(before), "appends reached new segments")
	}
	reopen(large, 60, "previous_segment_bytes=65536 segment_bytes=131072")
	reopen(large, 40, "")
	reopen(small, 40, "previous_segment_bytes=131072 segment_bytes=65536")

	s := openStore(t, small)
	require.Zero(t, s.Recovery().DroppedBytes)
	requireAll(t, openWAL(t, s, "c", 1), ids)
}

// A segment written before seals and recorded sizes existed (the previous
// format) still opens, and the journal goes on after it.
func TestRecoveryAcceptsSegmentsWithoutSealOrSize(t *testing.T) {
	cfg := smallSegments(t.TempDir())
	s := openStore(t, cfg)
	w := openWAL(t, s, "c", 1)
	var ids []message.ID
	for i := range 10 {
		ids = append(ids, appendBig(t, w, i))
	}
	require.NoError(t, s.Close())
	p := segPaths(t, cfg.Dir)[0]
	// Rewrite the start frame as the previous format wrote it: no size.
	patch(t, p, func(b []byte) []byte {
		h, body, sz, st := decodeFrame(b, 1)
		require.Equal(t, frameOK, st)
		start, err := decodeSegmentStart(body)
		require.NoError(t, err)
		start.segmentBytes = 0
		fr := appendFrame(nil, h, encodeSegmentStart(start))
		// The frames after it move up; their offsets are not recorded.
		return append(fr, b[sz:]...)
	})
	s = openStore(t, cfg)
	w = openWAL(t, s, "c", 1)
	requireAll(t, w, ids)
	for len(segPaths(t, cfg.Dir)) < 3 {
		ids = append(ids, appendBig(t, w, len(ids)))
	}
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	requireAll(t, openWAL(t, s, "c", 1), ids)
}
