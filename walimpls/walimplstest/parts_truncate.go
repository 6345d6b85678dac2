package walimplstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func testTruncate(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("trunc")
	w := e.open(o, name, 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "trunc", 12)
	ids := e.appendAll(w, msgs[:10])

	// A live scanner positioned below the truncation point, not yet
	// consuming: after the truncation it may still deliver what it had, but
	// never skip over the gap.
	live := e.read(w, cursor.StartFrom(ids[1]))

	require.NoError(t, e.truncate(w, ids[5]))
	e.expectGone(w, cursor.StartFrom(ids[0]))
	e.expectGone(w, cursor.StartFrom(ids[4]))
	e.expectGone(w, cursor.StartAfter(ids[3]))

	from := e.read(w, cursor.StartFrom(ids[5]))
	checkSequence(t, ids[5:], msgs[5:10], e.recv(from, 5))
	all := e.read(w, cursor.All())
	checkSequence(t, ids[5:], msgs[5:10], e.recv(all, 5))
	after := e.read(w, cursor.StartAfter(ids[5]))
	checkSequence(t, ids[6:], msgs[6:10], e.recv(after, 4))
	// StartAfter(the last removed message) starts at the first one kept.
	afterRemoved := e.read(w, cursor.StartAfter(ids[4]))
	checkSequence(t, ids[5:], msgs[5:10], e.recv(afterRemoved, 5))

	// Truncating again to the same or an earlier point changes nothing.
	require.NoError(t, e.truncate(w, ids[5]), "truncate twice to the same point")
	require.NoError(t, e.truncate(w, ids[2]), "truncate below the current point")
	checkSequence(t, ids[5:], msgs[5:10], e.recv(e.read(w, cursor.All()), 5))

	// Appends go on after a truncation, with larger IDs.
	ids = append(ids, e.appendAll(w, msgs[10:])...)
	require.True(t, ids[9].LT(ids[10]))
	checkSequence(t, ids[10:], msgs[10:], e.recv(all, 2))
	checkSequence(t, ids[10:], msgs[10:], e.recv(afterRemoved, 2))

	e.checkNoSkip(live, ids[1:])
}

// checkNoSkip reads s, which started at want[0]: it must deliver a prefix of
// want, and if it ends before the whole of want, with ErrPositionGone.
func (e *env) checkNoSkip(s walimpls.Scanner, want []message.ID) {
	t := e.t
	t.Helper()
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	for i := 0; i < len(want); i++ {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				e.waitDone(s)
				require.ErrorIsf(t, s.Error(), walimpls.ErrPositionGone,
					"a scanner overtaken by a truncation ended after %d messages", i)
				return
			}
			require.Truef(t, m.ID().EQ(want[i]), "a scanner overtaken by a truncation skipped: delivered %s, want %s", m.ID(), want[i])
		case <-timer.C:
			require.FailNow(t, "watchdog: a scanner overtaken by a truncation neither delivered nor ended")
		}
	}
}

// testTruncateBoundaries checks that Truncate's boundaries are exact:
// truncating to the last message keeps it, truncating one past the end (or
// further) is ErrInvalidPosition and removes nothing.
func testTruncateBoundaries(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("tbound")
	a := e.open(o, name+"-a", 1, walimpls.ReadWrite)
	b := e.open(o, name+"-b", 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "tb", 6)
	idsA := e.appendAll(a, msgs[:5])
	idsB := e.appendAll(b, msgs)

	// Positions just past A's end: on a backend whose IDs count per
	// channel, B's sixth ID is the one A's next append would get; on one
	// whose IDs count across channels, B's first is.
	var beyond []message.ID
	for _, id := range []message.ID{idsB[0], idsB[5]} {
		if idsA[4].LT(id) {
			beyond = append(beyond, id)
		}
	}
	if len(beyond) == 0 {
		t.Logf("no position past the end found among %s and %s (IDs of another channel all order before %s)", idsB[0], idsB[5], idsA[4])
	}
	for _, id := range beyond {
		require.ErrorIsf(t, e.truncate(a, id), walimpls.ErrInvalidPosition, "truncate to %s, past the last message %s", id, idsA[4])
		checkSequence(t, idsA, msgs[:5], e.recv(e.read(a, cursor.All()), 5))
		last, err := e.last(a)
		require.NoError(t, err)
		require.Truef(t, last.EQ(idsA[4]), "Last after a refused truncation: want %s, got %s", idsA[4], last)
	}

	// Truncating to exactly the last message keeps it.
	require.NoError(t, e.truncate(a, idsA[4]), "truncate to the last message")
	s := e.read(a, cursor.All())
	checkSequence(t, idsA[4:], msgs[4:5], e.recv(s, 1))
	e.quiet(s)
	e.expectGone(a, cursor.StartFrom(idsA[3]))
	e.expectGone(a, cursor.StartAfter(idsA[2]))
	checkSequence(t, idsA[4:], msgs[4:5], e.recv(e.read(a, cursor.StartAfter(idsA[3])), 1))
	for _, id := range beyond {
		require.ErrorIsf(t, e.truncate(a, id), walimpls.ErrInvalidPosition, "truncate to %s after truncating to the last message", id)
	}
	// A's neighbour was never touched.
	checkSequence(t, idsB, msgs, e.recv(e.read(b, cursor.All()), 6))
}

