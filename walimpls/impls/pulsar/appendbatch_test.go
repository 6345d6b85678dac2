package pulsar

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func batchOf(t testing.TB, tag string, n int) []message.Message {
	msgs := make([]message.Message, n)
	for i := range msgs {
		msgs[i] = msg(t, fmt.Sprintf("%s-%d", tag, i), map[string]string{"i": fmt.Sprint(i)})
	}
	return msgs
}

func appendBatch(w walimpls.WALImpl, msgs []message.Message) ([]message.ID, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return w.AppendBatch(ctx, msgs)
}

func requireIncreasing(t *testing.T, ids []message.ID) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		require.Truef(t, ids[i-1].LT(ids[i]), "id %d %s does not follow %s", i, ids[i], ids[i-1])
	}
}

// TestAppendBatchConcurrent: batches from concurrent appenders (and single
// appends among them) get IDs increasing in slice order and are read back
// in that order, each batch contiguous: run hands a batch's messages over
// consecutively, so no other append lands inside it. With a window of 8
// messages most batches are handed over in several steps and span several
// entries. The "unloads" run unloads the topic meanwhile: the producer
// reconnects and resends what was pending, in order, and deduplication
// keeps one copy.
func TestAppendBatchConcurrent(t *testing.T) {
	for _, unloads := range []bool{false, true} {
		t.Run(map[bool]string{false: "steady", true: "unloads"}[unloads], func(t *testing.T) {
			b, cfg := startBroker(t, pulsartest.Config{Deduplication: unloads})
			cfg.MaxBatchMessages = 8
			w := open(t, newOpener(t, cfg), "batches", 1, walimpls.ReadWrite)
			const (
				writers = 4
				batches = 12
			)
			var (
				mu    sync.Mutex
				acked = map[string]message.ID{} // payload → id
				sizes = map[string]int{}        // first payload of a batch → its size
				wg    sync.WaitGroup
			)
			record := func(msgs []message.Message, ids []message.ID) {
				mu.Lock()
				defer mu.Unlock()
				for i, m := range msgs {
					acked[string(m.Payload())] = ids[i]
				}
				sizes[string(msgs[0].Payload())] = len(msgs)
			}
			run := func() {
				for g := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := range batches {
							msgs := batchOf(t, fmt.Sprintf("w%d-b%d", g, k), 1+(k*5+g)%20)
							ids, err := appendBatch(w, msgs)
							if !assert.NoError(t, err) || !assert.Len(t, ids, len(msgs)) {
								return
							}
							for i := 1; i < len(ids); i++ {
								assert.Truef(t, ids[i-1].LT(ids[i]), "batch w%d-b%d: id %d %s after %s", g, k, i, ids[i], ids[i-1])
							}
							record(msgs, ids)
						}
					}()
				}
				wg.Add(1)
				go func() { // single appends among the batches
					defer wg.Done()
					for k := range 20 {
						m := msg(t, fmt.Sprintf("single-%d", k), nil)
						id, err := walimpls.Append(context.Background(), w, m)
						if !assert.NoError(t, err) {
							return
						}
						record([]message.Message{m}, []message.ID{id})
					}
				}()
				wg.Wait()
			}
			if unloads {
				// Unloading the log topic reconnects the producer only:
				// the meta watcher, a reader, stays clear of the client's
				// Reader.Next race (see the package documentation).
				topic := topicOf(cfg, "batches")
				during(t, 30*time.Millisecond, 3, func() error { return b.UnloadTopic(topic) }, run)
			} else {
				run()
			}
			if t.Failed() {
				return
			}

			got := readN(t, w, cursor.All(), len(acked))
			seen := map[string]bool{}
			for i := 0; i < len(got); {
				p := string(got[i].Payload())
				id, ok := acked[p]
				require.Truef(t, ok, "read %q, never acknowledged", p)
				require.Truef(t, id.EQ(got[i].ID()), "%s acknowledged at %s, read at %s", p, id, got[i].ID())
				n, first := sizes[p]
				require.Truef(t, first, "%q is not the first message of a batch: a batch was split", p)
				for j := range n {
					m := got[i+j]
					want := fmt.Sprintf("%s%d", p[:len(p)-1], j)
					if n == 1 {
						want = p
					}
					require.Equalf(t, want, string(m.Payload()), "message %d of the batch starting at %s", j, got[i].ID())
					require.Truef(t, acked[want].EQ(m.ID()), "%s acknowledged at %s, read at %s", want, acked[want], m.ID())
					require.False(t, seen[want], "%s read twice", want)
					seen[want] = true
					if i+j > 0 {
						require.True(t, got[i+j-1].ID().LT(m.ID()))
					}
				}
				i += n
			}
			require.Len(t, seen, len(acked))
			ledgers := map[int64]bool{}
			for _, m := range got {
				id, _ := idOf(m.ID())
				ledgers[id.ledger] = true
			}
			t.Logf("%d messages in %d ledgers", len(got), len(ledgers))
			s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(got[len(got)-1].ID())})
			require.NoError(t, err)
			defer s.Close()
			nothingMore(t, s, 200*time.Millisecond)
		})
	}
}

