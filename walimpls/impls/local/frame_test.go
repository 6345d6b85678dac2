package local

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 100, 4096} {
		body := bytes.Repeat([]byte{0xab}, n)
		h := frameHeader{seq: 42, seg: 7, synced: 96, chanID: 3, typ: typeMessage}
		b := appendFrame([]byte("prefix!!"), h, body)[8:]
		require.Equal(t, frameSize(n), len(b))
		require.Zero(t, len(b)%frameAlign)
		got, gotBody, sz, st := decodeFrame(append(b, 0, 0, 0, 0, 0, 0, 0, 0), 7)
		require.Equal(t, frameOK, st)
		require.Equal(t, frameSize(n), sz)
		h.length = uint32(n)
		require.Equal(t, h, got)
		require.Equal(t, body, gotBody)

		_, _, _, st = decodeFrame(b, 8)
		require.Equal(t, frameStale, st, "a frame of another segment")
		_, _, _, st = decodeFrame(b[:len(b)-frameSize(n)+headerSize+n-1], 7)
		if n > 0 {
			require.Equal(t, frameShort, st)
		}
		for i := range b[:headerSize+n] {
			c := bytes.Clone(b)
			c[i] ^= 0x40
			_, _, _, st := decodeFrame(c, 7)
			require.NotEqual(t, frameOK, st, "flipped byte %d of %d", i, len(b))
		}
	}
	_, _, _, st := decodeFrame(make([]byte, 100), 1)
	require.Equal(t, frameZero, st)
	_, _, _, st = decodeFrame(nil, 1)
	require.Equal(t, frameZero, st)
}

func TestMessageBodyRoundTrip(t *testing.T) {
	m, err := message.New([]byte("payload"), map[string]string{"a": "1", "": "", "ü": "世界"})
	require.NoError(t, err)
	for _, m := range []message.Message{
		m.WithTerm(5).WithKind(message.KindTimeTick),
		m.Stamp(message.KindPart, -1, 1<<63).WithVChannel("vc"),
		message.Restore([]byte("p"), map[string]string{message.KeyTerm: "+5", message.KeyKind: "3"}),
		{},
	} {
		got, err := decodeMessage(typeMessage, encodeMessage(m), true)
		require.NoError(t, err)
		require.Equal(t, string(m.Payload()), string(got.Payload()))
		require.Equal(t, m.Properties().All(), got.Properties().All())

		got, err = decodeMessage(typeMessageV1, encodeMessageV1(m), true)
		require.NoError(t, err, "a message written before stamps")
		require.Equal(t, string(m.Payload()), string(got.Payload()))
		require.Equal(t, m.Properties().All(), got.Properties().All())
		require.Equal(t, m.Header(), got.Header())
	}
	stamped := message.Message{}.Stamp(message.KindPart, 300, 1<<40)
	for _, bad := range [][]byte{{}, {0x80}, {5}, {0, 1, 3, 'a'}, {0, 2, 1, 'a', 0, 1, 'a', 0}, {0x08, 0},
		stamped.AppendStamp(nil)[:3],
		append(stamped.AppendStamp(nil), 1, 2, '_', 't', 1, '1'), // the term twice
	} {
		_, err := decodeMessage(typeMessage, bad, true)
		require.ErrorIs(t, err, errBadBody, "%x", bad)
	}
	for _, bad := range [][]byte{{}, {0x80}, {5}, {1, 3, 'a'}, {2, 1, 'a', 0, 1, 'a', 0}} {
		_, err := decodeMessage(typeMessageV1, bad, true)
		require.ErrorIs(t, err, errBadBody, "%x", bad)
	}
}

// encodeMessageV1 encodes a message frame's body the way it was written
// before stamps: every property as a string, then the payload.
func encodeMessageV1(m message.Message) []byte {
	return append(appendProperties(nil, m.Properties()), m.Payload()...)
}

