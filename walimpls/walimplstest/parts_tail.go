package walimplstest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// tailMessages is how many messages the cursor.Tail part stores: enough for
// a start near the end to differ from the first message, few enough to stay
// fast over the wire.
const tailMessages = 50

// testDeliverTail checks cursor.Tail(n): it delivers a contiguous suffix of
// the log, in ID order and ending at the last message, holding at least the
// last n messages stored when Read was called (all of them when fewer are
// kept), and then tails like any scanner. A backend may start earlier than
// exactly n from the end, so the part never asks for the exact start, only
// for the bounds the contract sets: never later than n from the end, never
// at a truncated message. n < 1 is ErrInvalidPosition from Read.
func testDeliverTail(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("tail"), 1, walimpls.ReadWrite)

	// An empty channel: nothing old to deliver, and an append after Read
	// is delivered (the scanner starts at or before the end, and tails).
	e.expectInvalidTail(w)
	empty := []walimpls.Scanner{e.read(w, cursor.Tail(1)), e.read(w, cursor.Tail(5))}
	for _, s := range empty {
		e.quiet(s)
	}
	log := newTailLog()
	firstMsg := simpleMessages(t, "tail-first", 1)
	log.add(e.appendAll(w, firstMsg), firstMsg)
	for i, s := range empty {
		checkSequence(t, log.ids, log.msgs, []message.Immutable{e.recvWithin(s, e.opts.waitTimeout,
			fmt.Sprintf("scanner %d, started with DeliverTail on an empty channel, after an append", i))})
	}

	// K messages, in batches and singly: the end of the log is a batch's
	// last message, and the suffixes asked for below start inside batches
	// and between single appends.
	batchA := simpleMessages(t, "tail-batch-a", 19)
	log.add(e.appendBatchOK(w, batchA), batchA)
	singlesA := append(simpleMessages(t, "tail-single-a", 4), message.Message{}) // an empty message too
	log.add(e.appendAll(w, singlesA), singlesA)
	batchB := simpleMessages(t, "tail-batch-b", 15)
	log.add(e.appendBatchOK(w, batchB), batchB)
	// A neighbour's appends between these: on a backend whose positions
	// are shared by its channels, n messages back is not n positions back.
	neighbour := e.open(o, w.Channel().Name+"-neighbour", 1, walimpls.ReadWrite)
	singlesB := simpleMessages(t, "tail-single-b", 8)
	for i := range singlesB {
		e.appendAll(neighbour, simpleMessages(t, fmt.Sprintf("tail-neighbour-%d", i), 2))
		log.add(e.appendAll(w, singlesB[i:i+1]), singlesB[i:i+1])
	}
	batchC := simpleMessages(t, "tail-batch-c", tailMessages-log.len())
	log.add(e.appendBatchOK(w, batchC), batchC)
	require.Equal(t, tailMessages, log.len())

	k := log.len()
	var tails []walimpls.Scanner
	for _, n := range []int{1, 5, k - 1, k, k + 10} {
		s := e.read(w, cursor.Tail(n))
		e.checkTail(s, log, 0, n)
		tails = append(tails, s)
	}
	// A refused Read stores nothing: the scanners' next message is the
	// append below, and Last has not moved.
	e.expectInvalidTail(w)
	e.checkLastIs(w, log.last(), "after refused DeliverTail reads")
	e.checkTailsGoOn(w, log, tails, "after delivering the tail")

	// After a truncation, a tail longer than what is kept starts exactly
	// at the first message kept: never at a gone position (an error or a
	// silent start before it), never later.
	first := 20
	require.NoError(t, e.truncate(w, log.ids[first]))
	kept := log.len() - first
	tails = tails[:0]
	for _, n := range []int{k, kept + 1, kept, kept - 1, 3, 1} {
		s, err := e.tryRead(w, walimpls.ReadOption{Name: "tail-after-truncate", DeliverPolicy: cursor.Tail(n)})
		require.NoErrorf(t, err, "DeliverTail(%d) after a truncation: the start must be the first message kept, never a gone position", n)
		e.checkTail(s, log, first, n)
		tails = append(tails, s)
	}
	e.checkTailsGoOn(w, log, tails, "after a truncation")

	// Truncated to its last message, the log keeps exactly that one.
	lastIdx := log.len() - 1
	require.NoError(t, e.truncate(w, log.ids[lastIdx]))
	tails = tails[:0]
	for _, n := range []int{1, 2, k} {
		s, err := e.tryRead(w, walimpls.ReadOption{Name: "tail-after-truncate-to-last", DeliverPolicy: cursor.Tail(n)})
		require.NoErrorf(t, err, "DeliverTail(%d) after a truncation to the last message", n)
		e.checkTail(s, log, lastIdx, n)
		tails = append(tails, s)
	}
	e.expectInvalidTail(w)
	e.checkTailsGoOn(w, log, tails, "after a truncation to the last message")
}

// tailLog is what the cursor.Tail part stored, in ID order.
type tailLog struct {
	ids  []message.ID
	msgs []message.Message
}