const (
	// overtakeMessages and overtakeSize make a log that a scanner with a
	// read-ahead of one message cannot hold.
	overtakeMessages = 40
	overtakeSize     = 16 << 10
	// overtakeSlack is how many messages an overtaken scanner may still
	// deliver from its read-ahead (one message's worth of bytes, but
	// clients queue by message count).
	overtakeSlack = 16
)

// testTruncateOvertakesScanner checks a scanner that a truncation overtakes:
// it is positioned (it delivered its first message) with a read-ahead of
// one message, the log is truncated to its last message, and the scanner
// must end with ErrPositionGone after delivering at most what it had read
// ahead, never skipping to the kept message.
func testTruncateOvertakesScanner(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("overtake"), 1, walimpls.ReadWrite)
	size := min(overtakeSize, e.largePayloadSize())
	msgs := make([]message.Message, overtakeMessages)
	for i := range msgs {
		payload := make([]byte, size)
		copy(payload, fmt.Sprintf("overtaken-%d", i))
		msgs[i] = mustMessage(t, payload, map[string]string{"i": fmt.Sprint(i)})
	}
	ids := e.appendAll(w, msgs)

	s, err := e.tryRead(w, walimpls.ReadOption{Name: "overtaken", DeliverPolicy: cursor.StartFrom(ids[0]), ReadAheadBytes: size})
	require.NoError(t, err)
	// Precondition: the scanner runs and is positioned at its start.
	first := e.recv(s, 1)
	require.Truef(t, first[0].ID().EQ(ids[0]), "precondition: the scanner's first message is %s, want %s", first[0].ID(), ids[0])

	require.NoError(t, e.truncate(w, ids[overtakeMessages-1]))

	next := 1
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				e.waitDone(s)
				require.ErrorIsf(t, s.Error(), walimpls.ErrPositionGone,
					"a scanner overtaken by a truncation ended after %d messages without ErrPositionGone", next)
				return
			}
			require.Truef(t, m.ID().EQ(ids[next]), "an overtaken scanner skipped: delivered %s after %s, want %s", m.ID(), ids[next-1], ids[next])
			sameMessage(t, msgs[next], m.Message, fmt.Sprintf("message %d", next))
			next++
			require.LessOrEqualf(t, next-1, overtakeSlack,
				"precondition: the scanner delivered %d messages after the truncation, more than it may read ahead with ReadAheadBytes=%d: it was never overtaken, so the part cannot check it", next-1, size)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "an overtaken scanner delivered %d messages and then neither delivered nor ended", next)
		}
	}
}

// testFuturePosition checks positions beyond the end of a channel: an ID
// taken from a longer channel of the same backend. Reading from it waits,
// and delivers only messages at or after it once the channel reaches it;
// truncating to it is ErrInvalidPosition and removes nothing.
func testFuturePosition(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("future")
	short := e.open(o, name+"-short", 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "short", 3)
	ids := e.appendAll(short, msgs)
	long := e.open(o, name+"-long", 1, walimpls.ReadWrite)
	future := e.appendAll(long, simpleMessages(t, "long", 20))[19]
	if !ids[2].LT(future) {
		t.Skipf("no future position: the last id of a 20-message channel (%s) is not beyond a 3-message one's (%s)", future, ids[2])
	}
	fromFuture := e.read(short, cursor.StartFrom(future))
	afterFuture := e.read(short, cursor.StartAfter(future))
	e.quiet(fromFuture)
	e.quiet(afterFuture)
	require.ErrorIs(t, e.truncate(short, future), walimpls.ErrInvalidPosition, "truncate beyond the end")
	checkSequence(t, ids, msgs, e.recv(e.read(short, cursor.All()), 3))

	// Append until the channel reaches the position: the scanners deliver
	// nothing below it.
	var reached message.ID
	for i := 0; i < 200 && reached.IsZero(); i++ {
		id := e.appendAll(short, simpleMessages(t, fmt.Sprintf("grow-%d", i), 1))[0]
		if future.LTE(id) {
			reached = id
		}
	}
	if reached.IsZero() {
		t.Logf("200 appends did not reach the future position %s; nothing below it was delivered", future)
		e.quiet(fromFuture)
		return
	}
	got := e.recv(fromFuture, 1)
	require.Truef(t, got[0].ID().EQ(reached), "a scanner started at the future position %s delivered %s first, want %s (the first message at or after it)", future, got[0].ID(), reached)
	want := reached
	if reached.EQ(future) {
		want = e.appendAll(short, simpleMessages(t, "past", 1))[0]
		next := e.recv(fromFuture, 1)
		require.Truef(t, next[0].ID().EQ(want), "after the future position: want %s, got %s", want, next[0].ID())
	}
	got = e.recv(afterFuture, 1)
	require.Truef(t, got[0].ID().EQ(want), "a scanner started after the future position %s delivered %s first, want %s", future, got[0].ID(), want)
}
