package pulsar

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// deleteCtx bounds one Delete in these tests.
func deleteCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// requireDeletedWriter checks that w's appends and truncations fail with a
// FencedError that says the channel was deleted.
func requireDeletedWriter(t *testing.T, w walimpls.WALImpl, someID message.ID) {
	t.Helper()
	ctx := deleteCtx(t)
	_, err := walimpls.Append(ctx, w, msg(t, "after-delete", nil))
	requireDeletedErr(t, err, "Append")
	_, err = w.AppendBatch(ctx, []message.Message{msg(t, "after-delete-1", nil), msg(t, "after-delete-2", nil)})
	requireDeletedErr(t, err, "AppendBatch")
	requireDeletedErr(t, w.Truncate(ctx, someID), "Truncate")
}

func requireDeletedErr(t *testing.T, err error, what string) {
	t.Helper()
	var fe *walimpls.FencedError
	require.Truef(t, errors.As(err, &fe) && fe.Deleted, "%s: want a FencedError with Deleted set, got %v", what, err)
	require.ErrorIs(t, err, walimpls.ErrFenced, what)
}

// requireNoTopics checks that neither of the channel's topics exists.
func requireNoTopics(t *testing.T, b *pulsartest.Broker, cfg Config, name string) {
	t.Helper()
	for _, topic := range []string{topicOf(cfg, name), topicOf(cfg, name) + metaSuffix} {
		ok, err := b.TopicExists(topic)
		require.NoError(t, err)
		require.Falsef(t, ok, "topic %s exists", topic)
	}
}

// requireOnly checks that the channel, read from its start on a fresh
// read-only WAL of o, holds exactly want.
func requireOnly(t *testing.T, o walimpls.Opener, name string, want []string) {
	t.Helper()
	ro := open(t, o, name, 0, walimpls.ReadOnly)
	defer ro.Close()
	s, err := ro.Read(deleteCtx(t), walimpls.ReadOption{Name: "check", DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, want, payloads(collect(t, s, len(want), 15*time.Second)))
	nothingMore(t, s, 300*time.Millisecond)
}

// TestDeleteFencesWriterWithAppendsInFlight: another node's writer keeps
// appends in flight while Delete runs. Its meta watcher sees the deletion
// record and fences it, every later append fails as deleted, nothing of
// it is left in the broker, and the channel opened again under the name
// holds only what its new writer appended. Delete has no TakeOver here:
// the writer must release the topic by itself (an unload would make the
// client close a producer that appends are being sent on, a path
// pulsar-client-go v0.19.0 races on).
func TestDeleteFencesWriterWithAppendsInFlight(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	const name = "del-inflight"
	nodeA := newOpener(t, cfg)
	noTakeOver := cfg
	noTakeOver.TakeOver = nil
	nodeB := newOpener(t, noTakeOver)

	wa := open(t, nodeA, name, 7, walimpls.ReadWrite)
	acks := &ackLog{ids: map[string]message.ID{}}
	var apps []*appender
	for i := range 4 {
		apps = append(apps, startAppender(wa, fmt.Sprintf("A%d", i), acks))
	}
	waitFor(t, 20*time.Second, "the writer appends", func() bool {
		n := int64(0)
		for _, a := range apps {
			n += a.acked.Load()
		}
		return n >= 100
	})

	start := time.Now()
	require.NoError(t, nodeB.Delete(deleteCtx(t), name))
	t.Logf("Delete took %s with %d appends acknowledged", time.Since(start), len(acks.snapshot()))

	// Every appender ends: its append in flight, or the next one, fails
	// as fenced.
	for _, a := range apps {
		select {
		case <-a.done:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "a writer of the deleted channel kept appending", a.tag)
		}
		require.ErrorIsf(t, a.err, walimpls.ErrFenced, "appender %s", a.tag)
	}
	var someID message.ID
	for _, id := range acks.snapshot() {
		someID = id
		break
	}
	requireDeletedWriter(t, wa, someID)
	// Refused before anything was handed over: certainly not stored.
	_, err := walimpls.Append(deleteCtx(t), wa, msg(t, "refused", nil))
	require.True(t, walimpls.NotStored(err), "an append of a deleted writer is NotStored: %v", err)
	_, err = wa.AppendBatch(deleteCtx(t), []message.Message{msg(t, "refused-1", nil), msg(t, "refused-2", nil)})
	require.True(t, walimpls.NotStored(err), "a batch of a deleted writer is NotStored: %v", err)
	requireNoTopics(t, b, cfg, name)

	// A new channel under the name: empty, at a lower term, and nothing of
	// the old writer shows up in it, also after the old writer tried again.
	wb := open(t, nodeB, name, 1, walimpls.ReadWrite)
	last, err := wb.Last(deleteCtx(t))
	require.NoError(t, err)
	require.True(t, last.IsZero(), "Last of the new channel is %s", last)
	for i := range 3 {
		appendOK(t, wb, msg(t, fmt.Sprintf("B%d", i), nil))
	}
	requireDeletedWriter(t, wa, someID)
	appendOK(t, wb, msg(t, "B3", nil))
	requireOnly(t, nodeA, name, []string{"B0", "B1", "B2", "B3"})
}

