package cursor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/message"
)

// A chain checkpoint's string is the adaptor's for segment 0, and reads
// back without the chain's backends to the same position and timetick.
func TestChainCheckpointStrings(t *testing.T) {
	for _, tc := range []struct {
		cp   cursor.Checkpoint
		text string
	}{
		{cursor.Checkpoint{}, ""},
		{cursor.Checkpoint{Position: message.NewSeqID("memory", 44), TimeTick: 9}, "9@44"},
		{cursor.Checkpoint{Position: cursor.ChainID(0, message.NewSeqID("memory", 44)), TimeTick: 9}, "9@44"},
		{cursor.Checkpoint{Position: cursor.ChainID(3, message.NewSeqID("memory", 44)), TimeTick: 9}, "9@s3/44"},
	} {
		require.Equal(t, tc.text, tc.cp.Marshal())
		back, err := cursor.ParseChainCheckpoint(tc.text)
		require.NoError(t, err, tc.text)
		require.Equal(t, tc.text, back.Marshal())
		require.Equal(t, tc.cp.TimeTick, back.TimeTick)
		require.Equal(t, cursor.PositionOf(tc.cp.Position), cursor.PositionOf(back.Position))
	}
	for _, bad := range []string{"@", "12", "x@3", "0@3", "01@3", "+1@3", "12@", "12@s1/", "12@s01/3", " 12@3"} {
		_, err := cursor.ParseChainCheckpoint(bad)
		errmarktest.Is(t, err, cursor.ErrCorruptCheckpoint)
	}
	_, err := cursor.ParseChainCheckpoint("12@s0/3")
	errmarktest.Is(t, err, message.ErrCorruptID)
}

// Chain IDs order by segment, then by the backend's order; a bare backend
// ID is segment 0.
func TestChainIDs(t *testing.T) {
	a := cursor.ChainID(1, message.NewSeqID("memory", 9))
	b := cursor.ChainID(2, message.NewSeqID("memory", 1))
	c := cursor.ChainID(2, message.NewSeqID("memory", 3))
	require.True(t, a.LT(b) && b.LT(c))
	seg, bid, ok := cursor.SplitID(c)
	require.True(t, ok)
	require.EqualValues(t, 2, seg)
	require.True(t, bid.EQ(message.NewSeqID("memory", 3)))
	require.Equal(t, "s2/3", c.Marshal())

	_, _, ok = cursor.SplitID(message.NewSeqID("memory", 3))
	require.False(t, ok, "a bare backend ID is no chain ID")
	require.Equal(t, cursor.Position{ID: "3"}, cursor.PositionOf(message.NewSeqID("memory", 3)))
	require.Equal(t, cursor.Position{}, cursor.PositionOf(message.ID{}))

	p := cursor.Position{Segment: 4, ID: "12:3@2"}
	id := cursor.IDOf(p)
	require.Equal(t, p, cursor.PositionOf(id))
	require.Equal(t, p.String(), id.Marshal())
	require.True(t, id.LT(cursor.IDOf(cursor.Position{Segment: 4, ID: "13"})))
	require.True(t, cursor.IDOf(cursor.Position{}).IsZero())
}
