package pulsartest_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/pulsartest"
)

// debugLogger logs the broker at debug level when PULSARTEST_DEBUG is set.
func debugLogger() *slog.Logger {
	if os.Getenv("PULSARTEST_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19.0 starts this goroutine per producer when
		// SendTimeout > 0 (default 30 s) and it only notices that the
		// producer closed on its next timer tick, up to SendTimeout after
		// Close. It holds no broker resource; everything else must be gone.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
		// A producer that pulsar-client-go v0.19.0 closes itself after
		// ProducerFenced (doClose) never cancels its context, and a later
		// Close returns early, so its reconnect goroutine stays for good.
		// Only this inner goroutine is ignored, wherever it is in its
		// reconnect (a lookup's retry may be on top): an unclosed producer
		// still shows up through runEventsLoop itself.
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).runEventsLoop.func1"),
		// After each successful SUBSCRIBE the client starts a goroutine that
		// hands "connected" to the consumer's dispatcher over an unbuffered
		// channel; if the consumer closes before the dispatcher takes it
		// (a reconnect racing Close), it blocks for good. Seen rarely under
		// load with -count=3.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).grabConn.func1"),
	)
}

// topicSeq makes topic names unique within the test binary.
var topicSeq atomic.Int64

// newTopic returns a fresh fully qualified topic name.
func newTopic(t *testing.T) string {
	return fmt.Sprintf("persistent://public/default/t%d", topicSeq.Add(1))
}

// newClient connects a pulsar client to b and closes it at the end of the test.
func newClient(t *testing.T, b *pulsartest.Broker) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               b.URL(),
		OperationTimeout:  10 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		Logger:            plog.DefaultNopLogger(),
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce sends msgs payloads "m0".."m<n-1>" with prefix and returns the ids.
func produce(t *testing.T, p pulsar.Producer, prefix string, n int) []pulsar.MessageID {
	t.Helper()
	ids := make([]pulsar.MessageID, n)
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(ctxT(t), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s%d", prefix, i)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				ids[i] = id
				errs <- err
			})
	}
	require.NoError(t, p.FlushWithCtx(ctxT(t)))
	for range n {
		require.NoError(t, <-errs)
	}
	return ids
}

// readN reads n messages and returns their payloads and ids.
func readN(t *testing.T, r pulsar.Reader, n int) ([]string, []pulsar.MessageID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var payloads []string
	var ids []pulsar.MessageID
	for range n {
		m, err := r.Next(ctx)
		require.NoError(t, err, "after %d messages: %v", len(payloads), payloads)
		payloads = append(payloads, string(m.Payload()))
		ids = append(ids, m.ID())
	}
	return payloads, ids
}

// expectNothing checks that r has no message within d.
func expectNothing(t *testing.T, r pulsar.Reader, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := r.Next(ctx)
	if err == nil {
		t.Fatalf("unexpected message %q at %v", m.Payload(), m.ID())
	}
}

func names(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func TestProduceAndRead(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			c := newClient(t, b)
			topic := newTopic(t)
			p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching})
			require.NoError(t, err)
			defer p.Close()
			ids := produce(t, p, "m", 50)

			r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
			require.NoError(t, err)
			defer r.Close()
			got, gotIDs := readN(t, r, 50)
			require.Equal(t, names("m", 0, 50), got)
			for i := range ids {
				require.Equal(t, ids[i].LedgerID(), gotIDs[i].LedgerID())
				require.Equal(t, ids[i].EntryID(), gotIDs[i].EntryID())
				require.Equal(t, ids[i].BatchIdx(), gotIDs[i].BatchIdx())
			}
			require.False(t, r.HasNext())
			expectNothing(t, r, 100*time.Millisecond)

			st, err := b.Stats(topic)
			require.NoError(t, err)
			if batching {
				require.Less(t, st.Entries, 50)
			} else {
				require.Equal(t, 50, st.Entries)
			}
		})
	}
}