// TestAppendBatchRefusals: what is refused before anything reaches the
// broker stores nothing and says so (walimpls.NotStored).
func TestAppendBatchRefusals(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	o := newOpener(t, cfg)
	w := open(t, o, "refusals", 1, walimpls.ReadWrite)
	ctx := context.Background()
	limit := o.Capabilities().MaxMessageBytes
	assert.False(t, o.Capabilities().AtomicBatch)

	ids, err := w.AppendBatch(ctx, nil)
	require.NoError(t, err, "an empty batch")
	require.Empty(t, ids)
	ids, err = w.AppendBatch(ctx, []message.Message{})
	require.NoError(t, err)
	require.Empty(t, ids)

	// One message above the limit refuses the whole batch, wherever it is.
	for _, at := range []int{0, 1, 2} {
		msgs := batchOf(t, "big", 3)
		msgs[at] = message.Restore(make([]byte, limit+1), nil)
		ids, err = w.AppendBatch(ctx, msgs)
		var tl *walimpls.TooLargeError
		require.Truef(t, errors.As(err, &tl), "%v", err)
		require.Equal(t, limit, tl.Limit)
		require.True(t, walimpls.NotStored(err))
		require.Empty(t, ids)
	}
	last, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "the empty and refused batches stored %s", last)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = w.AppendBatch(cancelled, batchOf(t, "c", 2))
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, walimpls.NotStored(err), "a done context: %v", err)

	ro := open(t, o, "refusals", 0, walimpls.ReadOnly)
	for _, msgs := range [][]message.Message{batchOf(t, "ro", 2), nil} {
		_, err = ro.AppendBatch(ctx, msgs)
		require.ErrorIs(t, err, walimpls.ErrReadOnly)
		require.True(t, walimpls.NotStored(err))
	}

	first, err := w.AppendBatch(ctx, batchOf(t, "ok", 2))
	require.NoError(t, err)
	open(t, newOpener(t, cfg), "refusals", 2, walimpls.ReadWrite)
	_, err = w.AppendBatch(ctx, batchOf(t, "fenced", 3))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.True(t, walimpls.NotStored(err), "already fenced: %v", err)

	require.NoError(t, w.Close())
	for _, msgs := range [][]message.Message{batchOf(t, "closed", 2), nil} {
		_, err = w.AppendBatch(ctx, msgs)
		require.ErrorIs(t, err, walimpls.ErrClosed)
		require.True(t, walimpls.NotStored(err), "closed: %v", err)
	}
	got := readN(t, ro, cursor.All(), 2)
	require.Equal(t, []string{"ok-0", "ok-1"}, payloads(got))
	require.True(t, first[1].EQ(got[1].ID()))
}

// TestAppendBatchClientRefusal: a node that believes the broker's limit is
// higher than it is learns it from the client, which refuses a message at
// once, inside SendAsync. What came before it in the batch is stored and
// reported; nothing after it is handed over, so the TooLargeError's
// NotStored is true of the rest.
func TestAppendBatchClientRefusal(t *testing.T) {
	const brokerLimit = 64 << 10
	_, cfg := startBroker(t, pulsartest.Config{MaxMessageSize: brokerLimit})
	cfg.MaxMessageBytes = 1 << 20
	w := open(t, newOpener(t, cfg), "client-refusal", 1, walimpls.ReadWrite)
	msgs := []message.Message{
		msg(t, "before", nil),
		message.Restore(make([]byte, brokerLimit+10), nil),
		msg(t, "after", nil),
	}
	ids, err := appendBatch(w, msgs)
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
	require.True(t, walimpls.NotStored(err))
	require.Len(t, ids, 1, "the message before the refused one was stored: %v", err)

	next := appendOK(t, w, msg(t, "next", nil))
	got := readN(t, w, cursor.All(), 2)
	require.Equal(t, []string{"before", "next"}, payloads(got))
	require.True(t, ids[0].EQ(got[0].ID()))
	require.True(t, next.EQ(got[1].ID()))
}

