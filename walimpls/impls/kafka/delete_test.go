package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
)

// TestDeleteFencesWriterInFlight deletes a channel while one of its
// writers has an append in flight: its transaction's produce, or its
// commit, waits at the broker until Delete has returned (and, in one
// variant, until the name has been opened again). The writer belongs to
// another opener, or to the deleting one. The append fails with ErrFenced,
// the writer stays fenced, and nothing of it shows in the new channel's
// topic, not even as an aborted record.
func TestDeleteFencesWriterInFlight(t *testing.T) {
	t.Parallel()
	stages := []struct {
		name string
		key  kmsg.Key
		// holds reports whether req is the writer's request to hold.
		holds func(req kmsg.Request, txnID, topic string) bool
	}{
		{"produce", kmsg.Produce, func(req kmsg.Request, txnID, topic string) bool {
			r := req.(*kmsg.ProduceRequest)
			return r.TransactionID != nil && *r.TransactionID == txnID && producesTo(r, topic, logPartition)
		}},
		{"commit", kmsg.EndTxn, func(req kmsg.Request, txnID, _ string) bool {
			r := req.(*kmsg.EndTxnRequest)
			return r.TransactionalID == txnID && r.Commit
		}},
	}
	variants := []struct {
		name string
		// local: the writer's own opener deletes; reopened: the held
		// request goes on only once the name was opened again.
		local, reopened bool
	}{
		{"remote", false, false},
		{"remote-reopened", false, true},
		{"local", true, false},
	}
	for _, stage := range stages {
		for _, v := range variants {
			t.Run(stage.name+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				c := newCluster(t)
				cfg := testConfig(c)
				a, b := newOpener(t, cfg), newOpener(t, cfg)
				deleter := b
				if v.local {
					deleter = a
				}
				const name = "del-inflight"
				topic, txnID := a.cfg.topicName(name), a.cfg.transactionalID(name)
				wa := open(t, a, name, 3, walimpls.ReadWrite)
				appendOK(t, wa, msg(t, "a-before", nil))

				reached, release := make(chan struct{}), make(chan struct{})
				var held atomic.Bool
				c.ControlKey(int16(stage.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
					if !stage.holds(req, txnID, topic) || !held.CompareAndSwap(false, true) {
						return nil, nil, false
					}
					close(reached)
					c.SleepControl(func() { <-release })
					c.DropControl()
					return nil, nil, false // now handled as usual, late
				})
				done := make(chan error, 1)
				go func() {
					_, err := walimpls.Append(context.Background(), wa, msg(t, "a-inflight", nil))
					done <- err
				}()
				select {
				case <-reached:
				case <-time.After(10 * time.Second):
					close(release)
					require.FailNow(t, "the writer's request never came")
				}

				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				start := time.Now()
				require.NoError(t, deleter.Delete(ctx, name))
				t.Logf("Delete took %s", time.Since(start))
				var wb walimpls.WALImpl
				if v.reopened {
					wb = open(t, b, name, 1, walimpls.ReadWrite)
				}
				close(release)
				select {
				case err := <-done:
					require.ErrorIs(t, err, walimpls.ErrFenced, "the append in flight at Delete")
				case <-time.After(20 * time.Second):
					require.FailNow(t, "the append in flight never returned")
				}
				if wb == nil {
					wb = open(t, b, name, 1, walimpls.ReadWrite)
				}

				_, err := walimpls.Append(ctx, wa, msg(t, "a-after", nil))
				require.ErrorIs(t, err, walimpls.ErrFenced)
				var fe *walimpls.FencedError
				require.True(t, errors.As(err, &fe))
				assert.True(t, fe.Deleted, "the writer learns the deletion: %v", err)

				appendOK(t, wb, msg(t, "b1", nil))
				appendOK(t, wb, msg(t, "b2", nil))
				got := readN(t, wb, cursor.All(), 2)
				assert.Equal(t, []string{"b1", "b2"}, payloads(got))
				s, err := wb.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(got[1].ID())})
				require.NoError(t, err)
				defer s.Close()
				nothingMore(t, s, 200*time.Millisecond)
				assert.Equal(t, []string{"b1", "b2"}, uncommittedPayloads(t, cfg, topic),
					"the new topic holds nothing of the deleted channel's writer, not even aborted")
			})
		}
	}
}

// TestDeleteNeverCreated deletes a channel that never existed on a broker
// that creates topics on demand: nothing is created, neither the topic nor
// the channel's transactional id.
func TestDeleteNeverCreated(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.AllowAutoTopicCreation())
	cfg := testConfig(c)
	o := newOpener(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, o.Delete(ctx, "never"))
	require.NoError(t, o.Delete(ctx, "never"))

	topics, err := o.adm.ListTopics(ctx)
	require.NoError(t, err)
	assert.False(t, topics.Has(o.cfg.topicName("never")), "Delete created the topic")
	txns, err := o.adm.DescribeTransactions(ctx, o.cfg.transactionalID("never"))
	if err == nil {
		var d kadm.DescribedTransaction
		if d, err = txns.On(o.cfg.transactionalID("never"), nil); err == nil {
			err = d.Err
		}
	}
	require.ErrorIs(t, err, kerr.TransactionalIDNotFound, "Delete initialised the transactional id")
}

