package chainread_test

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/walimpls"
)

// withKafka adds a "kafka" entry on an in-process kfake broker.
func withKafka(t *testing.T, b *backends) walimpls.Opener {
	o := backendstest.Start(t, "kafka").Entry("kafka")
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
	cp, err := cursor.CheckpointOf(all[90])
	require.NoError(t, err)
	require.EqualValues(t, 1, cursor.PositionOf(cp.Position).Segment)
	r := bl.reader(t)
	rs, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(cp)})
	require.NoError(t, err)
	check(t, bl.sorted()[91:], recv(t, rs, len(bl.acked)-91))
	require.NoError(t, rs.Close())

	// The Kafka segment's data is deleted: the reader fails, and the
	// topic stays gone.
	require.NoError(t, ko.Delete(ctx, "tokafka-s1"))
	_, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(cp)})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
	_, err = ko.Open(ctx, walimpls.Channel{Name: "tokafka-s1", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "the reader created the deleted segment's topic again")
}

// withPulsar adds a "pulsar" entry on an in-process pulsartest broker.
func withPulsar(t *testing.T, b *backends) walimpls.Opener {
	o := backendstest.Start(t, "pulsar").Entry("pulsar")
	b.openers["pulsar"] = o
	return o
}

// TestFourBackends: memory → Kafka → Pulsar → local, three hops across
// every backend, read whole and resumed from a checkpoint in each segment.
func TestFourBackends(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	withKafka(t, b)
	withPulsar(t, b)
	bl := newChain(t, b, "four", "memory")
	bl.append(40, 2)
	bl.migrate("kafka", 2)
	bl.append(40, 2)
	bl.migrate("pulsar", 3)
	bl.append(40, 2)
	bl.migrate("local", 4)
	bl.append(40, 2)
	require.NoError(t, bl.w.Sync(ctx))
	want := bl.sorted()

	r := bl.reader(t)
	s, err := r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	all := recv(t, s, len(want))
	require.NoError(t, s.Close())
	check(t, want, all)
	for _, i := range []int{10, 50, 90, 130} {
		cp, err := cursor.CheckpointOf(all[i])
		require.NoError(t, err)
		bs, err := r.ReadBatches(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(cp)})
		require.NoError(t, err)
		check(t, want[i+1:], recvBatches(t, bs, len(want)-i-1))
		require.NoError(t, bs.Close())
	}
}

// TestFollowAcrossBrokers: one live scanner follows memory → Kafka →
// Pulsar → local, learning each seal from Follow: each sealed segment is
// delivered up to its End, also what its writer appended last and no
// watermark released, and the next followed live.
func TestFollowAcrossBrokers(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	withKafka(t, b)
	withPulsar(t, b)
	bl := newChain(t, b, "followb", "memory")
	f := &follower{}
	f.set(bl.c, nil)
	clock := clockwork.NewFakeClock()
	s, err := followReader(t, bl, f.follow, clock, nil).ReadBatches(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	bl.append(20, 2)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted(), recvBatches(t, s, 20))

	n := len(bl.acked)
	for i, next := range []string{"kafka", "pulsar", "local"} {
		bl.append(15, 3) // held back
		bl.migrate(next, int64(i+2))
		bl.append(10, 2)
		require.NoError(t, bl.w.Sync(ctx))
		f.set(bl.c, nil)
		tick(t, clock)
		check(t, bl.sorted()[n:], recvBatches(t, s, len(bl.acked)-n))
		n = len(bl.acked)
	}
	require.NoError(t, s.Close())
	require.NoError(t, s.Error())
}
