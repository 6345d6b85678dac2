package pulsar

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// readTail reads a DeliverTail(n) scanner up to and including the message
// last, and returns what it delivered.
func readTail(t *testing.T, w walimpls.WALImpl, n int, last message.ID) []message.Immutable {
	t.Helper()
	return walimplstest.ReadUntil(t, w, cursor.Tail(n), last, 15*time.Second)
}

// TestTailStart pins the start positions: exact batch indexes within the
// last entry, whole entries back from it, and the DeliverAll start when
// the ledger is too short or the start would be truncated.
func TestTailStart(t *testing.T) {
	id := func(l, e int64, b int32) msgID { return msgID{ledger: l, entry: e, batch: b} }
	at := func(m msgID) start { return start{id: m, inclusive: true} }
	earliest := start{earliest: true}
	last := id(9, 5, 3) // entry 5 of ledger 9 holds 4 messages
	for _, c := range []struct {
		name     string
		n        int
		last     msgID
		hasLast  bool
		trunc    msgID
		hasTrunc bool
		want     start
	}{
		{"empty", 3, msgID{}, false, msgID{}, false, earliest},
		{"empty truncated", 3, msgID{}, false, id(9, 1, 0), true, at(id(9, 1, 0))},
		{"last message", 1, last, true, msgID{}, false, at(id(9, 5, 3))},
		{"inside the last batch", 3, last, true, msgID{}, false, at(id(9, 5, 1))},
		{"the whole last batch", 4, last, true, msgID{}, false, at(id(9, 5, 0))},
		{"one entry back", 5, last, true, msgID{}, false, at(id(9, 4, 0))},
		{"down to entry 0", 9, last, true, msgID{}, false, at(id(9, 0, 0))},
		{"ledger too short", 10, last, true, msgID{}, false, earliest},
		{"ledger too short, truncated", 10, last, true, id(9, 2, 0), true, at(id(9, 2, 0))},
		{"whole log", math.MaxInt, last, true, msgID{}, false, earliest},
		{"below the truncation point", 6, last, true, id(9, 4, 1), true, at(id(9, 4, 1))},
		{"at the truncation point", 6, last, true, id(9, 3, 0), true, at(id(9, 3, 0))},
		{"above the truncation point", 2, last, true, id(9, 3, 0), true, at(id(9, 5, 2))},
		{"a message sent without batching", 1, id(9, 5, 0), true, msgID{}, false, at(id(9, 5, 0))},
		{"entries of one message", 3, id(9, 5, 0), true, msgID{}, false, at(id(9, 3, 0))},
	} {
		got := tailStart(c.n, c.last, c.hasLast, c.trunc, c.hasTrunc)
		require.Equal(t, c.want, got, c.name)
	}
}

// TestDeliverTail: on a log of one message per entry the scanner delivers
// exactly the last n messages, every message when n is the log's length
// or more (math.MaxInt included), also on a read-only WAL of another node;
// an n below 1 is refused.
func TestDeliverTail(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	w := open(t, newOpener(t, cfg), "tail", 1, walimpls.ReadWrite)
	ids := appendMany(t, w, "m", 20)
	last := ids[len(ids)-1]
	for _, n := range []int{1, 2, 7, 19, 20, 21, 1000, math.MaxInt} {
		got := readTail(t, w, n, last)
		requireSuffix(t, ids, got)
		require.Len(t, got, min(n, len(ids)), "tail(%d)", n)
	}
	ro := open(t, newOpener(t, cfg), "tail", 0, walimpls.ReadOnly)
	require.Len(t, readTail(t, ro, 4, last), 4)

	for _, n := range []int{0, -1, math.MinInt} {
		_, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Tail(n)})
		require.ErrorIs(t, err, walimpls.ErrInvalidPosition, "tail(%d)", n)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := w.Read(cancelled, walimpls.ReadOption{DeliverPolicy: cursor.Tail(1)})
	require.ErrorIs(t, err, context.Canceled)
}