// TestAppendBatchStalled: the broker stores the first entry of a batch
// and then stops answering; the client's send timeout fails the rest. The
// batch returns the IDs of exactly the messages stored (a prefix) with an
// error of unknown outcome, and nothing after the failure is stored: the
// messages not handed over yet never are.
func TestAppendBatchStalled(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	cfg.MaxBatchMessages = 4
	cfg.SendTimeout = 300 * time.Millisecond
	w := open(t, newOpener(t, cfg), "stalled", 1, walimpls.ReadWrite)
	warm := appendOK(t, w, msg(t, "warm", nil))
	topic := topicOf(cfg, "stalled")
	require.NoError(t, b.StallSends(topic, 1))

	msgs := batchOf(t, "s", 12)
	ids, err := appendBatch(w, msgs)
	require.ErrorIs(t, err, pulsar.ErrSendTimeout)
	require.False(t, walimpls.NotStored(err), "messages in flight when the batch failed: %v", err)
	require.NotEmpty(t, ids, "the first entry was stored")
	require.LessOrEqual(t, len(ids), cfg.MaxBatchMessages, "at most one window in the first entry")
	requireIncreasing(t, ids)

	require.NoError(t, b.ResumeSends(topic))
	after := appendOK(t, w, msg(t, "after", nil))
	want := []string{"warm"}
	for _, m := range msgs[:len(ids)] {
		want = append(want, string(m.Payload()))
	}
	want = append(want, "after")
	got := readN(t, w, cursor.All(), len(want))
	require.Equal(t, want, payloads(got), "the stored messages of the batch are the reported prefix")
	require.True(t, warm.EQ(got[0].ID()))
	for i, id := range ids {
		require.Truef(t, id.EQ(got[1+i].ID()), "message %d reported at %s, read at %s", i, id, got[1+i].ID())
	}
	require.True(t, after.EQ(got[len(got)-1].ID()))
	s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(after)})
	require.NoError(t, err)
	defer s.Close()
	nothingMore(t, s, 200*time.Millisecond)
}

// TestAppendBatchFencedMidway: a higher term takes the channel while a
// long batch is in flight. The window is small and the broker holds the
// receipts back on a fake clock: the test lets three rounds of them through
// and opens the higher term while the next round's are held. The batch
// fails with ErrFenced, of unknown outcome; every ID it reports is stored
// at that ID, and what the log holds of the batch is a prefix of it.
func TestAppendBatchFencedMidway(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b, cfg := startBroker(t, pulsartest.Config{Clock: clock})
	cfg.MaxBatchMessages = 8
	w := open(t, newOpener(t, cfg), "fenced-midway", 1, walimpls.ReadWrite)
	appendOK(t, w, msg(t, "warm", nil))
	topic := topicOf(cfg, "fenced-midway")
	before, err := b.Stats(topic)
	require.NoError(t, err)
	const delay = time.Minute
	require.NoError(t, b.DelayReceipts(delay))

	msgs := batchOf(t, "f", 500)
	type outcome struct {
		ids []message.ID
		err error
	}
	res := make(chan outcome, 1)
	go func() {
		ids, err := appendBatch(w, msgs)
		res <- outcome{ids, err}
	}()
	entries := before.Entries
	for round := 0; ; round++ {
		require.Eventuallyf(t, func() bool {
			st, err := b.Stats(topic)
			if err != nil || st.Entries <= entries {
				return false
			}
			entries = st.Entries
			return true
		}, 10*time.Second, time.Millisecond, "round %d of the batch is stored", round)
		if round == 3 {
			break
		}
		clock.Advance(delay) // its receipts go out, the next round's wait
	}
	// The receipts of the fencing open, on connections of its own, are not
	// held; those of the batch's round stay held until the clock moves.
	require.NoError(t, b.DelayReceipts(0))
	w2 := open(t, newOpener(t, cfg), "fenced-midway", 2, walimpls.ReadWrite)
	clock.Advance(delay)
	var r outcome
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "watchdog: the fenced batch does not end")
	}
	require.ErrorIs(t, r.err, walimpls.ErrFenced)
	require.False(t, walimpls.NotStored(r.err), "messages were in flight: %v", r.err)
	require.Less(t, len(r.ids), len(msgs))
	requireIncreasing(t, r.ids)

	last, err := w2.Last(context.Background())
	require.NoError(t, err)
	s, err := w2.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	var got []message.Immutable
	for len(got) == 0 || got[len(got)-1].ID().LT(last) {
		got = append(got, collect(t, s, 1, 10*time.Second)...)
	}
	require.Equal(t, "warm", string(got[0].Payload()))
	stored := got[1:]
	require.GreaterOrEqual(t, len(stored), len(r.ids), "every reported message is stored")
	for i, m := range stored {
		require.Equalf(t, string(msgs[i].Payload()), string(m.Payload()), "the log holds a prefix of the batch")
		if i < len(r.ids) {
			require.Truef(t, r.ids[i].EQ(m.ID()), "message %d reported at %s, read at %s", i, r.ids[i], m.ID())
		}
	}
	t.Logf("fenced after %d of %d messages reported, %d stored", len(r.ids), len(msgs), len(stored))
}
