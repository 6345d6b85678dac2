package adaptor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func TestCheckpointRoundTripAndResume(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "cp", 1, Options{TimeTickInterval: time.Hour})
	ctx := context.Background()
	const n = 40
	for i := range n {
		m, _ := message.New(fmt.Appendf(nil, "m%02d", i), nil)
		_, err := w.Append(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, w.Sync(ctx))
	s, err := w.Read(ctx, ReadOption{})
	require.NoError(t, err)
	all := recvN(t, s, n)
	require.NoError(t, s.Close())

	var prev cursor.Checkpoint
	for i, m := range all {
		cp, err := cursor.CheckpointOf(m)
		require.NoError(t, err)
		require.True(t, prev.Before(cp), "checkpoints of delivered messages increase: %s then %s", prev, cp)
		prev = cp
		text := cp.Marshal()
		back, err := w.ParseCheckpoint(text)
		require.NoError(t, err)
		n, err := back.Compare(cp)
		require.NoError(t, err)
		require.Zerof(t, n, "%q round-trips to %s, want %s", text, back, cp)
		require.Equal(t, text, back.Marshal())
		if i%9 != 0 {
			continue
		}
		r, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.After(back)})
		require.NoError(t, err)
		rest := recvN(t, r, len(all)-i-1)
		for j, got := range rest {
			require.Equal(t, string(all[i+1+j].Payload()), string(got.Payload()), "resumed after message %d", i)
		}
		quietFor(t, r, 50*time.Millisecond)
		require.NoError(t, r.Close())
	}

	zero, err := w.ParseCheckpoint("")
	require.NoError(t, err)
	require.True(t, zero.IsZero())
	require.Empty(t, zero.Marshal())
	require.True(t, zero.Before(prev))
	r, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.After(zero)})
	require.NoError(t, err)
	require.Len(t, recvN(t, r, n), n, "the zero checkpoint reads everything")
	require.NoError(t, r.Close())

	for _, bad := range []string{"@", "12", "x@3", "0@3", "01@3", "+1@3", "12@", "12@x", "12@-1", " 12@3"} {
		_, err := w.ParseCheckpoint(bad)
		require.ErrorIsf(t, err, cursor.ErrCorruptCheckpoint, "%q", bad)
	}
	_, err = cursor.CheckpointOf(message.NewImmutable(message.Message{}, message.NewSeqID("memory", 1)))
	require.ErrorIs(t, err, cursor.ErrNoResumePosition)
}

// A watermark written between the parts of a split message releases an
// earlier small message; resuming after that small message must still find
// the split message's first part. The log is written by hand so that the
// watermark lands exactly there.
func TestResumeBeforeAHalfJoinedMessage(t *testing.T) {
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{})
	ctx := context.Background()
	raw, err := o.Open(ctx, walimpls.Channel{Name: "half", Term: 1})
	require.NoError(t, err)
	data := func(payload string, tt uint64) message.Message {
		m, _ := message.New([]byte(payload), nil)
		return m.WithKind(message.KindData).WithTerm(1).WithTimeTick(tt)
	}
	wm := func(tt uint64) message.Message {
		return message.Message{}.WithKind(message.KindTimeTick).WithTerm(1).WithTimeTick(tt)
	}
	big, _ := message.New(make([]byte, 1000), nil)
	parts, err := splitMessage(big.WithKind(message.KindData).WithTerm(1).WithTimeTick(20), 600)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(parts), 2)
	log := []message.Message{message.Message{}.WithKind(message.KindTermBegin).WithTerm(1), data("small", 5), parts[0], wm(10)}
	log = append(log, parts[1:]...)
	log = append(log, data("later", 25), wm(30))
	for _, m := range log {
		_, err := walimpls.Append(ctx, raw, m)
		require.NoError(t, err)
	}
	require.NoError(t, raw.Close())

	ro := openWAL(t, o, "half", 0, Options{ReadOnly: true})
	s, err := ro.Read(ctx, ReadOption{})
	require.NoError(t, err)
	all := recvN(t, s, 3)
	require.NoError(t, s.Close())
	require.Equal(t, "small", string(all[0].Payload()))
	require.Len(t, all[1].Payload(), 1000, "the joined message")
	cp, err := cursor.CheckpointOf(all[0])
	require.NoError(t, err)
	r, err := ro.Read(ctx, ReadOption{DeliverPolicy: cursor.After(cp)})
	require.NoError(t, err)
	rest := recvN(t, r, 2)
	require.Len(t, rest[0].Payload(), 1000, "resumed after the small message: the split message is found")
	require.Equal(t, "later", string(rest[1].Payload()))
	require.NoError(t, r.Close())
}

// Tail makes everything acknowledged readable and says where the log
// stands: a scanner has delivered all of it once it delivers a watermark at
// or above the tail, and cursor.After(tail) delivers exactly what follows.
func TestTailIsACaughtUpSignal(t *testing.T) {
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{})
	w := openWAL(t, o, "tail", 1, Options{TimeTickInterval: time.Hour})
	ro := openWAL(t, o, "tail", 0, Options{ReadOnly: true})
	ctx := context.Background()
	_, err := ro.Tail(ctx)
	require.ErrorIs(t, err, walimpls.ErrReadOnly)

	const before = 50
	for i := range before {
		m, _ := message.New(fmt.Appendf(nil, "before-%d", i), nil)
		w.AppendAsync(ctx, m, nil)
	}
	tail := mustAppendAllThenTail(t, w, before)

	s, err := ro.Read(ctx, ReadOption{Filter: Filter{Kinds: []message.Kind{message.KindData, message.KindTimeTick}}})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	data := 0
	for m := range s.Chan() {
		if CaughtUp(m, tail) {
			break
		}
		if m.Kind() == message.KindData {
			data++
		}
	}
	require.Equal(t, before, data, "caught up after every message acknowledged before the tail")

	after, _ := message.New([]byte("after"), nil)
	_, err = w.Append(ctx, after)
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))
	r, err := ro.Read(ctx, ReadOption{DeliverPolicy: cursor.After(tail)})
	require.NoError(t, err)
	require.Equal(t, "after", string(recvN(t, r, 1)[0].Payload()))
	quietFor(t, r, 50*time.Millisecond)
	require.NoError(t, r.Close())
}

// mustAppendAllThenTail waits until n appends are acknowledged (the WAL's
// Sync waits for them) and takes the tail.
func mustAppendAllThenTail(t *testing.T, w WAL, n int) cursor.Checkpoint {
	t.Helper()
	tail, err := w.Tail(context.Background())
	require.NoError(t, err)
	require.False(t, tail.IsZero())
	return tail
}
