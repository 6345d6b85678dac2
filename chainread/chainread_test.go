package chainread_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// TestCrossesSeals: every acknowledged append is delivered once, in
// timetick order, across two and three hops (memory → local → memory),
// by Read and ReadBatches, and the scanner then follows the last segment.
func TestCrossesSeals(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "hops", "memory")
	bl.append(200, 4)
	bl.migrate("local", 2)
	bl.append(150, 3)
	require.NoError(t, bl.w.Sync(ctx))

	r := bl.reader(t)
	s, err := r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	check(t, bl.sorted(), recv(t, s, len(bl.acked)))

	bl.migrate("memory", 3)
	bl.append(100, 2)
	require.NoError(t, bl.w.Sync(ctx))
	r = bl.reader(t)
	bs, err := r.ReadBatches(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	defer bs.Close()
	check(t, bl.sorted(), recvBatches(t, bs, len(bl.acked)))

	// Live: what the last segment's writer appends next.
	n := len(bl.acked)
	bl.append(10, 1)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted()[n:], recvBatches(t, bs, 10))
	require.NoError(t, bs.Close())
	require.NoError(t, bs.Error())
}

// TestZombieAfterTheSealIsNeverDelivered: on a backend that cannot fence,
// the old writer still gets appends acknowledged after the seal's end was
// read; the chain's readers never deliver them.
func TestZombieAfterTheSealIsNeverDelivered(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "zombie", "nofence")
	bl.append(50, 2)
	old := bl.w
	bl.migrate("memory", 2)
	var zombies []message.ID
	for i := range 5 {
		m, _ := message.New([]byte{byte(i)}, nil)
		res, err := old.Append(ctx, m)
		require.NoError(t, err, "the backend cannot fence: nothing stops the zombie")
		zombies = append(zombies, res.ID)
	}
	require.NoError(t, old.Sync(ctx)) // a watermark that would release them
	bl.append(20, 1)
	require.NoError(t, bl.w.Sync(ctx))

	s, err := bl.reader(t).Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	got := recv(t, s, len(bl.acked))
	check(t, bl.sorted(), got)
	for _, m := range got {
		_, id, _ := cursor.SplitID(m.ID())
		for _, z := range zombies {
			require.False(t, id.EQ(z) && m.ID().Marshal() == z.Marshal(), "zombie %s delivered", z)
		}
	}
}

// TestResumeFromSegmentZeroAfterTwoHops: a consumer's checkpoint taken on
// segment 0 — by a chainread scanner, or by the adaptor before the channel
// had a chain — resumes after two migrations with exactly what follows.
func TestResumeFromSegmentZeroAfterTwoHops(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "resume", "local")
	bl.append(100, 4)
	require.NoError(t, bl.w.Sync(ctx))

	// Before any migration: a chain of one, and the adaptor itself.
	s, err := bl.reader(t).Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	got := recv(t, s, 40)
	require.NoError(t, s.Close())
	cp, err := cursor.CheckpointOf(got[39])
	require.NoError(t, err)
	require.EqualValues(t, 0, cursor.PositionOf(cp.Position).Segment)
	text := cp.Marshal()

	ro, err := adaptor.Open(ctx, b.local, adaptor.Channel{Name: "resume"}, adaptor.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	as, err := ro.Read(ctx, adaptor.ReadOption{})
	require.NoError(t, err)
	agot := recv(t, as, 60)
	require.NoError(t, as.Close())
	acp, err := cursor.CheckpointOf(agot[59])
	require.NoError(t, err)
	adaptorText := acp.Marshal()

	bl.migrate("memory", 2)
	bl.append(50, 2)
	bl.migrate("local", 3)
	bl.append(50, 2)
	require.NoError(t, bl.w.Sync(ctx))
	want := bl.sorted()

	r := bl.reader(t)
	for _, tc := range []struct {
		text  string
		after int
	}{{text, 40}, {adaptorText, 60}, {"", 0}} {
		cp, err := cursor.ParseChainCheckpoint(tc.text)
		require.NoError(t, err)
		s, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(cp)})
		require.NoError(t, err)
		check(t, want[tc.after:], recv(t, s, len(want)-tc.after))
		require.NoError(t, s.Close())
	}

	// A checkpoint of every delivered message resumes exactly after it.
	bs, err := r.ReadBatches(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	all := recvBatches(t, bs, len(want))
	require.NoError(t, bs.Close())
	for _, i := range []int{99, 100, 149, 150, 198} {
		cp, err := cursor.CheckpointOf(all[i])
		require.NoError(t, err)
		back, err := cursor.ParseChainCheckpoint(cp.Marshal())
		require.NoError(t, err)
		require.Equal(t, cursor.PositionOf(cp.Position), cursor.PositionOf(back.Position))
		require.Equal(t, cp.TimeTick, back.TimeTick)
		s, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(back)})
		require.NoError(t, err)
		check(t, want[i+1:], recv(t, s, len(want)-i-1))
		require.NoError(t, s.Close())
	}
}

