package local

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
)

// A batch whose write was torn at the tail of the log is dropped whole,
// whatever part of it was torn, and appends go on after the batch before
// it.
func TestRecoveryBatchCutShort(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(b []byte, batch []frameLoc) []byte
		reason string
		frames int
	}{
		{"bad crc in the last frame", func(b []byte, batch []frameLoc) []byte {
			b[batch[3].off+headerSize] ^= 0xff
			return b
		}, "batch cut short by bad frame (checksum or header)", 4},
		{"cut inside the third frame", func(b []byte, batch []frameLoc) []byte {
			return b[:batch[2].off+headerSize+2]
		}, "batch cut short by partial frame", 3},
		{"last frame zeroed", func(b []byte, batch []frameLoc) []byte {
			clear(b[batch[3].off : batch[3].off+batch[3].size])
			return b
		}, "batch cut short by zeroed space", 3},
		{"first frame zeroed", func(b []byte, batch []frameLoc) []byte {
			clear(b[batch[0].off : batch[0].off+batch[0].size])
			return b
		}, "zeroed space", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testConfig(t.TempDir())
			s, err := New(context.Background(), cfg)
			require.NoError(t, err)
			w, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 1})
			require.NoError(t, err)
			a, err := w.AppendBatch(ctx, batchMessages("a", 3, 100))
			require.NoError(t, err)
			_, err = w.AppendBatch(ctx, batchMessages("b", 4, 100))
			require.NoError(t, err)
			require.NoError(t, s.Close())
			paths := segPaths(t, cfg.Dir)
			require.Len(t, paths, 1)
			msgs := messageFrames(segmentFrames(t, paths[0], 1))
			require.Len(t, msgs, 7)
			patch(t, paths[0], func(b []byte) []byte { return c.damage(b, msgs[3:]) })

			s = openStore(t, cfg)
			rep := s.Recovery()
			require.Equal(t, c.reason, rep.Reason)
			require.Equal(t, int64(msgs[3].off), rep.Offset, "cut at the batch's first frame")
			require.Equal(t, c.frames, rep.DroppedFrames)
			require.Positive(t, rep.DroppedBytes)
			w = openWAL(t, s, "c", 1)
			last, err := w.Last(ctx)
			require.NoError(t, err)
			require.True(t, last.EQ(a[2]), "the log ends after batch a: %s", last)
			// Appends go on where batch b was.
			after, err := w.AppendBatch(ctx, batchMessages("after", 2, 100))
			require.NoError(t, err)
			require.True(t, a[2].LT(after[0]))
			require.NoError(t, s.Close())

			s = openStore(t, cfg)
			require.Zero(t, s.Recovery().DroppedBytes)
			got := readN(t, openWAL(t, s, "c", 1), cursor.All(), 5)
			require.Equal(t, map[string]bool{"a": true, "after": true}, checkBatches(t, got, c.name))
			last, err = openReadOnly(t, s, "c").Last(ctx)
			require.NoError(t, err)
			require.True(t, last.EQ(after[1]))
		})
	}
}

// setFlags rewrites the flags of the frame at off of a segment file.
func setFlags(t *testing.T, path string, num uint64, off int, flags uint8) {
	t.Helper()
	patch(t, path, func(b []byte) []byte {
		h, body, sz, st := decodeFrame(b[off:], uint32(num))
		require.Equal(t, frameOK, st)
		h.flags = flags
		copy(b[off:off+sz], appendFrame(nil, h, body))
		return b
	})
}

// A batch cut short anywhere but at the tail of the log, or whose frames
// were synced, is corruption: Open fails and cuts nothing.
func TestRecoveryBatchCorruption(t *testing.T) {
	ctx := context.Background()
	t.Run("synced frames after a batch cut short", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		s := openStore(t, cfg)
		w := openWAL(t, s, "c", 1)
		_, err := w.AppendBatch(ctx, batchMessages("a", 3, 100))
		require.NoError(t, err)
		appendN(t, w, "after", 1) // written after a was synced
		require.NoError(t, s.Close())
		p := segPaths(t, cfg.Dir)[0]
		msgs := messageFrames(segmentFrames(t, p, 1))
		patch(t, p, func(b []byte) []byte { b[msgs[2].off+headerSize] ^= 0xff; return b })
		_, err = New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "batch cut short")
	})
	t.Run("a batch followed by another channel's message", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		s := openStore(t, cfg)
		wc, wd := openWAL(t, s, "c", 1), openWAL(t, s, "d", 1)
		appendN(t, wc, "c", 1)
		appendN(t, wd, "d", 1)
		require.NoError(t, s.Close())
		p := segPaths(t, cfg.Dir)[0]
		setFlags(t, p, 1, messageFrames(segmentFrames(t, p, 1))[0].off, flagMore)
		_, err := New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "inside a batch")
	})
	for _, zeroSeal := range []bool{false, true} {
		t.Run(fmt.Sprintf("a batch cut short by the end of a middle segment (seal zeroed: %v)", zeroSeal), func(t *testing.T) {
			cfg := smallSegments(t.TempDir())
			fillSegments(t, cfg, 2)
			p := segPaths(t, cfg.Dir)[0]
			fr := segmentFrames(t, p, 1)
			seal := fr[len(fr)-1]
			require.Equal(t, typeSeal, seal.typ)
			setFlags(t, p, 1, fr[len(fr)-2].off, flagMore)
			want := "inside a batch"
			if zeroSeal {
				patch(t, p, func(b []byte) []byte { clear(b[seal.off : seal.off+seal.size]); return b })
				want = "in the middle of the log"
			}
			_, err := New(context.Background(), cfg)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), want)
		})
	}
	t.Run("flags on a frame that is not a message", func(t *testing.T) {
		h := frameHeader{seq: 1, seg: 1, typ: typeTerm, flags: flagMore}
		_, _, _, st := decodeFrame(appendFrame(nil, h, encodeTerm(1, "c")), 1)
		require.Equal(t, frameBad, st)
		h = frameHeader{seq: 1, seg: 1, typ: typeMessage, flags: 2}
		_, _, _, st = decodeFrame(appendFrame(nil, h, nil), 1)
		require.Equal(t, frameBad, st, "an unknown flag")
	})
}