// TestDeleteEndsRemoteReaders: the deletion record ends the scanners of
// another node's read-only WAL, which can read the channel no more. The
// topics are deleted only once that happened: a reader that the delete
// disconnects while it delivers trips pulsar-client-go v0.19.0's race
// between Reader.Next and a reconnect (see the package documentation);
// stopping readers first is the caller's part of the contract.
func TestDeleteEndsRemoteReaders(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	const name = "del-readers"
	nodeA, nodeB := newOpener(t, cfg), newOpener(t, cfg)
	w := open(t, nodeB, name, 1, walimpls.ReadWrite)
	appendOK(t, w, msg(t, "m0", nil))
	ro := open(t, nodeA, name, 0, walimpls.ReadOnly)
	s, err := ro.Read(deleteCtx(t), walimpls.ReadOption{Name: "tail", DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, []string{"m0"}, payloads(collect(t, s, 1, 15*time.Second)))

	ended := false
	nodeB.hooks.beforeDeleteTopics = func(context.Context, string) {
		select {
		case <-s.Done():
			ended = true
		case <-time.After(20 * time.Second):
		}
	}
	require.NoError(t, nodeB.Delete(deleteCtx(t), name))
	require.True(t, ended, "the remote scanner ended when its watcher saw the deletion record")
	require.ErrorIs(t, s.Error(), walimpls.ErrPositionGone)
	_, err = ro.Read(deleteCtx(t), walimpls.ReadOption{DeliverPolicy: cursor.All()})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
	_, err = ro.Last(deleteCtx(t))
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
}

// TestDeleteWithoutTopicsCreatesNothing: deleting a name that has no
// topics leaves none behind; with TopicExists it touches none, without
// it the topics it went through are deleted again.
func TestDeleteWithoutTopicsCreatesNothing(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	o := newOpener(t, cfg)
	var created []string
	cfg.TopicExists = nil
	cfg.DeleteTopic = func(_ context.Context, topic string) error {
		created = append(created, topic)
		if err := b.DeleteTopic(topic); !errors.Is(err, pulsartest.ErrTopicNotFound) {
			return err
		}
		return nil
	}
	blind := newOpener(t, cfg)

	require.NoError(t, o.Delete(deleteCtx(t), "never-opened"))
	requireNoTopics(t, b, cfg, "never-opened")
	require.NoError(t, blind.Delete(deleteCtx(t), "never-opened-either"))
	requireNoTopics(t, b, cfg, "never-opened-either")
	require.Len(t, created, 2, "without TopicExists both topics go through DeleteTopic")
}

// TestDeleteNeedsAWayToDeleteTopics: without DeleteTopic or AdminURL,
// Delete is a configuration error that says what to set, and changes
// nothing.
func TestDeleteNeedsAWayToDeleteTopics(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	cfg.DeleteTopic = nil
	o := newOpener(t, cfg)
	w := open(t, o, "kept", 1, walimpls.ReadWrite)
	appendOK(t, w, msg(t, "m0", nil))
	err := o.Delete(deleteCtx(t), "kept")
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.ErrorContains(t, err, "adminUrl")
	appendOK(t, w, msg(t, "m1", nil))
}

// TestDeleteTakesOverAHungWriter: a writer whose meta watcher is stuck
// does not release the topic. A Delete without TakeOver waits for it
// until its context ends, leaving the channel fenced (its deletion record
// stays, so opens fail as deleted) but not deleted; a Delete through the
// admin API unloads the writer, whose producer comes back to a topic with
// a higher epoch and is refused, and deletes the channel. The writer
// never stores again: the name opened again holds only the new writer's
// messages.
func TestDeleteTakesOverAHungWriter(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{ServeAdmin: true, AdminToken: "tok"})
	cfg := testConfig(b)
	cfg.TakeOverGrace = 100 * time.Millisecond
	const name = "del-hung"
	logTopic := topicOf(cfg, name)
	nodeA := newOpener(t, cfg)
	wa := open(t, nodeA, name, 3, walimpls.ReadWrite)
	id := appendOK(t, wa, msg(t, "A0", nil))
	wa.(*wal).watch.stop() // hung: it sees no claim and no deletion

	patient := cfg
	patient.TakeOver = nil
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := newOpener(t, patient).Delete(ctx, name)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a Delete that cannot take the topic over waits for its context")
	_, err = nodeA.Open(deleteCtx(t), walimpls.Channel{Name: name, Term: 9, Mode: walimpls.ReadWrite})
	requireDeletedErr(t, err, "Open after an unfinished Delete")

	viaAdmin := adminConfig(b)
	viaAdmin.AuthToken = "tok"
	viaAdmin.TakeOverGrace = 100 * time.Millisecond
	nodeB := newOpener(t, viaAdmin)
	nodeB.hooks.beforeDeleteTopics = func(ctx context.Context, _ string) {
		// The unloaded producer came back and was refused before the
		// topic goes.
		waitFor(t, 10*time.Second, "the hung writer's producer is refused", func() bool {
			s, err := b.Stats(logTopic)
			return err == nil && s.FencedProducers > 0
		})
	}
	require.NoError(t, nodeB.Delete(deleteCtx(t), name))
	requireNoTopics(t, b, cfg, name)

	wb := open(t, nodeB, name, 1, walimpls.ReadWrite)
	appendOK(t, wb, msg(t, "B0", nil))
	requireDeletedWriter(t, wa, id)
	appendOK(t, wb, msg(t, "B1", nil))
	requireOnly(t, nodeB, name, []string{"B0", "B1"})
}

