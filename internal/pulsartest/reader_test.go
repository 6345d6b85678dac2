package pulsartest_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
)

func TestReaderStartPositions(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	for _, batching := range []bool{false, true} {
		topic := newTopic(t)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching})
		require.NoError(t, err)
		ids := produce(t, p, "m", 10)
		p.Close()
		batchName := map[bool]string{false: "single/", true: "batch/"}[batching]

		for _, tc := range []struct {
			name      string
			start     pulsar.MessageID
			inclusive bool
			want      []string
		}{
			{"earliest", pulsar.EarliestMessageID(), false, names("m", 0, 10)},
			{"earliest inclusive", pulsar.EarliestMessageID(), true, names("m", 0, 10)},
			{"exclusive", ids[4], false, names("m", 5, 10)},
			{"inclusive", ids[4], true, names("m", 4, 10)},
			{"first inclusive", ids[0], true, names("m", 0, 10)},
			{"last exclusive", ids[9], false, nil},
			{"last inclusive", ids[9], true, names("m", 9, 10)},
			{"latest", pulsar.LatestMessageID(), false, nil},
			{"latest inclusive", pulsar.LatestMessageID(), true, names("m", 9, 10)},
		} {
			t.Run(batchName+tc.name, func(t *testing.T) {
				r, err := c.CreateReader(pulsar.ReaderOptions{
					Topic: topic, StartMessageID: tc.start, StartMessageIDInclusive: tc.inclusive,
				})
				require.NoError(t, err)
				defer r.Close()
				got, _ := readN(t, r, len(tc.want))
				require.Equal(t, tc.want, got, "batching=%v", batching)
				require.False(t, r.HasNext())
				expectNothing(t, r, 50*time.Millisecond)
			})
		}
	}
}

func TestReaderLatestSeesNewMessages(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	topic := newTopic(t)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	produce(t, p, "old", 3)

	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
	require.NoError(t, err)
	defer r.Close()
	require.False(t, r.HasNext())
	produce(t, p, "new", 3)
	got, _ := readN(t, r, 3)
	require.Equal(t, names("new", 0, 3), got)
}

func TestReaderEmptyTopic(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	topic := newTopic(t)
	for _, start := range []pulsar.MessageID{pulsar.EarliestMessageID(), pulsar.LatestMessageID()} {
		for _, inclusive := range []bool{false, true} {
			r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: start, StartMessageIDInclusive: inclusive})
			require.NoError(t, err)
			require.False(t, r.HasNext())
			r.Close()
		}
	}
}

func TestReaderSeek(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	for _, batching := range []bool{false, true} {
		topic := newTopic(t)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching})
		require.NoError(t, err)
		ids := produce(t, p, "m", 10)

		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		require.NoError(t, err)
		got, _ := readN(t, r, 10)
		require.Equal(t, names("m", 0, 10), got)

		require.NoError(t, r.Seek(ids[2]))
		got, _ = readN(t, r, 7)
		require.Equal(t, names("m", 3, 10), got, "batching=%v", batching)

		require.NoError(t, r.Seek(ids[0]))
		got, _ = readN(t, r, 9)
		require.Equal(t, names("m", 1, 10), got)

		// Reading continues past the seek with new messages.
		produce(t, p, "n", 2)
		got, _ = readN(t, r, 2)
		require.Equal(t, names("n", 0, 2), got)
		r.Close()
		p.Close()
	}
}

func TestReaderFlowControl(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	topic := newTopic(t)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	require.NoError(t, err)
	defer p.Close()
	produce(t, p, "m", 500)
	// A small receiver queue makes the client send FLOW many times.
	r, err := c.CreateReader(pulsar.ReaderOptions{
		Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReceiverQueueSize: 7,
	})
	require.NoError(t, err)
	defer r.Close()
	got, _ := readN(t, r, 500)
	require.Equal(t, names("m", 0, 500), got)
}

func TestTrimTopic(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	c := newClient(t, b)
	topic := newTopic(t)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	require.NoError(t, err)
	defer p.Close()
	ids := produce(t, p, "m", 10)

	live, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReceiverQueueSize: 1})
	require.NoError(t, err)
	defer live.Close()
	got, _ := readN(t, live, 1)
	require.Equal(t, []string{"m0"}, got)

	n, err := b.TrimTopic(topic, pulsartest.Position{Ledger: ids[5].LedgerID(), Entry: ids[5].EntryID()})
	require.NoError(t, err)
	require.Equal(t, 5, n)
	st, err := b.Stats(topic)
	require.NoError(t, err)
	require.Equal(t, 5, st.Entries)
	require.Equal(t, ids[5].EntryID(), st.First.Entry)
	require.Equal(t, ids[9].EntryID(), st.Last.Entry)

	// Below the deleted range: refused.
	for _, inclusive := range []bool{false, true} {
		_, err = c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[2], StartMessageIDInclusive: inclusive})
		require.ErrorContains(t, err, pulsartest.GoneMessage)
	}
	// Exclusive start at the last deleted entry needs nothing deleted.
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[4]})
	require.NoError(t, err)
	got, _ = readN(t, r, 5)
	require.Equal(t, names("m", 5, 10), got)
	require.Error(t, r.Seek(ids[1]))
	r.Close()

	// Earliest starts at the first entry left; HasNext agrees.
	r, err = c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	require.NoError(t, err)
	require.True(t, r.HasNext())
	got, _ = readN(t, r, 5)
	require.Equal(t, names("m", 5, 10), got)
	require.False(t, r.HasNext())
	r.Close()

	// A reader that was behind skips to the first entry left (as Pulsar
	// does); it already holds m1 in its receiver queue.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rest []string
	for len(rest) == 0 || rest[len(rest)-1] != "m9" {
		m, err := live.Next(ctx)
		require.NoError(t, err)
		rest = append(rest, string(m.Payload()))
	}
	require.Subset(t, append([]string{"m1"}, names("m", 5, 10)...), rest)
	require.Contains(t, rest, "m5")
}