func newTailLog() *tailLog { return &tailLog{} }

func (l *tailLog) add(ids []message.ID, msgs []message.Message) {
	l.ids = append(l.ids, ids...)
	l.msgs = append(l.msgs, msgs...)
}

func (l *tailLog) len() int         { return len(l.ids) }
func (l *tailLog) last() message.ID { return l.ids[len(l.ids)-1] }

// checkTail reads what a cursor.Tail(n) scanner delivers of the messages
// stored before its Read, whose first kept one is log.ids[first]: a
// contiguous run of them in ID order, from the first message it delivers to
// the last message stored, holding at least min(n, kept) messages, none of
// them truncated, each the message stored.
func (e *env) checkTail(s walimpls.Scanner, log *tailLog, first, n int) {
	t := e.t
	t.Helper()
	what := fmt.Sprintf("DeliverTail(%d) of a log of %d messages (first kept: %s, last: %s)", n, log.len()-first, log.ids[first], log.last())
	m := e.recvWithin(s, e.opts.waitTimeout, what+": its first message")
	start := -1
	for i, id := range log.ids {
		if id.EQ(m.ID()) {
			start = i
			break
		}
	}
	require.GreaterOrEqualf(t, start, 0, "%s delivered %s first, which is no message of the log", what, m.ID())
	require.GreaterOrEqualf(t, start, first, "%s started at %s, a truncated message", what, m.ID())
	want := min(n, log.len()-first)
	require.GreaterOrEqualf(t, log.len()-start, want,
		"%s started at %s, message %d of %d: it delivers only the last %d, fewer than the %d it must", what, m.ID(), start-first+1, log.len()-first, log.len()-start, want)
	got := append([]message.Immutable{m}, e.recv(s, log.len()-1-start)...)
	checkSequence(t, log.ids[start:], log.msgs[start:], got)
}

// checkTailsGoOn appends one message and one batch and checks that every
// scanner, having delivered the log up to its end, delivers them next: a
// cursor.Tail scanner tails like any other, and delivered nothing else in
// between.
func (e *env) checkTailsGoOn(w walimpls.WALImpl, log *tailLog, tails []walimpls.Scanner, when string) {
	t := e.t
	t.Helper()
	tag := fmt.Sprintf("tail-next-%d", log.len())
	single := simpleMessages(t, tag+"-single", 1)
	batch := simpleMessages(t, tag+"-batch", 2)
	ids := append(e.appendAll(w, single), e.appendBatchOK(w, batch)...)
	require.Truef(t, log.last().LT(ids[0]), "an append %s: id %s does not follow the last one %s", when, ids[0], log.last())
	msgs := append(single, batch...)
	log.add(ids, msgs)
	for i, s := range tails {
		got := e.recv(s, len(ids))
		for j := range got {
			require.Truef(t, got[j].ID().EQ(ids[j]), "DeliverTail scanner %d %s: message %d appended after its tail: want %s, got %s", i, when, j, ids[j], got[j].ID())
		}
		checkSequence(t, ids, msgs, got)
	}
}

// expectInvalidTail checks that cursor.Tail(n) with n < 1 is refused by Read
// with ErrInvalidPosition, and stores nothing.
func (e *env) expectInvalidTail(w walimpls.WALImpl) {
	t := e.t
	t.Helper()
	before, err := e.last(w)
	require.NoError(t, err)
	for _, n := range []int{0, -1} {
		s, err := e.tryRead(w, walimpls.ReadOption{Name: "tail-invalid", DeliverPolicy: cursor.Tail(n)})
		require.ErrorIsf(t, err, walimpls.ErrInvalidPosition, "read DeliverTail(%d)", n)
		require.Nil(t, s)
	}
	e.checkLastIs(w, before, "after refused DeliverTail reads")
}

// checkLastIs checks that w's last message is want (the zero ID for none).
func (e *env) checkLastIs(w walimpls.WALImpl, want message.ID, when string) {
	t := e.t
	t.Helper()
	last, err := e.last(w)
	require.NoError(t, err)
	// Zero IDs do not compare: an empty channel must stay empty.
	same := last.EQ(want) || (want.IsZero() && last.IsZero())
	require.Truef(t, same, "Last %s: want %s, got %s", when, want, last)
}

// appendBatchOK appends msgs as one batch, bounded by the wait timeout, and
// returns their IDs.
func (e *env) appendBatchOK(w walimpls.WALImpl, msgs []message.Message) []message.ID {
	t := e.t
	t.Helper()
	ids, err := within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) { return w.AppendBatch(ctx, msgs) })
	require.NoError(t, err, "append a batch of %d", len(msgs))
	require.Len(t, ids, len(msgs), "ids of a batch of %d", len(msgs))
	for i := 1; i < len(ids); i++ {
		require.Truef(t, ids[i-1].LT(ids[i]), "batch message %d: id %s does not follow %s", i, ids[i], ids[i-1])
	}
	return ids
}