// TestDeliverTailBatchEntries reads tails of a log whose messages share
// entries: a tail within the last entry starts at its exact batch index,
// a longer one counts the entries before it as one message each, so it
// delivers at least n.
func TestDeliverTailBatchEntries(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	w := open(t, newOpener(t, cfg), "tail-batches", 1, walimpls.ReadWrite)
	var ids []message.ID
	for b := range 3 {
		got, err := appendBatch(w, batchOf(t, fmt.Sprint(b), 10))
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	last := ids[len(ids)-1]
	lastID, _ := idOf(last)
	for _, n := range []int{1, 2, 5, 10, 11, 25, 30, 31} {
		got := readTail(t, w, n, last)
		requireSuffix(t, ids, got)
		require.GreaterOrEqual(t, len(got), min(n, len(ids)), "tail(%d)", n)
		if n <= int(lastID.batch)+1 {
			require.Len(t, got, n, "tail(%d) within the last entry (batch index %d)", n, lastID.batch)
		}
	}
}

// TestDeliverTailAfterUnload: an unload moves the topic to a new ledger.
// A tail that the new ledger's entries cover starts in it; a longer one
// cannot find where the earlier ledger ends, and starts where DeliverAll
// does (the documented limit).
func TestDeliverTailAfterUnload(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	w := open(t, newOpener(t, cfg), "tail-unload", 1, walimpls.ReadWrite)
	ids := appendMany(t, w, "before", 5)
	require.NoError(t, b.UnloadTopic(topicOf(cfg, "tail-unload")))
	// Right after the unload the last message is still in the old ledger.
	require.Len(t, readTail(t, w, 3, ids[4]), 3)
	ids = append(ids, appendMany(t, w, "after", 2)...)
	last := ids[len(ids)-1]
	first, _ := idOf(ids[5])
	require.Zero(t, first.entry, "precondition: a new ledger")

	for _, n := range []int{1, 2} {
		got := readTail(t, w, n, last)
		requireSuffix(t, ids, got)
		require.Len(t, got, n)
	}
	got := readTail(t, w, 3, last)
	requireSuffix(t, ids, got)
	require.Len(t, got, len(ids), "a tail longer than the last ledger starts at the first message kept")
}

// TestDeliverTailTruncated: a tail never starts below the truncation
// point; one longer than what is kept delivers every kept message, and a
// log truncated to its last message gives that message.
func TestDeliverTailTruncated(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	w := open(t, newOpener(t, cfg), "tail-trunc", 1, walimpls.ReadWrite)
	ids := appendMany(t, w, "m", 10)
	last := ids[len(ids)-1]
	require.NoError(t, w.Truncate(context.Background(), ids[6]))

	require.Len(t, readTail(t, w, 2, last), 2)
	for _, n := range []int{4, 5, 100} {
		got := readTail(t, w, n, last)
		requireSuffix(t, ids, got)
		require.True(t, ids[6].EQ(got[0].ID()), "tail(%d) starts at the first kept message, got %s", n, got[0].ID())
	}
	// Another node learns the truncation point when it opens.
	ro := open(t, newOpener(t, cfg), "tail-trunc", 0, walimpls.ReadOnly)
	got := readTail(t, ro, 100, last)
	require.True(t, ids[6].EQ(got[0].ID()))

	require.NoError(t, w.Truncate(context.Background(), last))
	got = readTail(t, w, 3, last)
	require.Len(t, got, 1)
}

// TestDeliverTailEmpty reads the tail of a channel that never held a
// message: the scanner delivers what is appended after Read.
func TestDeliverTailEmpty(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	w := open(t, newOpener(t, cfg), "tail-empty", 1, walimpls.ReadWrite)
	s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Tail(3)})
	require.NoError(t, err)
	defer s.Close()
	id := appendOK(t, w, msg(t, "first", nil))
	got := collect(t, s, 1, 10*time.Second)
	require.True(t, id.EQ(got[0].ID()))
}
