package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

type frameLoc struct {
	off, size int
	typ       frameType
}

// segmentFrames lists the valid frames of a segment file.
func segmentFrames(t *testing.T, path string, num uint64) []frameLoc {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []frameLoc
	for off := 0; ; {
		h, _, sz, st := decodeFrame(b[off:], uint32(num))
		if st != frameOK {
			return out
		}
		out = append(out, frameLoc{off: off, size: sz, typ: h.typ})
		off += sz
	}
}

func messageFrames(fr []frameLoc) []frameLoc {
	var out []frameLoc
	for _, f := range fr {
		if f.typ == typeMessage {
			out = append(out, f)
		}
	}
	return out
}

func segPaths(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	require.NoError(t, err)
	return m
}

// fill writes n messages to channel c of a fresh store in dir and closes it.
func fill(t *testing.T, cfg Config, n int) []message.ID {
	t.Helper()
	s, err := New(context.Background(), cfg)
	require.NoError(t, err)
	w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 1})
	require.NoError(t, err)
	ids := appendN(t, w, "m", n)
	require.NoError(t, s.Close())
	return ids
}

func patch(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, f(b), 0o644))
}

// reopenRead reopens the store and reads channel c; it returns the store
// for further checks.
func reopenRead(t *testing.T, cfg Config, opts ...walimpls.Option) (*Store, []message.Immutable) {
	t.Helper()
	s := openStore(t, cfg, opts...)
	w := openWAL(t, s, "c", 1)
	got, err := readAvailable(t, w, cursor.All())
	require.NoError(t, err)
	// Appends go on after recovery, above every surviving ID.
	id := appendN(t, w, "after", 1)[0]
	if len(got) > 0 {
		require.True(t, got[len(got)-1].ID().LT(id))
	}
	return s, got
}

func requirePrefix(t *testing.T, ids []message.ID, got []message.Immutable, n int) {
	t.Helper()
	require.Len(t, got, n)
	for i := 0; i < n; i++ {
		require.True(t, got[i].ID().EQ(ids[i]))
		require.Equal(t, "m-"+itoa(i), string(got[i].Payload()))
	}
}

func TestRecoveryTornTail(t *testing.T) {
	for _, c := range []struct {
		name     string
		damage   func(b []byte, last frameLoc) []byte
		dropped  bool // bytes are reported dropped
		survives int  // of 20
	}{
		{"bad crc in the last frame", func(b []byte, last frameLoc) []byte { b[last.off+headerSize] ^= 0xff; return b }, true, 19},
		{"header of the last frame", func(b []byte, last frameLoc) []byte { b[last.off+5] ^= 0x10; return b }, true, 19},
		{"cut mid-frame", func(b []byte, last frameLoc) []byte { return b[:last.off+headerSize+3] }, true, 19},
		{"cut mid-header", func(b []byte, last frameLoc) []byte { return b[:last.off+7] }, true, 19},
		{"zeroed last frame", func(b []byte, last frameLoc) []byte { clear(b[last.off : last.off+last.size]); return b }, false, 19},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			ids := fill(t, cfg, 20)
			paths := segPaths(t, cfg.Dir)
			require.Len(t, paths, 1)
			msgs := messageFrames(segmentFrames(t, paths[0], 1))
			require.Len(t, msgs, 20)
			patch(t, paths[0], func(b []byte) []byte { return c.damage(b, msgs[19]) })

			reg := prometheus.NewRegistry()
			s, got := reopenRead(t, cfg, walimpls.WithRegisterer(reg))
			requirePrefix(t, ids, got, c.survives)
			rep := s.Recovery()
			if c.dropped {
				require.Positive(t, rep.DroppedBytes)
				require.Equal(t, 1, rep.DroppedFrames)
				require.Equal(t, int64(msgs[19].off), rep.Offset)
				var m dto.Metric
				require.NoError(t, s.m.droppedBytes.Write(&m))
				require.Equal(t, float64(rep.DroppedBytes), m.GetCounter().GetValue())
			} else {
				require.Zero(t, rep.DroppedBytes)
			}
		})
	}
}

