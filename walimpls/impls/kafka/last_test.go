package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func last(t testing.TB, w walimpls.WALImpl) message.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := w.Last(ctx)
	require.NoError(t, err)
	return id
}

// requireSameID fails unless got is want (both zero counts as the same).
func requireSameID(t testing.TB, want, got message.ID) {
	t.Helper()
	if want.IsZero() {
		require.True(t, got.IsZero(), "want the zero ID, got %s", got)
		return
	}
	require.False(t, got.IsZero(), "want %s, got the zero ID", want)
	require.True(t, want.EQ(got), "want %s, got %s", want, got)
}

// TestLast pins Last with transactions on and off: zero on a channel that
// never held a message, the last acknowledged append after appends (not the
// end of the partition minus one: commit markers take offsets), the same on
// a read-only WAL of another node, unchanged by truncation (Truncate keeps
// the last message), then ErrClosed.
func TestLast(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o, other := newOpener(t, cfg), newOpener(t, cfg)
		w := open(t, o, "last", 1, walimpls.ReadWrite)
		ro := open(t, other, "last", 0, walimpls.ReadOnly)
		requireSameID(t, message.ID{}, last(t, w))
		requireSameID(t, message.ID{}, last(t, ro))

		var ids []message.ID
		for i := range 5 {
			ids = append(ids, appendOK(t, w, msg(t, fmt.Sprint(i), nil)))
			requireSameID(t, ids[i], last(t, w))
			requireSameID(t, ids[i], last(t, ro))
		}
		require.NoError(t, w.Truncate(context.Background(), ids[2]))
		requireSameID(t, ids[4], last(t, w))
		require.NoError(t, w.Truncate(context.Background(), ids[4]))
		requireSameID(t, ids[4], last(t, w))
		requireSameID(t, ids[4], last(t, ro))
		got := readN(t, ro, cursor.All(), 1)
		requireSameID(t, ids[4], got[0].ID())

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := w.Last(ctx)
		require.ErrorIs(t, err, context.Canceled)

		require.NoError(t, w.Close())
		_, err = w.Last(context.Background())
		require.ErrorIs(t, err, walimpls.ErrClosed)
		require.NoError(t, other.Close())
		_, err = ro.Last(context.Background())
		require.ErrorIs(t, err, walimpls.ErrClosed)
	})
}

// TestLastAbortedTail puts aborted transactions at the end of the log, long
// enough that Last must widen its backwards window several times, and
// after a truncation to the last message, so that the search reaches the
// log start.
func TestLastAbortedTail(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	o := newOpener(t, cfg)
	name := "aborted-tail"
	topic := o.cfg.topicName(name)
	w := open(t, o, name, 1, walimpls.ReadWrite)

	// Aborted records only: the channel never held a message.
	openForeignTxn(t, cfg, topic, 3).end(t, false)
	requireSameID(t, message.ID{}, last(t, w))

	var want message.ID
	for i := range 3 {
		want = appendOK(t, w, msg(t, fmt.Sprint(i), nil))
	}
	openForeignTxn(t, cfg, topic, 1).end(t, false)
	requireSameID(t, want, last(t, w))
	// 300 aborted records and their markers: windows of 4, 32 and 256
	// offsets hold no message.
	for range 3 {
		openForeignTxn(t, cfg, topic, 100).end(t, false)
	}
	requireSameID(t, want, last(t, w))

	// Truncated to the last message, the search ends at the log start.
	require.NoError(t, w.Truncate(context.Background(), want))
	requireSameID(t, want, last(t, w))

	// A committed record of another producer is a message too.
	f := openForeignTxn(t, cfg, topic, 2)
	f.end(t, true)
	got := readN(t, w, cursor.StartAfter(want), 2)
	requireSameID(t, got[1].ID(), last(t, w))
}

// TestLastWaitsForOpenTransaction pins that Last does not answer while a
// transaction written before the call is open (its records may belong to a
// commit already acknowledged whose markers are not written yet), that
// closing the WAL ends the wait, and that Last answers once the transaction
// ends.
func TestLastWaitsForOpenTransaction(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	o := newOpener(t, cfg)
	name := "open-txn"
	w := open(t, o, name, 1, walimpls.ReadWrite)
	want := appendOK(t, w, msg(t, "kept", nil))

	f := openForeignTxn(t, cfg, o.cfg.topicName(name), 5)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := w.Last(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "Last answered while a transaction below the high watermark was open")

	// Closing the WAL ends a Last that waits. Last is waiting once it
	// listed the offsets three times (the high watermark, then the last
	// stable offset twice; each listing asks for the start too).
	ro := open(t, o, name, 0, walimpls.ReadOnly)
	var lists atomic.Int64
	waiting := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		if lists.Add(1) >= 6 {
			once.Do(func() { close(waiting) })
		}
		return nil, nil, false
	})
	closed := make(chan error, 1)
	go func() {
		_, err := ro.Last(context.Background())
		closed <- err
	}()
	select {
	case <-waiting:
	case err := <-closed:
		require.FailNow(t, "Last returned while a transaction was open", "%v", err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "watchdog: Last listed no offsets")
	}
	require.NoError(t, ro.Close())
	select {
	case err := <-closed:
		require.ErrorIs(t, err, walimpls.ErrClosed)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Close did not end a waiting Last")
	}

	type result struct {
		id  message.ID
		err error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id, err := w.Last(ctx)
		res <- result{id, err}
	}()
	f.end(t, false)
	r := <-res
	require.NoError(t, r.err)
	requireSameID(t, want, r.id)
}