// TestDeleteReopenElsewhere opens a channel again, after another opener
// deleted it, on the opener that used it before: with franz-go's default
// metadata age (5s), the new topic is found and used at once, although
// this opener's client holds the old topic's metadata and producer state.
func TestDeleteReopenElsewhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.MetadataMinAge = 0 // franz-go's default
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	const name = "del-reopen"
	wa := open(t, a, name, 4, walimpls.ReadWrite)
	appendOK(t, wa, msg(t, "old", nil))
	ro := open(t, a, name, 0, walimpls.ReadOnly)
	remote, err := ro.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer remote.Close()
	assert.Equal(t, []string{"old"}, payloads(collect(t, remote, 1, 10*time.Second)))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, b.Delete(ctx, name))

	start := time.Now()
	wa2 := open(t, a, name, 1, walimpls.ReadWrite)
	id := appendOK(t, wa2, msg(t, "new", nil))
	last, err := wa2.Last(ctx)
	require.NoError(t, err)
	took := time.Since(start)
	t.Logf("open, append and Last on the re-created topic took %s", took)
	assert.Less(t, took, 4*time.Second, "waited on franz-go's metadata cache")
	assert.True(t, id.EQ(last))
	assert.Equal(t, []string{"new"}, payloads(readN(t, wa2, cursor.All(), 1)))

	// The deleted channel's writer and reader of this opener learn it.
	_, err = walimpls.Append(ctx, wa, msg(t, "stale", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	select {
	case <-remote.Done():
		require.ErrorIs(t, remote.Error(), walimpls.ErrPositionGone)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the deleted channel's scanner did not end")
	}
}

// TestDeleteRefused has the broker refuse the topic deletion: Delete fails
// after it fenced the channel, which stays fenced (an open waits for the
// topic to go, then fails) until a Delete succeeds; the name then opens as
// a new channel.
func TestDeleteRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.CreateTimeout = 2 * time.Second
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	const name = "del-refused"
	wa := open(t, a, name, 2, walimpls.ReadWrite)
	appendOK(t, wa, msg(t, "old", nil))

	var refuse atomic.Bool
	refuse.Store(true)
	c.ControlKey(int16(kmsg.DeleteTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.DeleteTopicsRequest)
		resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewDeleteTopicsResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.TopicDeletionDisabled.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := b.Delete(ctx, name)
	require.ErrorIs(t, err, kerr.TopicDeletionDisabled)

	_, err = walimpls.Append(ctx, wa, msg(t, "stale", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced, "the writer is fenced although the topic stays")
	_, err = b.Open(ctx, walimpls.Channel{Name: name, Term: 9, Mode: walimpls.ReadWrite})
	require.Truef(t, errors.Is(err, errDeleting), "an open of a channel whose deletion failed: %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the open waited CreateTimeout for the topic to go")

	refuse.Store(false)
	require.NoError(t, b.Delete(ctx, name))
	wb := open(t, b, name, 0, walimpls.ReadWrite)
	appendOK(t, wb, msg(t, "new", nil))
	assert.Equal(t, []string{"new"}, payloads(readN(t, wb, cursor.All(), 1)))
}

// TestDeleteOpenDuringDeletion opens the channel on another opener while a
// Delete's topic deletion is held at the broker: the open finds the
// deletion marker, waits for the topic to go, and opens a new channel.
func TestDeleteOpenDuringDeletion(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	const name = "del-racing-open"
	wa := open(t, a, name, 2, walimpls.ReadWrite)
	appendOK(t, wa, msg(t, "old", nil))

	reached, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.DeleteTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			close(reached)
			c.SleepControl(func() { <-release })
		}
		c.DropControl()
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deleted := make(chan error, 1)
	go func() { deleted <- b.Delete(ctx, name) }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		close(release)
		require.FailNow(t, "Delete never deleted the topic")
	}
	opened := make(chan error, 1)
	var w2 walimpls.WALImpl
	go func() {
		var err error
		w2, err = a.Open(ctx, walimpls.Channel{Name: name, Term: 1, Mode: walimpls.ReadWrite})
		opened <- err
	}()
	select {
	case err := <-opened:
		require.FailNowf(t, "the open did not wait for the deletion", "err %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-deleted)
	require.NoError(t, <-opened)
	defer w2.Close()
	appendOK(t, w2, msg(t, "new", nil))
	got := payloads(readN(t, w2, cursor.All(), 1))
	assert.Equal(t, []string{"new"}, got)
	assert.False(t, slices.Contains(got, "old"))
}

// TestWaitTopicGoneAcceptsANewTopic: a Delete and an open on another node
// both wait for the deleted topic to go; the open may see it go first and
// create the new topic before the Delete looks again. The Delete must take
// the new topic (another ID) for gone, not wait for it to go too.
func TestWaitTopicGoneAcceptsANewTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newOpener(t, testConfig(c))
	const name = "del-new-incarnation"
	topic := o.cfg.topicName(name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	w := open(t, o, name, 1, walimpls.ReadWrite)
	appendOK(t, w, msg(t, "old", nil))
	old, err := o.freshTopic(ctx, topic)
	require.NoError(t, err)
	require.True(t, old.exists)
	require.NotEqual(t, topicID{}, old.id, "kfake lists topic IDs")
	require.NoError(t, o.Delete(ctx, name))
	open(t, o, name, 1, walimpls.ReadWrite)
	cur, err := o.freshTopic(ctx, topic)
	require.NoError(t, err)
	require.True(t, cur.exists)
	require.NotEqual(t, old.id, cur.id, "the name has a new topic")

	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	require.NoError(t, o.waitTopicGone(short, topic, old.id), "the deleted topic is gone; the new one is not it")
	require.True(t, listed(cur, cur.id))
	require.True(t, listed(cur, topicID{}), "without an ID, any topic of the name is listed")
	require.False(t, listed(cur, old.id))
}