// TestConcurrentDeletes: nodes deleting one channel at once all succeed:
// the first to hold the log topic deletes it, and the others, refused
// while they wait for it, find nothing left to fence. Every deletion
// record is written before any topic goes: a producer that a delete
// closes while pulsar-client-go v0.19.0 is still creating it trips a race
// in the client (see the package documentation).
func TestConcurrentDeletes(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	const name = "del-concurrent"
	w := open(t, newOpener(t, cfg), name, 1, walimpls.ReadWrite)
	id := appendOK(t, w, msg(t, "m0", nil))
	nodes := []*Opener{newOpener(t, cfg), newOpener(t, cfg), newOpener(t, cfg)}
	var recorded sync.WaitGroup
	recorded.Add(len(nodes))
	for _, o := range nodes {
		o.hooks.afterDeletionRecord = func(context.Context, string) { recorded.Done() }
		o.hooks.beforeDeleteTopics = func(context.Context, string) { recorded.Wait() }
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, o := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = o.Delete(deleteCtx(t), name)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoErrorf(t, err, "Delete on node %d", i)
	}
	requireDeletedWriter(t, w, id)
	requireNoTopics(t, b, cfg, name)
}

// TestMetaFoldDeletion: a deletion record beats every claim, also a later
// claim of the highest term, and the fold still notices a writer's own
// claim after it.
func TestMetaFoldDeletion(t *testing.T) {
	claim := func(term int64, nonce string) map[string]string {
		return map[string]string{metaKind: metaClaim, metaTerm: strconvI(term), metaNonce: nonce}
	}
	st := metaState{maxTerm: -1, mine: "late"}
	st.apply(claim(5, "a"))
	require.False(t, st.deleted)
	require.Equal(t, "a", st.winnerNonce)
	del := deletionRecord()
	st.apply(del)
	require.True(t, st.deleted)
	require.Equal(t, del[metaNonce], st.winnerNonce)
	st.apply(claim(math.MaxInt64, "late"))
	require.True(t, st.deleted)
	require.Equal(t, del[metaNonce], st.winnerNonce, "no claim beats a deletion")
	require.True(t, st.mineSeen)
	require.NotEqual(t, deletionRecord()[metaNonce], del[metaNonce], "every deletion has its own nonce")
}

// TestDeleteWithoutAutoCreation: on a broker that does not create topics
// on use, a deleted channel stays deleted: the hung writer's producer,
// unloaded and refused, and its claim check, which finds no meta topic
// and fences it as deleted, create nothing. The name is usable again once
// its topics are created.
func TestDeleteWithoutAutoCreation(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{DisableAutoTopicCreation: true})
	cfg.TakeOverGrace = 100 * time.Millisecond
	const name = "del-noauto"
	logTopic := topicOf(cfg, name)
	create := func() {
		require.NoError(t, b.CreateTopic(logTopic))
		require.NoError(t, b.CreateTopic(logTopic+metaSuffix))
	}
	create()
	nodeA, nodeB := newOpener(t, cfg), newOpener(t, cfg)
	wa := open(t, nodeA, name, 2, walimpls.ReadWrite)
	id := appendOK(t, wa, msg(t, "A0", nil))
	wa.(*wal).watch.stop() // hung: only the unload and the claim check reach it
	nodeB.hooks.beforeDeleteTopics = func(context.Context, string) {
		waitFor(t, 10*time.Second, "the hung writer's producer is refused", func() bool {
			s, err := b.Stats(logTopic)
			return err == nil && s.FencedProducers > 0
		})
	}
	require.NoError(t, nodeB.Delete(deleteCtx(t), name))
	requireNoTopics(t, b, cfg, name)
	requireDeletedWriter(t, wa, id)
	requireNoTopics(t, b, cfg, name)

	_, err := nodeB.Open(deleteCtx(t), walimpls.Channel{Name: name, Term: 1, Mode: walimpls.ReadWrite})
	require.ErrorContains(t, err, "TopicNotFound", "without its topics the name does not open")
	create()
	wb := open(t, nodeB, name, 1, walimpls.ReadWrite)
	appendOK(t, wb, msg(t, "B0", nil))
	requireOnly(t, nodeB, name, []string{"B0"})
}
