package pulsar

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// lastOK calls Last and fails the test on an error.
func lastOK(t *testing.T, w walimpls.WALImpl) message.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := w.Last(ctx)
	require.NoError(t, err)
	return id
}

// maxID returns the highest of ids.
func maxID(ids map[string]message.ID) message.ID {
	var top message.ID
	for _, id := range ids {
		if top.IsZero() || top.LT(id) {
			top = id
		}
	}
	return top
}

// TestLast pins Last: the zero ID on a channel that never held a message,
// then exactly the ID of the last append, also when it sits inside a batch
// entry (GET_LAST_MESSAGE_ID names it by batch index), on a read-only WAL
// of another node, across an unload that moves the topic to an empty
// ledger, after a truncation to the last message, and on a fenced WAL.
func TestLast(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	o := newOpener(t, cfg)
	w := open(t, o, "last", 1, walimpls.ReadWrite)
	ro := open(t, newOpener(t, cfg), "last", 0, walimpls.ReadOnly)
	require.True(t, lastOK(t, w).IsZero(), "a channel that never held a message")
	require.True(t, lastOK(t, ro).IsZero())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := o.Open(ctx, walimpls.Channel{Name: "never", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "a read-only open of a channel never opened creates nothing")

	first := appendOK(t, w, msg(t, "first", nil))
	require.True(t, lastOK(t, w).EQ(first), "want %s, got %s", first, lastOK(t, w))

	// Concurrent appends share batch entries: when the last append sits
	// in an entry with others, the broker names it by its batch index.
	// Bursts of concurrent appends until one ends that way.
	var top message.ID
	for burst := 0; ; burst++ {
		require.Less(t, burst, 50, "no burst of appends ended inside a batch entry")
		acked := appendConcurrently(t, w, 16, 1, fmt.Sprintf("b%d", burst))
		top = maxID(acked)
		for _, x := range []walimpls.WALImpl{w, ro} {
			got := lastOK(t, x)
			require.Truef(t, got.EQ(top), "want %s, got %s", top, got)
		}
		p, _ := idOf(top)
		if p.batch > 0 {
			t.Logf("last id %s after %d bursts", top, burst+1)
			break
		}
	}

	// An unload moves the topic to a new, empty ledger: the last message
	// is still the last one stored.
	require.NoError(t, b.UnloadTopic(topicOf(cfg, "last")))
	require.True(t, lastOK(t, w).EQ(top))
	next := appendOK(t, w, msg(t, "after-unload", nil))
	require.True(t, top.LT(next))
	require.True(t, lastOK(t, ro).EQ(next))

	// Truncate keeps the last message.
	require.NoError(t, w.Truncate(context.Background(), next))
	require.True(t, lastOK(t, w).EQ(next))

	// A fenced WAL still answers; a closed one is ErrClosed.
	w2 := open(t, newOpener(t, cfg), "last", 2, walimpls.ReadWrite)
	_, err = walimpls.Append(context.Background(), w, msg(t, "stale", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	latest := appendOK(t, w2, msg(t, "owner", nil))
	require.True(t, lastOK(t, w).EQ(latest), "Last of a fenced WAL")
	require.NoError(t, w.Close())
	_, err = w.Last(context.Background())
	require.ErrorIs(t, err, walimpls.ErrClosed)
}

// TestLastContext: Last honours its context, before and during the call.
func TestLastContext(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b, cfg := startBroker(t, pulsartest.Config{Clock: clock})
	w := open(t, newOpener(t, cfg), "lastctx", 1, walimpls.ReadWrite)
	id := appendOK(t, w, msg(t, "a", nil))

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := w.Last(cancelled)
	require.ErrorIs(t, err, context.Canceled)

	// A broker that does not answer: Last returns when its context ends.
	// A delayed receipt holds back every frame behind it on its
	// connection, until the broker's clock (a fake one, which only the
	// test moves) passes its time; the truncation record a Truncate writes
	// goes through the opener's shared client, as does the reader Last
	// asks through.
	meta := topicOf(cfg, "lastctx") + metaSuffix
	before, err := b.Stats(meta)
	require.NoError(t, err)
	const delay = time.Minute
	require.NoError(t, b.DelayReceipts(delay))
	truncated := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		truncated <- w.Truncate(ctx, id)
	}()
	require.Eventually(t, func() bool {
		st, err := b.Stats(meta)
		return err == nil && st.Entries == before.Entries+1
	}, 10*time.Second, time.Millisecond, "the truncation record is stored, its receipt held back")
	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	last := make(chan error, 1)
	go func() {
		_, err := w.Last(ctx)
		last <- err
	}()
	select {
	case err := <-last:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		// The broker answers only once the clock moves: a Last that
		// ignores its context never returns.
		require.FailNow(t, "watchdog: Last does not return when its context ends")
	}
	require.NoError(t, b.DelayReceipts(0))
	clock.Advance(delay)
	require.NoError(t, <-truncated)
	require.True(t, lastOK(t, w).EQ(id), "the abandoned call left the WAL usable")
}
