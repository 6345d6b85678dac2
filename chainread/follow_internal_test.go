package chainread

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func testChain() chain.Chain {
	at := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	return chain.Chain{Channel: "ch", Segments: []chain.Segment{
		{Index: 3, Backend: chain.Backend{Name: "kafka", Kind: "kafka", Channel: "ch-s3"}, FirstTerm: 7, Created: at,
			Seal: &chain.Seal{Term: 9, End: "41", TimeTick: 900, At: at}},
		{Index: 4, Backend: chain.Backend{Name: "local", Kind: "local", Channel: "ch-s4"}, FirstTerm: 9, Created: at},
	}}
}

// sealNext seals c's last segment at term with end and tt, and appends
// the next on backend name.
func sealNext(c chain.Chain, term int64, end string, tt uint64, name string) chain.Chain {
	c = c.Clone()
	last := &c.Segments[len(c.Segments)-1]
	last.Seal = &chain.Seal{Term: term, End: end, TimeTick: tt, At: last.Created}
	c.Segments = append(c.Segments, chain.Segment{Index: last.Index + 1, Backend: chain.Backend{Name: name, Kind: name, Channel: "ch-next"},
		FirstTerm: term, Created: last.Created})
	return c
}

// followed, step by step: what a chain Follow returned says of the
// segment a scanner follows live.
func TestFollowedDecides(t *testing.T) {
	cur := testChain()
	seg := cur.Last()
	require.NoError(t, cur.Validate())

	// The same chain, or one with a migration pending: still live.
	now, err := followed(cur, cur, seg, 950)
	require.NoError(t, err)
	require.Nil(t, now.Seal)
	pending := cur.Clone()
	pending.Pending = &chain.Migration{Target: chain.Backend{Name: "memory", Kind: "memory", Channel: "ch-s5"}, Term: 12, By: "op", At: seg.Created}
	require.NoError(t, pending.Validate())
	now, err = followed(cur, pending, seg, 950)
	require.NoError(t, err)
	require.Nil(t, now.Seal)

	// Sealed: the segment with its seal.
	sealed := sealNext(cur, 12, "77", 1000, "memory")
	require.NoError(t, sealed.Validate())
	now, err = followed(cur, sealed, seg, 950)
	require.NoError(t, err)
	require.Equal(t, chain.Seal{Term: 12, End: "77", TimeTick: 1000, At: seg.Created}, *now.Seal)
	// Sealed twice since: the segment's seal all the same.
	twice := sealNext(sealed, 13, "5", 1100, "kafka")
	require.NoError(t, twice.Validate())
	now, err = followed(cur, twice, seg, 1000)
	require.NoError(t, err)
	require.Equal(t, "77", now.Seal.End)
	// The front pruned, the segment kept: fine.
	pruned := twice.Clone()
	pruned.Segments = pruned.Segments[1:]
	_, err = followed(cur, pruned, seg, 950)
	require.NoError(t, err)

	// Delivered above the seal's timetick: a writer the seal did not
	// fence.
	_, err = followed(cur, sealed, seg, 1001)
	require.ErrorIs(t, err, ErrTimeTickOrder)

	// The segment dropped.
	dropped := twice.Clone()
	dropped.Segments = dropped.Segments[2:]
	_, err = followed(cur, dropped, seg, 950)
	require.ErrorIs(t, err, walimpls.ErrPositionGone)

	// Not a continuation: another channel, another backend or first term
	// at the index, a chain that ends before it.
	other := cur.Clone()
	other.Channel = "other"
	_, err = followed(cur, other, seg, 0)
	require.ErrorIs(t, err, ErrChainChanged)
	moved := cur.Clone()
	moved.Segments[1].Backend.Channel = "ch-s4b"
	_, err = followed(cur, moved, seg, 0)
	require.ErrorIs(t, err, ErrChainChanged)
	term := cur.Clone()
	term.Segments[1].FirstTerm = 10
	_, err = followed(cur, term, seg, 0)
	require.ErrorIs(t, err, ErrChainChanged)
	short := cur.Clone()
	short.Segments = short.Segments[:1]
	short.Segments[0].Seal = nil
	_, err = followed(cur, short, seg, 0)
	require.ErrorIs(t, err, ErrChainChanged)
}

// resumeStart, step by step: where a segment followed live restarts
// once it is known sealed.
func TestResumeStartDecides(t *testing.T) {
	first := segmentStart{policy: cursor.Latest(), filter: adaptor.Filter{TimeTickAbove: 5, VChannels: []string{"v"}}}
	// Nothing delivered: from where it started, as it started.
	require.Equal(t, first, resumeStart(first, liveRead{}, 900))
	// Delivered, but nothing with a resume position (watermarks): as it
	// started, above what it delivered.
	got := resumeStart(first, liveRead{any: true}, 950)
	require.Equal(t, first.policy, got.policy)
	require.EqualValues(t, 950, got.filter.TimeTickAbove)
	require.Equal(t, first.filter.VChannels, got.filter.VChannels)
	// Delivered: after the checkpoint of the last message delivered.
	pos, err := message.UnmarshalSeqID("memory", "42")
	require.NoError(t, err)
	got = resumeStart(first, liveRead{any: true, resume: pos}, 950)
	require.Equal(t, cursor.After(cursor.Checkpoint{Position: pos, TimeTick: 950}), got.policy)
	require.Equal(t, first.filter, got.filter)
}