// TestPositionsOutsideTheChain: a position in a dropped segment is
// ErrPositionGone and one after the last ErrUnknownSegment, from Read at
// once; a sealed segment whose data was deleted is ErrPositionGone, and
// reading it creates nothing.
func TestPositionsOutsideTheChain(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "gone", "memory")
	bl.append(10, 1)
	bl.migrate("local", 2)
	bl.append(10, 1)
	bl.migrate("memory", 3)
	bl.append(10, 1)
	require.NoError(t, bl.w.Sync(ctx))
	full := bl.c.Clone()

	// Drop segment 0 (the pruner deletes its data first).
	require.NoError(t, b.mem.Delete(ctx, "gone"))
	pruned := full.Clone()
	pruned.Segments = pruned.Segments[1:]
	r, err := chainread.New(chainread.Config{Chain: pruned, Openers: b.openers})
	require.NoError(t, err)
	for _, p := range []cursor.Policy{
		cursor.StartFrom(cursor.IDOf(cursor.Position{ID: "3"})),
		cursor.After(cursor.Checkpoint{Position: cursor.IDOf(cursor.Position{ID: "3"}), TimeTick: 7}),
	} {
		_, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: p})
		require.ErrorIs(t, err, walimpls.ErrPositionGone, "%v", p)
	}
	_, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.StartFrom(cursor.IDOf(cursor.Position{Segment: 3, ID: "1"}))})
	require.ErrorIs(t, err, chain.ErrUnknownSegment)
	// What is kept still reads.
	s, err := r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	check(t, bl.sorted()[10:], recv(t, s, 20))
	require.NoError(t, s.Close())

	// The full chain still names segment 0, whose data is gone: an error,
	// not a wait, and no channel comes back.
	r, err = chainread.New(chainread.Config{Chain: full, Openers: b.openers})
	require.NoError(t, err)
	_, err = r.Read(ctx, chainread.ReadOption{})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
	_, err = b.mem.Open(ctx, walimpls.Channel{Name: "gone", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "the reader brought the deleted segment back")
	// The chain from segment 1 on, whose segment 1's data is gone too.
	require.NoError(t, b.local.Delete(ctx, "gone-s1"))
	r, err = chainread.New(chainread.Config{Chain: pruned, Openers: b.openers})
	require.NoError(t, err)
	_, err = r.Read(ctx, chainread.ReadOption{})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
}

// TestTimeTicksMustGrowAcrossTheSeal: a next segment whose writer did not
// take the seal's timetick as floor is refused, never delivered out of
// order.
func TestTimeTicksMustGrowAcrossTheSeal(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "order", "memory")
	bl.append(10, 1)
	bl.migrate("local", 2)
	bl.append(10, 1)
	require.NoError(t, bl.w.Sync(ctx))
	// Claim a seal timetick far above what the next segment gave.
	bad := bl.c.Clone()
	bad.Segments[0].Seal.TimeTick = ^uint64(0) >> 1
	r, err := chainread.New(chainread.Config{Chain: bad, Openers: b.openers})
	require.NoError(t, err)
	s, err := r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	got := drain(t, s)
	require.Len(t, got, 10, "segment 0 is delivered, nothing of segment 1")
	require.ErrorIs(t, s.Error(), chainread.ErrTimeTickOrder)
	// A seal timetick below what the segment gave.
	bad = bl.c.Clone()
	bad.Segments[0].Seal.TimeTick = 1
	r, err = chainread.New(chainread.Config{Chain: bad, Openers: b.openers})
	require.NoError(t, err)
	s, err = r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	require.Empty(t, drain(t, s))
	require.ErrorIs(t, s.Error(), chainread.ErrTimeTickOrder)
}

func drain(t testing.TB, s walimpls.Scanner) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	for m := range s.Chan() {
		out = append(out, m)
	}
	return out
}

// TestLatestAndStartAfter: cursor.Latest delivers only what the last
// segment's writer appends after Read; cursor.StartAfter a sealed
// segment's End starts at the next segment.
func TestLatestAndStartAfter(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "latest", "local")
	bl.append(20, 2)
	bl.migrate("memory", 2)
	bl.append(20, 2)
	require.NoError(t, bl.w.Sync(ctx))
	r := bl.reader(t)

	s, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer s.Close()
	n := len(bl.acked)
	bl.append(5, 1)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted()[n:], recv(t, s, 5))

	end := cursor.Position{Segment: 0, ID: bl.c.Segments[0].Seal.End}
	s2, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.StartAfter(cursor.IDOf(end))})
	require.NoError(t, err)
	defer s2.Close()
	check(t, bl.sorted()[20:], recv(t, s2, len(bl.acked)-20))
}