func TestRecoveryCorruptionInTheMiddleIsAnError(t *testing.T) {
	t.Run("synced frame followed by later frames", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		fill(t, cfg, 20)
		p := segPaths(t, cfg.Dir)[0]
		msgs := messageFrames(segmentFrames(t, p, 1))
		patch(t, p, func(b []byte) []byte { b[msgs[10].off+headerSize+1] ^= 1; return b })
		_, err := New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "synced")
	})
	t.Run("older segment", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		cfg.SegmentBytes = 64 << 10
		cfg.MaxMessageBytes = 8 << 10
		s, err := New(context.Background(), cfg)
		require.NoError(t, err)
		w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 1})
		require.NoError(t, err)
		for i := 0; i < 40; i++ {
			_, err := walimpls.Append(context.Background(), w, msg(t, string(make([]byte, 4000))))
			require.NoError(t, err)
		}
		require.NoError(t, s.Close())
		paths := segPaths(t, cfg.Dir)
		require.Greater(t, len(paths), 2)
		msgs := messageFrames(segmentFrames(t, paths[0], 1))
		last := msgs[len(msgs)-1]
		patch(t, paths[0], func(b []byte) []byte { b[last.off+headerSize+100] ^= 1; return b })
		_, err = New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)

		// So is a zeroed last frame, which looks like the end of the log
		// but is not where the next segment says this one ended.
		patch(t, paths[0], func(b []byte) []byte { b[last.off+headerSize+100] ^= 1; return b })
		orig, err := os.ReadFile(paths[0])
		require.NoError(t, err)
		patch(t, paths[0], func(b []byte) []byte { clear(b[last.off : last.off+last.size]); return b })
		_, err = New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "says it ended")
		require.NoError(t, os.WriteFile(paths[0], orig, 0o644))

		// A missing segment in the middle is corruption too.
		require.NoError(t, os.Remove(paths[1]))
		_, err = New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "missing")
	})
}

// With SyncNone nothing after the term record is synced, so damage followed
// by valid frames is a torn write: everything from the damage on is cut.
func TestRecoveryTornWriteWithFramesAfterIt(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Sync = SyncNone
	ids := fill(t, cfg, 20)
	p := segPaths(t, cfg.Dir)[0]
	// The frames' synced fields still say that nothing after the term
	// record had been synced when they were written (Close's final sync
	// comes after them), so damage to one of them reads as a torn write.
	msgs := messageFrames(segmentFrames(t, p, 1))
	patch(t, p, func(b []byte) []byte {
		b[msgs[12].off+headerSize] ^= 1
		return b
	})
	s, got := reopenRead(t, cfg)
	requirePrefix(t, ids, got, 12)
	require.Equal(t, 8, s.Recovery().DroppedFrames)
}

func TestRecoveryTornSegmentSwitch(t *testing.T) {
	cfg := testConfig(t.TempDir())
	ids := fill(t, cfg, 5)
	// A crash right after the spare was renamed into place: the new last
	// segment has no start frame.
	for _, junk := range [][]byte{make([]byte, 4096), append(make([]byte, 64), 1, 2, 3)} {
		require.NoError(t, os.WriteFile(filepath.Join(cfg.Dir, segmentName(2)), junk, 0o644))
		s, got := reopenRead(t, cfg)
		requirePrefix(t, ids, got[:5], 5)
		require.Len(t, segPaths(t, cfg.Dir), 1)
		if allZero(junk) {
			require.Zero(t, s.Recovery().DroppedBytes)
		} else {
			require.Positive(t, s.Recovery().DroppedBytes)
		}
		require.NoError(t, s.Close())
	}
}

func TestRecoveryLeftoverSpareIsRemoved(t *testing.T) {
	cfg := testConfig(t.TempDir())
	ids := fill(t, cfg, 3)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Dir, "spare-7.tmp"), []byte("half-zeroed"), 0o644))
	_, got := reopenRead(t, cfg)
	requirePrefix(t, ids, got, 3)
	_, err := os.Stat(filepath.Join(cfg.Dir, "spare-7.tmp"))
	require.True(t, os.IsNotExist(err))
}

// A journal written before stamps holds its messages in frames of type 2,
// every property a string: they are read back as they were, between and
// beside the stamped frames written since.
func TestMessagesWrittenBeforeStampsReadBack(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	s, err := New(ctx, cfg)
	require.NoError(t, err)
	w, err := s.Open(ctx, walimpls.Channel{Name: "a", Term: 4}) // id 1
	require.NoError(t, err)
	appendN(t, w, "a", 2)
	require.NoError(t, s.Close())
	old, err := message.New([]byte("old"), map[string]string{"u": "v"})
	require.NoError(t, err)
	old = old.Stamp(message.KindTimeTick, 4, 1<<50).WithVChannel("vc")
	appendRawFrame(t, cfg.Dir, typeMessageV1, 1, encodeMessageV1(old))

	s = openStore(t, cfg)
	w, err = s.Open(ctx, walimpls.Channel{Name: "a", Term: 5})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	appendN(t, w, "a", 1)
	got := readAll(t, w)
	require.Len(t, got, 4)
	require.Equal(t, "old", string(got[2].Payload()))
	require.Equal(t, old.Properties().All(), got[2].Properties().All())
	require.Equal(t, old.Header(), got[2].Header())
}
