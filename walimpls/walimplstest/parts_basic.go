package walimplstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
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
		w, err := e.tryOpen(o, ch.Name, ch.Term, ch.Mode)
		require.ErrorIsf(t, err, walimpls.ErrInvalidChannel, "open %+v", ch)
		require.Nil(t, w)
	}

	ch := walimpls.Channel{Name: channelName("life"), Term: 7}
	w := e.open(o, ch.Name, ch.Term, ch.Mode)
	require.NotEmpty(t, w.WALName())
	require.Equal(t, ch, w.Channel())

	var want []message.Message
	id, err := e.appendOne(w, message.Message{})
	require.NoError(t, err, "append an empty message")
	ids := []message.ID{id}
	want = append(want, message.Message{})
	require.Equal(t, w.WALName(), id.Backend(), "an id names the backend that issued it")

	if limit := e.caps.MaxMessageBytes; limit > 0 {
		big := mustMessage(t, make([]byte, limit+1), nil)
		_, err := e.appendOne(w, big)
		require.ErrorIsf(t, err, walimpls.ErrTooLarge, "append of %d bytes above the declared limit %d", big.Size(), limit)
		require.Truef(t, walimpls.NotStored(err), "a refused oversized append is NotStored: %v", err)
	}
	ok := mustMessage(t, []byte("after"), nil)
	id, err = e.appendOne(w, ok)
	require.NoError(t, err, "append after a refused one")
	ids = append(ids, id)
	want = append(want, ok)
	checkSequence(t, ids, want, e.recv(e.read(w, cursor.All()), 2))

	foreign := message.NewSeqID("walimplstest-foreign", 1)
	for _, pos := range []message.ID{foreign, {}} {
		_, err := e.tryRead(w, walimpls.ReadOption{DeliverPolicy: cursor.StartFrom(pos)})
		require.ErrorIsf(t, err, walimpls.ErrInvalidPosition, "read from %s", pos)
		require.ErrorIsf(t, e.truncate(w, pos), walimpls.ErrInvalidPosition, "truncate to %s", pos)
	}

	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "second Close")
	e.checkClosed(w, ids[0], "after Close")

	// The same owner may reopen its channel, and finds what it wrote.
	w2 := e.open(o, ch.Name, ch.Term, walimpls.ReadWrite)
	checkSequence(t, ids, want, e.recv(e.read(w2, cursor.All()), 2))
	require.NoError(t, w2.Close())

	require.NoError(t, o.Close())
	require.NoError(t, o.Close(), "second Opener.Close")
	_, err = e.tryOpen(o, ch.Name, ch.Term, ch.Mode)
	require.ErrorIs(t, err, walimpls.ErrClosed, "open after Opener.Close")
}

// checkClosed checks that every call of a closed WAL is ErrClosed.
func (e *env) checkClosed(w walimpls.WALImpl, kept message.ID, when string) {
	t := e.t
	t.Helper()
	_, err := e.appendOne(w, mustMessage(t, []byte("closed"), nil))
	require.ErrorIsf(t, err, walimpls.ErrClosed, "append %s", when)
	require.Truef(t, walimpls.NotStored(err), "an append refused %s is NotStored: %v", when, err)
	_, err = e.tryRead(w, walimpls.ReadOption{})
	require.ErrorIsf(t, err, walimpls.ErrClosed, "read %s", when)
	require.ErrorIsf(t, e.truncate(w, kept), walimpls.ErrClosed, "truncate %s", when)
	_, err = e.last(w)
	require.ErrorIsf(t, err, walimpls.ErrClosed, "last %s", when)
}

// testOpenerClose checks that closing an opener closes the WALs it opened,
// and ends their scanners, while WALs of other openers go on.
func testOpenerClose(t *testing.T, e *env) {
	o, other := e.opener(), e.opener()
	name := channelName("oclose")
	w := e.open(o, name, 1, walimpls.ReadWrite)
	ids := e.appendAll(w, simpleMessages(t, "oc", 3))
	s := e.read(w, cursor.Latest())
	ro := e.open(o, name, 0, walimpls.ReadOnly)

	require.NoError(t, e.do("Opener.Close", func(context.Context) error { return o.Close() }))
	e.checkClosed(w, ids[0], "after its Opener.Close")
	e.checkClosed(ro, ids[0], "of a read-only WAL after its Opener.Close")
	e.waitClosed(s)
	if err := s.Error(); err != nil {
		require.ErrorIs(t, err, walimpls.ErrClosed, "a scanner ended by its opener's Close")
	}

	// Another node still reads and writes the channel.
	w2 := e.open(other, name, 2, walimpls.ReadWrite)
	more := simpleMessages(t, "oc2", 2)
	ids = append(ids, e.appendAll(w2, more)...)
	got := e.recv(e.read(w2, cursor.All()), 5)
	for i := range got {
		require.Truef(t, got[i].ID().EQ(ids[i]), "message %d: want %s, got %s", i, ids[i], got[i].ID())
	}
}