func TestMetaBodiesRoundTrip(t *testing.T) {
	term, name, err := decodeTerm(encodeTerm(-3, "chan"))
	require.NoError(t, err)
	require.Equal(t, int64(-3), term)
	require.Equal(t, "chan", name)
	keep, lr, err := decodeTruncate(encodeTruncate(10, 9))
	require.NoError(t, err)
	require.Equal(t, []uint64{10, 9}, []uint64{keep, lr})
	snaps := []chanSnapshot{{id: 1, name: "a", term: 2, keep: 3, lastRemoved: 2, lastSeq: 9}, {id: 2, name: "b"}}
	st := segmentStart{prevEnd: 4096, recycled: true, nextChanID: 3, chans: snaps}
	got, err := decodeSegmentStart(encodeSegmentStart(st))
	require.NoError(t, err)
	require.Equal(t, st, got)
	_, err = decodeSegmentStart(encodeSegmentStart(segmentStart{nextChanID: 2, chans: snaps}))
	require.ErrorIs(t, err, errBadBody, "an id at or above the next id")
	st.segmentBytes = 64 << 20
	got, err = decodeSegmentStart(encodeSegmentStart(st))
	require.NoError(t, err)
	require.Equal(t, st, got, "with a recorded size")
	st.segmentBytes = 1000
	_, err = decodeSegmentStart(encodeSegmentStart(st))
	require.ErrorIs(t, err, errBadBody, "a size no config allows")

	name, err = decodeDelete(encodeDelete("orders.v2"))
	require.NoError(t, err)
	require.Equal(t, "orders.v2", name)
	for _, bad := range [][]byte{nil, encodeDelete(""), append(encodeDelete("a"), 0), {5, 'a'}} {
		_, err = decodeDelete(bad)
		require.ErrorIs(t, err, errBadBody, "%x", bad)
	}
	require.True(t, validTypeAndFlags(byte(typeDelete), 0))
	require.False(t, validTypeAndFlags(byte(typeDelete), flagMore), "only message frames belong to batches")
	require.True(t, validTypeAndFlags(byte(typeMessageV1), flagMore))
	require.True(t, validTypeAndFlags(byte(typeMessage), flagMore))
	require.False(t, validTypeAndFlags(byte(typeMessage)+1, 0))

	next, err := decodeSeal(encodeSeal(1 << 40))
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40), next)
	require.Equal(t, sealSize, frameSize(len(encodeSeal(7))))
	_, err = decodeSeal([]byte{1, 2, 3})
	require.ErrorIs(t, err, errBadBody)
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame and body decoders: they
// must never panic, and whatever decodes must encode back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	m, _ := message.New([]byte("hello"), map[string]string{"k": "v"})
	seeds := [][]byte{
		appendFrame(nil, frameHeader{seq: 1, seg: 1, typ: typeMessage, chanID: 1}, encodeMessage(m)),
		appendFrame(nil, frameHeader{seq: 1, seg: 1, typ: typeMessageV1, chanID: 1}, encodeMessageV1(m.Stamp(message.KindData, 2, 3))),
		appendFrame(nil, frameHeader{seq: 2, seg: 1, typ: typeTerm, chanID: 1}, encodeTerm(4, "c")),
		appendFrame(nil, frameHeader{seq: 3, seg: 1, typ: typeTruncate, chanID: 1}, encodeTruncate(2, 1)),
		appendFrame(nil, frameHeader{seq: 4, seg: 1, typ: typeSegmentStart}, encodeSegmentStart(segmentStart{prevEnd: 64, nextChanID: 2, chans: []chanSnapshot{{id: 1, name: "c", term: 4}}})),
		appendFrame(nil, frameHeader{seq: 5, seg: 1, typ: typeSegmentStart}, encodeSegmentStart(segmentStart{prevEnd: 64, segmentBytes: 1 << 20, nextChanID: 1})),
		appendFrame(nil, frameHeader{seq: 6, seg: 1, typ: typeSeal}, encodeSeal(2)),
		appendFrame(nil, frameHeader{seq: 7, seg: 1, typ: typeDelete, chanID: 1}, encodeDelete("c")),
		make([]byte, 40),
		{1, 2, 3},
	}
	torn := bytes.Clone(seeds[0])
	torn[40] ^= 1
	seeds = append(seeds, torn, seeds[0][:20])
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The body decoders see the raw bytes too: a valid CRC is rare in
		// random input, and they must be robust on their own.
		_, _ = decodeMessage(typeMessage, b, false)
		_, _ = decodeMessage(typeMessageV1, b, false)
		_, _, _ = decodeTerm(b)
		_, _, _ = decodeTruncate(b)
		_, _ = decodeSegmentStart(b)
		_, _ = decodeSeal(b)
		_, _ = decodeDelete(b)
		h, body, sz, st := decodeFrame(b, 1)
		if st != frameOK {
			return
		}
		if sz < headerSize || sz > len(b) || sz%frameAlign != 0 && sz != len(b) {
			t.Fatalf("bad size %d for %d bytes", sz, len(b))
		}
		again := appendFrame(nil, h, body)
		if !bytes.Equal(again[:headerSize+len(body)], b[:headerSize+len(body)]) {
			t.Fatalf("re-encoding differs")
		}
		switch h.typ {
		case typeMessage, typeMessageV1:
			if m, err := decodeMessage(h.typ, body, false); err == nil {
				again, err := decodeMessage(typeMessage, encodeMessage(m), true)
				if err != nil {
					t.Fatalf("re-encoded message does not decode: %v", err)
				}
				if !again.Properties().Equal(m.Properties()) || !bytes.Equal(again.Payload(), m.Payload()) {
					t.Fatalf("re-encoded message differs")
				}
			}
		case typeTerm:
			_, _, _ = decodeTerm(body)
		case typeTruncate:
			_, _, _ = decodeTruncate(body)
		case typeSegmentStart:
			_, _ = decodeSegmentStart(body)
		case typeSeal:
			_, _ = decodeSeal(body)
		case typeDelete:
			_, _ = decodeDelete(body)
		}
	})
}
