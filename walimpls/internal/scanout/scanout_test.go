package scanout

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/message"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func msgs(o *Out, from, n int) []message.Immutable {
	out := o.Slice(n)
	for i := range n {
		out = append(out, message.NewImmutable(message.Message{}, message.NewSeqID("t", int64(from+i))))
	}
	return out
}

func seqs(ms []message.Immutable) []int64 {
	var out []int64
	for _, m := range ms {
		s, _ := message.SeqOf("t", m.ID())
		out = append(out, s)
	}
	return out
}

// One by one: every message is a send; a stop in the middle says how many
// went; the scratch slice is cleared and lent again.
func TestOneByOne(t *testing.T) {
	o := New(false, 0)
	require.False(t, o.Batched())
	require.Nil(t, o.Batches())
	got := make(chan []int64)
	go func() {
		var ms []message.Immutable
		for m := range o.Chan() {
			ms = append(ms, m)
		}
		got <- seqs(ms)
	}()
	stop := make(chan struct{})
	first := msgs(o, 0, 3)
	require.Equal(t, 3, o.Deliver(stop, first))
	require.Equal(t, message.Immutable{}, first[0], "delivered messages are not pinned")
	second := o.Slice(3)
	require.Equal(t, 0, len(second))
	require.Equal(t, 0, o.Deliver(stop, nil))
	require.Equal(t, 2, o.Deliver(stop, msgs(o, 3, 2)))
	o.Close()
	require.Equal(t, []int64{0, 1, 2, 3, 4}, <-got)

	// Nobody reads: a stop ends the delivery with what went (nothing).
	o = New(false, 0)
	close(stop)
	require.Equal(t, 0, o.Deliver(stop, msgs(o, 0, 2)))
	o.Close()
}

// Batches: a slice per Deliver, handed over whole, never lent again.
func TestBatches(t *testing.T) {
	o := New(true, 1)
	require.True(t, o.Batched())
	require.Nil(t, o.Chan())
	a := msgs(o, 0, 2)
	stop := make(chan struct{})
	require.Equal(t, 2, o.Deliver(stop, a)) // buffered
	b := o.Slice(2)
	require.NotSame(t, &a[:1][0], &b[:1][0], "a delivered slice is never lent again")
	require.Equal(t, 0, o.Deliver(stop, b), "an empty slice is not sent")
	require.Same(t, &b[:1][0], &o.Slice(2)[:1][0], "a slice not handed over is lent again")
	close(stop)
	require.Equal(t, 0, o.Deliver(stop, msgs(o, 2, 2)), "the buffer is full and the scanner stops")
	o.Close()
	var got [][]int64
	for batch := range o.Batches() {
		got = append(got, seqs(batch))
	}
	require.Equal(t, [][]int64{{0, 1}}, got)
}
