package walimplstest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	live := e.read(w, walimpls.DeliverStartFrom(ids[1]))

	require.NoError(t, w.Truncate(e.ctx, ids[5]))
	e.expectGone(w, walimpls.DeliverStartFrom(ids[0]))
	e.expectGone(w, walimpls.DeliverStartFrom(ids[4]))
	e.expectGone(w, walimpls.DeliverStartAfter(ids[3]))

	from := e.read(w, walimpls.DeliverStartFrom(ids[5]))
	checkSequence(t, ids[5:], msgs[5:10], e.recv(from, 5))
	all := e.read(w, walimpls.DeliverAll())
	checkSequence(t, ids[5:], msgs[5:10], e.recv(all, 5))
	after := e.read(w, walimpls.DeliverStartAfter(ids[5]))
	checkSequence(t, ids[6:], msgs[6:10], e.recv(after, 4))

	// Truncating again to the same or an earlier point changes nothing.
	require.NoError(t, w.Truncate(e.ctx, ids[5]), "truncate twice to the same point")
	require.NoError(t, w.Truncate(e.ctx, ids[2]), "truncate below the current point")
	checkSequence(t, ids[5:], msgs[5:10], e.recv(e.read(w, walimpls.DeliverAll()), 5))

	// Appends go on after a truncation, with larger IDs.
	ids = append(ids, e.appendAll(w, msgs[10:])...)
	require.True(t, ids[9].LT(ids[10]))
	checkSequence(t, ids[10:], msgs[10:], e.recv(all, 2))

	e.checkNoSkip(live, ids[1:])
	e.futurePosition(o, name)
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
				<-s.Done()
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

// futurePosition checks positions beyond the end of a channel: an ID taken
// from a longer channel of the same backend. Reading from it waits without
// delivering what is below it; truncating to it is ErrInvalidPosition and
// removes nothing.
func (e *env) futurePosition(o walimpls.Opener, name string) {
	t := e.t
	short := e.open(o, name+"-short", 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "short", 3)
	ids := e.appendAll(short, msgs)
	long := e.open(o, name+"-long", 1, walimpls.ReadWrite)
	future := e.appendAll(long, simpleMessages(t, "long", 20))[19]
	if !ids[2].LT(future) {
		t.Logf("skipping future positions: the last id of a 20-message channel (%s) is not beyond a 3-message one's (%s)", future, ids[2])
		return
	}
	s := e.read(short, walimpls.DeliverStartFrom(future))
	e.quiet(s)
	require.ErrorIs(t, short.Truncate(e.ctx, future), walimpls.ErrInvalidPosition, "truncate beyond the end")
	checkSequence(t, ids, msgs, e.recv(e.read(short, walimpls.DeliverAll()), 3))
}