// testChannelNames checks the longest valid name and that names are
// case-sensitive: channels whose names differ only in case are independent.
func testChannelNames(t *testing.T, e *env) {
	o := e.opener()
	base := channelName("names")
	long := base + "-" + strings.Repeat("Lx", walimpls.MaxChannelNameLen)
	long = long[:walimpls.MaxChannelNameLen]
	w := e.open(o, long, 1, walimpls.ReadWrite)
	require.Equal(t, long, w.Channel().Name)
	msgs := simpleMessages(t, "long", 2)
	ids := e.appendAll(w, msgs)
	checkSequence(t, ids, msgs, e.recv(e.read(w, cursor.All()), 2))

	names := []string{base + "-Case", base + "-case", base + "-CASE"}
	wals := make([]walimpls.WALImpl, len(names))
	for i, name := range names {
		wals[i] = e.open(o, name, 1, walimpls.ReadWrite)
	}
	all := make([][]message.ID, len(names))
	sent := make([][]message.Message, len(names))
	for round := range 3 {
		for i, name := range names {
			m := mustMessage(t, []byte(fmt.Sprintf("%s-%d", name, round)), map[string]string{"channel": name})
			all[i] = append(all[i], e.appendAll(wals[i], []message.Message{m})...)
			sent[i] = append(sent[i], m)
		}
	}
	for i := range names {
		s := e.read(wals[i], cursor.All())
		checkSequence(t, all[i], sent[i], e.recv(s, 3))
		e.quiet(s)
	}
	// Each channel's term is its own: a higher term on one of them fences
	// nobody on the others.
	e.open(e.opener(), names[0], 5, walimpls.ReadWrite)
	for i := 1; i < len(names); i++ {
		_, err := e.appendOne(wals[i], mustMessage(t, []byte("still mine"), nil))
		require.NoErrorf(t, err, "a higher term on %q fenced %q", names[0], names[i])
	}
}

// testSizeLimit checks that the declared limit counts properties as well as
// the payload, exactly: a message of MaxMessageBytes made mostly of
// properties is stored byte for byte, one byte more is ErrTooLarge.
func testSizeLimit(t *testing.T, e *env) {
	limit := e.caps.MaxMessageBytes
	if limit == 0 {
		t.Skip("backend declares Capabilities.MaxMessageBytes=0: no size limit to check")
	}
	o := e.opener()
	w := e.open(o, channelName("size"), 1, walimpls.ReadWrite)

	exact := sizedMessage(t, limit, limit/8)
	over := sizedMessage(t, limit+1, limit/8)
	require.Equal(t, limit, exact.Size())
	require.Equal(t, limit+1, over.Size())
	for _, payload := range []int{limit / 8, 0, 1} {
		m := sizedMessage(t, limit+1, payload)
		_, err := e.appendOne(w, m)
		require.ErrorIsf(t, err, walimpls.ErrTooLarge, "a message of limit+1 = %d bytes (%d of them properties) was accepted", m.Size(), m.Size()-payload)
	}
	id, err := e.appendOne(w, exact)
	require.NoErrorf(t, err, "a message of exactly the declared limit (%d bytes, %d of them properties)", limit, limit-limit/8)
	exactPayload := sizedMessage(t, limit, limit-64)
	id2, err := e.appendOne(w, exactPayload)
	require.NoError(t, err, "a message of exactly the declared limit, mostly payload")
	got := e.recv(e.read(w, cursor.All()), 2)
	checkSequence(t, []message.ID{id, id2}, []message.Message{exact, exactPayload}, got)
}

