package walimplstest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func testLifecycle(t *testing.T, e *env) {
	o := e.opener()
	require.Equal(t, e.caps, o.Capabilities(), "capabilities of two nodes differ")

	bad := []walimpls.Channel{
		{Name: ""},
		{Name: "has space"},
		{Name: "a/b"},
		{Name: ".."},
		{Name: strings.Repeat("x", walimpls.MaxChannelNameLen+1)},
		{Name: "ok", Term: -1},
		{Name: "ok", Mode: walimpls.AccessMode(9)},
	}
	for _, ch := range bad {
		w, err := o.Open(e.ctx, ch)
		require.ErrorIsf(t, err, walimpls.ErrInvalidChannel, "open %+v", ch)
		require.Nil(t, w)
	}

	ch := walimpls.Channel{Name: channelName("life"), Term: 7}
	w, err := o.Open(e.ctx, ch)
	require.NoError(t, err)
	require.NotEmpty(t, w.WALName())
	require.Equal(t, ch, w.Channel())

	var want []message.Message
	id, err := w.Append(e.ctx, message.Message{})
	require.NoError(t, err, "append an empty message")
	ids := []message.ID{id}
	want = append(want, message.Message{})
	require.Equal(t, w.WALName(), id.Backend(), "an id names the backend that issued it")

	if limit := e.caps.MaxMessageBytes; limit > 0 {
		big := mustMessage(t, make([]byte, limit+1), nil)
		_, err := w.Append(e.ctx, big)
		require.ErrorIsf(t, err, walimpls.ErrTooLarge, "append of %d bytes above the declared limit %d", big.Size(), limit)
	}
	ok := mustMessage(t, []byte("after"), nil)
	id, err = w.Append(e.ctx, ok)
	require.NoError(t, err, "append after a refused one")
	ids = append(ids, id)
	want = append(want, ok)
	checkSequence(t, ids, want, e.recv(e.read(w, walimpls.DeliverAll()), 2))

	foreign := message.NewSeqID("walimplstest-foreign", 1)
	for _, pos := range []message.ID{foreign, {}} {
		_, err := w.Read(e.ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverStartFrom(pos)})
		require.ErrorIsf(t, err, walimpls.ErrInvalidPosition, "read from %s", pos)
		require.ErrorIsf(t, w.Truncate(e.ctx, pos), walimpls.ErrInvalidPosition, "truncate to %s", pos)
	}

	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "second Close")
	_, err = w.Append(e.ctx, ok)
	require.ErrorIs(t, err, walimpls.ErrClosed, "append after Close")
	_, err = w.Read(e.ctx, walimpls.ReadOption{})
	require.ErrorIs(t, err, walimpls.ErrClosed, "read after Close")
	require.ErrorIs(t, w.Truncate(e.ctx, ids[0]), walimpls.ErrClosed, "truncate after Close")

	// The same owner may reopen its channel, and finds what it wrote.
	w2 := e.open(o, ch.Name, ch.Term, walimpls.ReadWrite)
	checkSequence(t, ids, want, e.recv(e.read(w2, walimpls.DeliverAll()), 2))
	require.NoError(t, w2.Close())

	require.NoError(t, o.Close())
	require.NoError(t, o.Close(), "second Opener.Close")
	_, err = o.Open(e.ctx, ch)
	require.ErrorIs(t, err, walimpls.ErrClosed, "open after Opener.Close")
}

func testReadOnly(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("ro")
	w := e.open(o, name, 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "ro", 6)
	ids := e.appendAll(w, msgs[:3])

	// A read-only open fences nobody, whatever its term.
	ro := e.open(e.opener(), name, 5, walimpls.ReadOnly)
	require.Equal(t, walimpls.ReadOnly, ro.Channel().Mode)
	_, err := ro.Append(e.ctx, msgs[3])
	require.ErrorIs(t, err, walimpls.ErrReadOnly)
	require.ErrorIs(t, ro.Truncate(e.ctx, ids[0]), walimpls.ErrReadOnly)

	s := e.read(ro, walimpls.DeliverAll())
	checkSequence(t, ids, msgs[:3], e.recv(s, 3))
	ids = append(ids, e.appendAll(w, msgs[3:])...)
	checkSequence(t, ids[3:], msgs[3:], e.recv(s, 3))
	e.quiet(s)
}

func testContext(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("ctx")
	w := e.open(o, name, 1, walimpls.ReadWrite)
	id := e.appendAll(w, simpleMessages(t, "ctx", 1))[0]

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -1)
	defer cancel2()

	_, err := o.Open(cancelled, walimpls.Channel{Name: name + "-2", Term: 1})
	require.ErrorIs(t, err, context.Canceled, "open with a cancelled context")

	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		done := make(chan error, 1)
		go func() {
			_, err := w.Append(c.ctx, mustMessage(t, []byte("x"), nil))
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, c.want, "append with a done context")
		case <-time.After(e.opts.waitTimeout / 6):
			require.FailNow(t, "append with a done context did not return promptly")
		}
		_, err = w.Read(c.ctx, walimpls.ReadOption{})
		require.ErrorIs(t, err, c.want, "read with a done context")
		require.ErrorIs(t, w.Truncate(c.ctx, id), c.want, "truncate with a done context")
	}

	// The WAL is still usable afterwards.
	msgs := simpleMessages(t, "ctx-after", 2)
	e.appendAll(w, msgs)
}
