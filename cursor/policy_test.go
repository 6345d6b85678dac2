package cursor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

func TestPolicy(t *testing.T) {
	require.True(t, cursor.Policy{}.IsAll(), "the zero policy is All")
	require.True(t, cursor.Latest().IsLatest())
	id := message.NewSeqID("m", 3)
	got, incl, ok := cursor.StartFrom(id).StartID()
	require.True(t, ok && incl && got.EQ(id))
	_, incl, ok = cursor.StartAfter(id).StartID()
	require.True(t, ok && !incl)
	_, _, ok = cursor.All().StartID()
	require.False(t, ok)
	require.Equal(t, "start-after(m:3)", cursor.StartAfter(id).String())
}

// TestPolicyComesApart checks that every policy comes apart into what
// built it, and that its log read and timetick rule are the adaptor's.
func TestPolicyComesApart(t *testing.T) {
	id := message.NewSeqID("memory", 7)
	type want struct {
		all, latest bool
		id          message.ID
		inclusive   bool
		fromTT      uint64
		after       cursor.Checkpoint
	}
	for _, tc := range []struct {
		p    cursor.Policy
		want want
	}{
		{cursor.Policy{}, want{all: true}},
		{cursor.All(), want{all: true}},
		{cursor.Latest(), want{latest: true}},
		{cursor.StartFrom(id), want{id: id, inclusive: true}},
		{cursor.StartAfter(id), want{id: id}},
		{cursor.FromTimeTick(9), want{fromTT: 9}},
		{cursor.After(cursor.Checkpoint{Position: id, TimeTick: 12}), want{id: id, inclusive: true, after: cursor.Checkpoint{Position: id, TimeTick: 12}}},
		{cursor.After(cursor.Checkpoint{}), want{all: true}},
	} {
		p, w := tc.p, tc.want
		require.Equal(t, w.all, p.IsAll(), p)
		require.Equal(t, w.latest, p.IsLatest(), p)
		got, inclusive, ok := p.StartID()
		require.Equal(t, !w.id.IsZero(), ok, p)
		require.True(t, w.id.EQ(got) || w.id.IsZero() && got.IsZero(), "%v", p)
		require.Equal(t, w.inclusive, inclusive, p)
		tt, ok := p.FromTimeTick()
		require.Equal(t, w.fromTT, tt, p)
		require.Equal(t, w.fromTT != 0, ok, p)
		cp, ok := p.After()
		require.Equal(t, !w.after.IsZero(), ok, p)
		require.Equal(t, w.after, cp, p)
		_, ok = p.Tail()
		require.False(t, ok, p)
	}

	require.True(t, cursor.FromTimeTick(9).Log().IsAll())
	require.True(t, cursor.FromTimeTick(9).Admits(9))
	require.False(t, cursor.FromTimeTick(9).Admits(8))
	after := cursor.After(cursor.Checkpoint{Position: id, TimeTick: 12})
	got, inclusive, ok := after.Log().StartID()
	require.True(t, ok && inclusive && got.EQ(id))
	_, ok = after.Log().After()
	require.False(t, ok, "the log read of After is a plain StartFrom")
	require.False(t, after.Admits(12))
	require.True(t, after.Admits(13))
	n, ok := cursor.Tail(5).Tail()
	require.True(t, ok)
	require.Equal(t, 5, n)
	require.Equal(t, "tail(5)", cursor.Tail(5).String())
}
