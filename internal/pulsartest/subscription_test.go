package pulsartest_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
)

func receiveN(t *testing.T, c pulsar.Consumer, n int) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []pulsar.Message
	for range n {
		m, err := c.Receive(ctx)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

func payloads(ms []pulsar.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Payload()))
	}
	return out
}

func TestDurableSubscriptionAndRetention(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	topic := newTopic(t)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	require.NoError(t, err)
	defer p.Close()
	ids := produce(t, p, "m", 10)

	opts := pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "trunc", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	}
	cons, err := c.Subscribe(opts)
	require.NoError(t, err)
	ms := receiveN(t, cons, 10)
	require.Equal(t, names("m", 0, 10), payloads(ms))

	// A second consumer on an exclusive subscription is refused.
	_, err = c.Subscribe(opts)
	require.ErrorContains(t, err, "ConsumerBusy")

	// Acknowledge up to m3 cumulatively, and m5 alone: the cursor stops at m3.
	require.NoError(t, cons.AckIDCumulative(ids[3]))
	require.NoError(t, cons.AckID(ids[5]))
	require.Eventually(t, func() bool {
		st, err := b.Stats(topic)
		return err == nil && st.Cursors["trunc"].Entry == ids[3].EntryID()
	}, 10*time.Second, time.Millisecond)

	n, err := b.ApplyRetention(topic)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	// Readers below the retained range are refused; earliest starts at m4.
	_, err = c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[1]})
	require.ErrorContains(t, err, pulsartest.GoneMessage)
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	require.NoError(t, err)
	got, _ := readN(t, r, 6)
	require.Equal(t, names("m", 4, 10), got)
	r.Close()

	// The subscription resumes after its cursor, skipping acknowledged m5.
	cons.Close()
	cons, err = c.Subscribe(opts)
	require.NoError(t, err)
	ms = receiveN(t, cons, 5)
	require.Equal(t, []string{"m4", "m6", "m7", "m8", "m9"}, payloads(ms))
	for _, m := range ms {
		require.NoError(t, cons.Ack(m))
	}
	require.Eventually(t, func() bool {
		st, err := b.Stats(topic)
		return err == nil && st.Cursors["trunc"].Entry == ids[9].EntryID()
	}, 10*time.Second, time.Millisecond)
	n, err = b.ApplyRetention(topic)
	require.NoError(t, err)
	require.Equal(t, 6, n)

	// Latest-positioned new subscription sees only new messages.
	latest, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "latest", Type: pulsar.Exclusive})
	require.NoError(t, err)
	defer latest.Close()
	produce(t, p, "n", 2)
	require.Equal(t, names("n", 0, 2), payloads(receiveN(t, latest, 2)))
	// The cursor outlives its consumer. (Unsubscribe is covered by a raw
	// test: in pulsar-client-go v0.19.0, Close after Unsubscribe is a no-op
	// and leaks the consumer's goroutines.)
	cons.Close()
	st, err := b.Stats(topic)
	require.NoError(t, err)
	require.Equal(t, ids[9].EntryID(), st.Cursors["trunc"].Entry)
	require.Zero(t, st.Entries-2, "only the two new entries remain")
}

func TestDurableSubscriptionSeek(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	topic := newTopic(t)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	ids := produce(t, p, "m", 10)

	cons, err := c.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	require.NoError(t, err)
	defer cons.Close()
	require.Equal(t, names("m", 0, 10), payloads(receiveN(t, cons, 10)))
	require.NoError(t, cons.Seek(ids[7]))
	// The broker redelivers from the entry holding m7; the client drops
	// what is at or before the sought id.
	require.Equal(t, []string{"m8", "m9"}, payloads(receiveN(t, cons, 2)))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = cons.Receive(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestUnsupportedSubscriptionType(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	_, err := c.Subscribe(pulsar.ConsumerOptions{Topic: newTopic(t), SubscriptionName: "s", Type: pulsar.Shared})
	require.ErrorContains(t, err, "not supported")
}