// sizedMessage returns a message of exactly size bytes (Message.Size) with
// a payload of payload bytes and the rest in four properties.
func sizedMessage(t *testing.T, size, payload int) message.Message {
	t.Helper()
	rest := size - payload
	props := map[string]string{}
	const n = 4
	for i := range n {
		key := fmt.Sprintf("p%d", i)
		vlen := rest/n - len(key)
		if i == n-1 {
			vlen = rest - (n-1)*(rest/n) - len(key)
		}
		require.GreaterOrEqual(t, vlen, 0)
		props[key] = strings.Repeat(string(rune('a'+i)), vlen)
	}
	m := mustMessage(t, make([]byte, payload), props)
	require.Equal(t, size, m.Size())
	return m
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
	_, err := e.appendOne(ro, msgs[3])
	require.ErrorIs(t, err, walimpls.ErrReadOnly)
	require.True(t, walimpls.NotStored(err))
	require.ErrorIs(t, e.truncate(ro, ids[0]), walimpls.ErrReadOnly)
	last, err := e.last(ro)
	require.NoError(t, err, "Last of a read-only WAL")
	require.Truef(t, last.EQ(ids[2]), "Last of a read-only WAL: want %s, got %s", ids[2], last)

	s := e.read(ro, cursor.All())
	checkSequence(t, ids, msgs[:3], e.recv(s, 3))
	ids = append(ids, e.appendAll(w, msgs[3:])...)
	checkSequence(t, ids[3:], msgs[3:], e.recv(s, 3))
	e.quiet(s)
	// Nothing the read-only WAL tried is in the log.
	checkSequence(t, ids, msgs, e.recv(e.read(w, cursor.All()), 6))
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

	_, err := within(e, "Open with a cancelled context", func(context.Context) (walimpls.WALImpl, error) {
		return o.Open(cancelled, walimpls.Channel{Name: name + "-2", Term: 1})
	})
	require.ErrorIs(t, err, context.Canceled, "open with a cancelled context")

	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		done := make(chan error, 1)
		go func() {
			_, err := walimpls.Append(c.ctx, w, mustMessage(t, []byte("x"), nil))
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, c.want, "append with a done context")
		case <-time.After(e.opts.waitTimeout / 6):
			require.FailNow(t, "append with a done context did not return promptly")
		}
		_, err = within(e, "Read with a done context", func(context.Context) (walimpls.Scanner, error) {
			return w.Read(c.ctx, walimpls.ReadOption{})
		})
		require.ErrorIs(t, err, c.want, "read with a done context")
		require.ErrorIs(t, e.do("Truncate with a done context", func(context.Context) error { return w.Truncate(c.ctx, id) }),
			c.want, "truncate with a done context")
		_, err = within(e, "Last with a done context", func(context.Context) (message.ID, error) { return w.Last(c.ctx) })
		require.ErrorIs(t, err, c.want, "last with a done context")
	}

	// The WAL is still usable afterwards.
	msgs := simpleMessages(t, "ctx-after", 2)
	e.appendAll(w, msgs)
}

// testReadOnlyCreatesNothing checks that a ReadOnly open never creates a
// channel: one of a name never opened ReadWrite, or of a deleted channel,
// is ErrNoChannel, and the name then opens ReadWrite as a new, empty
// channel at any term.
func testReadOnlyCreatesNothing(t *testing.T, e *env) {
	name := channelName("rocreate")
	_, err := e.tryOpen(e.opener(), name, 0, walimpls.ReadOnly)
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "a read-only open of a channel never opened")

	o := e.opener()
	w := e.open(o, name, 3, walimpls.ReadWrite)
	e.appendAll(w, simpleMessages(t, "rocreate", 2))
	// On o, whose Delete finishes it: readers of other openers are the
	// caller's to stop before a Delete (see Deleting a channel).
	ro := e.open(o, name, 0, walimpls.ReadOnly)
	last, err := e.last(ro)
	require.NoError(t, err)
	require.False(t, last.IsZero(), "a read-only open of an existing channel sees its messages")

	require.NoError(t, e.do("Delete", func(ctx context.Context) error { return o.Delete(ctx, name) }))
	_, err = e.tryOpen(e.opener(), name, 0, walimpls.ReadOnly)
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "a read-only open of a deleted channel")
	_, err = e.tryOpen(e.opener(), name, 7, walimpls.ReadOnly)
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "a read-only open of a deleted channel, again")

	// Nothing was brought back: the name opens as a new channel.
	w2 := e.open(e.opener(), name, 1, walimpls.ReadWrite)
	last, err = e.last(w2)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "the deleted channel came back: Last is %s", last)
}