// TestLastUnderConcurrentAppends checks the contract's bound while appends
// go on: every append acknowledged before Last was called is at or below
// what it returns, and what it returns is a message readers deliver.
func TestLastUnderConcurrentAppends(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o := newOpener(t, cfg)
		w := open(t, o, "last-conc", 1, walimpls.ReadWrite)
		var (
			maxAcked atomic.Int64
			stop     = make(chan struct{})
			wg       sync.WaitGroup
		)
		maxAcked.Store(-1)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id, err := walimpls.Append(context.Background(), w, msg(t, fmt.Sprintf("%d-%d", g, i), nil))
					if !assert.NoError(t, err) {
						return
					}
					s := seq(t, id)
					for cur := maxAcked.Load(); s > cur && !maxAcked.CompareAndSwap(cur, s); cur = maxAcked.Load() {
					}
				}
			}()
		}
		var lasts []message.ID
		for range 20 {
			before := maxAcked.Load()
			id := last(t, w)
			if before >= 0 {
				require.GreaterOrEqual(t, seq(t, id), before, "an append acknowledged before Last is above it")
			}
			if !id.IsZero() {
				lasts = append(lasts, id)
			}
		}
		close(stop)
		wg.Wait()
		require.NotEmpty(t, lasts)
		for _, id := range lasts[max(0, len(lasts)-3):] {
			got := readN(t, w, cursor.StartFrom(id), 1)
			requireSameID(t, id, got[0].ID())
		}
	})
}

// foreignTxn is a transaction of a producer other than the WAL's, on the
// log partition of a channel's topic.
type foreignTxn struct {
	cl *kgo.Client
	id string
}

var foreignTxnIDs atomic.Int64

// openForeignTxn produces n records to the log partition of topic in a
// transaction it leaves open.
func openForeignTxn(t *testing.T, cfg Config, topic string, n int) *foreignTxn {
	t.Helper()
	id := fmt.Sprintf("foreign-%d", foreignTxnIDs.Add(1))
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.SeedBrokers...),
		kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxVersions(pre890p2Versions()),
		kgo.ProducerLinger(0),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.BeginTransaction())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Partition: logPartition, Value: fmt.Appendf(nil, "foreign-%d", i)}
	}
	require.NoError(t, cl.ProduceSync(ctx, rs...).FirstErr())
	return &foreignTxn{cl: cl, id: id}
}

// end commits or aborts the transaction with an EndTxn of its own, not
// trusting the client's bookkeeping of the partitions in it (see
// txnWriter.commitOpenTxn), and closes the client.
func (f *foreignTxn) end(t *testing.T, commit bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, epoch, err := f.cl.ProducerID(ctx)
	require.NoError(t, err)
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = f.id
	req.ProducerID, req.ProducerEpoch, req.Commit = id, epoch, commit
	resp, err := req.RequestWith(ctx, f.cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	f.cl.Close()
}

// TestTruncateAcrossAbortedRecords truncates to a message that follows an
// aborted transaction: the log start ends up just after the last removed
// message, so StartAfter(it) is valid and starts at the kept message, while
// StartFrom(it) and StartAfter(anything earlier) are ErrPositionGone.
func TestTruncateAcrossAbortedRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	o := newOpener(t, cfg)
	name := "trunc-aborted"
	w := open(t, o, name, 1, walimpls.ReadWrite)
	var ids []message.ID
	for i := range 3 {
		ids = append(ids, appendOK(t, w, msg(t, fmt.Sprint(i), nil)))
	}
	openForeignTxn(t, cfg, o.cfg.topicName(name), 10).end(t, false)
	kept := appendOK(t, w, msg(t, "kept", nil))
	require.Greater(t, seq(t, kept)-seq(t, ids[2]), int64(10), "precondition: aborted records between the last removed and the kept message")

	require.NoError(t, w.Truncate(context.Background(), kept))
	got := readN(t, w, cursor.StartAfter(ids[2]), 1)
	requireSameID(t, kept, got[0].ID())
	got = readN(t, w, cursor.All(), 1)
	requireSameID(t, kept, got[0].ID())
	for _, p := range []cursor.Policy{cursor.StartFrom(ids[2]), cursor.StartAfter(ids[1])} {
		_, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: p})
		require.ErrorIs(t, err, walimpls.ErrPositionGone, "%s", p)
	}
	// Truncating again to the kept message, or to a marker or an aborted
	// record below it, removes nothing.
	require.NoError(t, w.Truncate(context.Background(), kept))
	require.NoError(t, w.Truncate(context.Background(), message.NewSeqID(Name, seq(t, kept)-1)))
	got = readN(t, w, cursor.StartAfter(ids[2]), 1)
	requireSameID(t, kept, got[0].ID())
	requireSameID(t, kept, last(t, w))
}
