package chainread_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
)

// withKafka adds a "kafka" entry on an in-process kfake broker.
func withKafka(t *testing.T, b *backends) walimpls.Opener {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := kafka.New(ctx, kafka.Config{
		SeedBrokers:    c.ListenAddrs(),
		MetadataMinAge: 10 * time.Millisecond,
		RetryBackoff:   10 * time.Millisecond,
		CreateTimeout:  10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	b.openers["kafka"] = o
	return o
}

// TestCrossesKafka: local → Kafka → memory, every acknowledged append once
// in timetick order; a deleted Kafka segment is ErrPositionGone and its
// topic is not created again by the reader.
func TestCrossesKafka(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	ko := withKafka(t, b)
	bl := newChain(t, b, "tokafka", "local")
	bl.append(60, 3)
	bl.migrate("kafka", 2)
	bl.append(60, 3)
	bl.migrate("memory", 3)
	bl.append(30, 2)
	require.NoError(t, bl.w.Sync(ctx))

	s, err := bl.reader(t).ReadBatches(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	all := recvBatches(t, s, len(bl.acked))
	require.NoError(t, s.Close())
	check(t, bl.sorted(), all)

	// A checkpoint in the Kafka segment resumes there.
	cp, err := chainread.CheckpointOf(all[90])
	require.NoError(t, err)
	require.EqualValues(t, 1, cp.Position.Segment)
	r := bl.reader(t)
	rs, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: chainread.DeliverAfter(cp)})
	require.NoError(t, err)
	check(t, bl.sorted()[91:], recv(t, rs, len(bl.acked)-91))
	require.NoError(t, rs.Close())

	// The Kafka segment's data is deleted: the reader fails, and the
	// topic stays gone.
	require.NoError(t, ko.Delete(ctx, "tokafka-s1"))
	_, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: chainread.DeliverAfter(cp)})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
	_, err = ko.Open(ctx, walimpls.Channel{Name: "tokafka-s1", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "the reader created the deleted segment's topic again")
}
