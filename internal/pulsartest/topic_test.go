package pulsartest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTopicCursorLogic(t *testing.T) {
	tp := newTopic("t", 7)
	for range 5 {
		tp.append([]byte("x"), entryInfo{numMessages: 1}, "p", 0, 0)
	}
	s := &subscription{name: "s", durable: true, acked: map[Position]bool{}, markDelete: tp.trimmed}
	tp.subs["s"] = s

	s.ack(tp, Position{7, 1})
	require.Equal(t, minPosition(), s.markDelete, "gap at entry 0")
	s.ack(tp, Position{7, 0})
	require.Equal(t, Position{7, 1}, s.markDelete)
	s.ack(tp, Position{7, 3})
	s.ackCumulative(tp, Position{7, 2})
	require.Equal(t, Position{7, 3}, s.markDelete, "cumulative ack joins the acked entry after it")
	require.Empty(t, s.acked)

	low, ok := tp.slowestCursor()
	require.True(t, ok)
	require.Equal(t, 4, tp.deleteBelow(low.next()))
	require.Equal(t, Position{7, 3}, tp.trimmed)
	require.True(t, tp.gone(Position{7, 2}))
	require.False(t, tp.gone(Position{7, 3}))

	// A new ledger: entry ids restart, positions stay ordered.
	tp.rollLedger(9)
	e := tp.append([]byte("y"), entryInfo{numMessages: 2, batched: true}, "p", 1, 2)
	require.Equal(t, Position{9, 0}, e.pos)
	require.Equal(t, int32(1), tp.lastBatchIndex)
	require.Equal(t, 1, tp.search(Position{7, 5}))
	s.ack(tp, Position{7, 4})
	s.ack(tp, Position{9, 0})
	require.Equal(t, Position{9, 0}, s.markDelete)

	// Trimming moves a cursor below the deleted range up.
	s.reset(tp, Position{7, 0})
	require.Equal(t, Position{7, 3}, s.markDelete)
}
