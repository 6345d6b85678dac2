package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// batchOf returns n messages with payloads prefix-0 ... prefix-(n-1), each
// padded to pad bytes when pad is larger.
func batchOf(t testing.TB, prefix string, n, pad int) []message.Message {
	t.Helper()
	msgs := make([]message.Message, n)
	for i := range msgs {
		p := fmt.Sprintf("%s-%d", prefix, i)
		if len(p) < pad {
			p += strings.Repeat(".", pad-len(p))
		}
		msgs[i] = msg(t, p, map[string]string{"i": strconv.Itoa(i)})
	}
	return msgs
}

func appendBatch(t testing.TB, w walimpls.WALImpl, msgs []message.Message) ([]message.ID, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.AppendBatch(ctx, msgs)
}

// requireContiguous checks that ids are consecutive offsets: with
// transactions a batch split across two transactions would have a commit
// marker, which takes an offset, between its parts.
func requireContiguous(t testing.TB, ids []message.ID) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		require.Equal(t, seq(t, ids[0])+int64(i), seq(t, ids[i]), "message %d of the batch: %v", i, ids)
	}
}

// uncommittedPayloads returns the payloads of every record in the log
// partition, read_uncommitted: aborted records included, markers not.
func uncommittedPayloads(t testing.TB, cfg Config, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.SeedBrokers...), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {logPartition: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cl.Close()
	_, hwm, err := listBounds(ctx, kadm.NewClient(cl), topic, logPartition, false)
	require.NoError(t, err)
	var out []string
	for next := int64(0); next < hwm; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s up to %d", topic, hwm)
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, string(r.Value))
			}
		})
	}
	return out
}

// TestAppendBatchConcurrent appends batches of 1 to 20 messages from
// concurrent writers, next to single appends, with transactions grouping
// at most 8 records: every batch gets increasing IDs in slice order
// (consecutive offsets with transactions: a batch is never split across
// transactions, nor does a single append land inside one), and reading
// the channel gives every acknowledged message once, in ID order.
func TestAppendBatchConcurrent(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		cfg.MaxBatchRecords, cfg.MaxBatchBytes = 8, 256
		o := newOpener(t, cfg)
		require.Equal(t, !disable, o.Capabilities().AtomicBatch)
		w := open(t, o, "batch-conc", 1, walimpls.ReadWrite)
		const writers, batches, singles = 6, 12, 20
		var (
			mu    sync.Mutex
			acked = map[int64]string{}
			wg    sync.WaitGroup
		)
		ack := func(id message.ID, p string) {
			mu.Lock()
			defer mu.Unlock()
			acked[seq(t, id)] = p
		}
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range batches {
					msgs := batchOf(t, fmt.Sprintf("w%d-b%d", g, b), 1+(b*5+g)%20, 0)
					ids, err := appendBatch(t, w, msgs)
					if !assert.NoError(t, err) || !assert.Len(t, ids, len(msgs)) {
						return
					}
					for i := 1; i < len(ids); i++ {
						assert.True(t, ids[i-1].LT(ids[i]), "w%d b%d: %v", g, b, ids)
					}
					if !disable {
						requireContiguous(t, ids)
					}
					for i, id := range ids {
						ack(id, string(msgs[i].Payload()))
					}
				}
			}()
		}
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range singles {
					p := fmt.Sprintf("s%d-%d", g, i)
					ack(appendOK(t, w, msg(t, p, nil)), p)
				}
			}()
		}
		wg.Wait()
		got := readN(t, w, cursor.All(), len(acked))
		seen := map[string]bool{}
		for _, m := range got {
			p := string(m.Payload())
			assert.Equal(t, acked[seq(t, m.ID())], p, "message at %s", m.ID())
			assert.False(t, seen[p], "%s read twice", p)
			seen[p] = true
		}
		s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(got[len(got)-1].ID())})
		require.NoError(t, err)
		defer s.Close()
		nothingMore(t, s, 100*time.Millisecond)
	})
}

// TestAppendBatchAboveGroupLimits pins that a batch above MaxBatchRecords
// and MaxBatchBytes is not split: it is one transaction of its own (one
// EndTxn), its offsets are consecutive, and it reads back in order. It is
// also larger than the client's record buffer, so producing it blocks
// inside the transaction until the first records are acknowledged.
func TestAppendBatchAboveGroupLimits(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.MaxBatchRecords, cfg.MaxBatchBytes = 4, 100
	cfg.ClientOptions = []kgo.Opt{kgo.MaxBufferedRecords(16)}
	o := newOpener(t, cfg)
	w := open(t, o, "batch-big", 1, walimpls.ReadWrite)
	warm := appendOK(t, w, msg(t, "warm", nil))
	tw := w.(*wal).wr.(*txnWriter)
	before := tw.endTxnWrites.Load()
	msgs := batchOf(t, "big", 60, 40) // 60 records, 60*44 bytes
	ids, err := appendBatch(t, w, msgs)
	require.NoError(t, err)
	require.Len(t, ids, len(msgs))
	assert.Equal(t, int64(1), tw.endTxnWrites.Load()-before, "transactions the batch took")
	requireContiguous(t, ids)
	got := readN(t, w, cursor.StartAfter(warm), len(msgs))
	for i, m := range got {
		require.True(t, ids[i].EQ(m.ID()), "message %d: read %s, acknowledged %s", i, m.ID(), ids[i])
		require.Equal(t, string(msgs[i].Payload()), string(m.Payload()))
		require.True(t, msgs[i].Properties().Equal(m.Properties()))
	}
}

// TestAppendBatchTooLarge pins that a message above the declared limit
// refuses the whole batch before anything is produced, in both modes: the
// messages before it are not stored either.
func TestAppendBatchTooLarge(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o := newOpener(t, cfg)
		declared := o.Capabilities().MaxMessageBytes
		w := open(t, o, "batch-large", 1, walimpls.ReadWrite)
		warm := appendOK(t, w, msg(t, "warm", nil))
		bad := []message.Message{msg(t, "fine-0", nil), message.Restore(make([]byte, declared+1), nil), msg(t, "fine-2", nil)}
		ids, err := appendBatch(t, w, bad)
		require.ErrorIs(t, err, walimpls.ErrTooLarge)
		assert.True(t, walimpls.NotStored(err), "%v", err)
		assert.Nil(t, ids)
		var tl *walimpls.TooLargeError
		require.True(t, errors.As(err, &tl))
		assert.Equal(t, walimpls.TooLargeError{Size: declared + 1, Limit: declared}, *tl)
		assert.Contains(t, err.Error(), "message 1 of 3")
		requireSameID(t, warm, last(t, w))
		after := appendOK(t, w, msg(t, "after", nil))
		got := readN(t, w, cursor.All(), 2)
		assert.Equal(t, []string{"warm", "after"}, payloads(got))
		assert.True(t, after.EQ(got[1].ID()))
	})
}

// TestAppendBatchRefusals pins the refusals decided before anything is
// produced: an empty batch stores nothing; a done context, a closed WAL
// and a WAL known to be fenced fail with errors marked NotStored; a
// read-only WAL fails with ErrReadOnly. A batch that learns of the fence
// stores nothing either (its transaction never commits).
func TestAppendBatchRefusals(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o := newOpener(t, cfg)
		w := open(t, o, "batch-refused", 1, walimpls.ReadWrite)
		two := batchOf(t, "refused", 2, 0)

		ids, err := appendBatch(t, w, nil)
		require.NoError(t, err)
		assert.Empty(t, ids)
		ids, err = appendBatch(t, w, []message.Message{})
		require.NoError(t, err)
		assert.Empty(t, ids)
		requireSameID(t, message.ID{}, last(t, w))

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = w.AppendBatch(ctx, two)
		require.ErrorIs(t, err, context.Canceled)
		assert.True(t, walimpls.NotStored(err), "%v", err)

		ro := open(t, newOpener(t, cfg), "batch-refused", 1, walimpls.ReadOnly)
		_, err = appendBatch(t, ro, two)
		require.ErrorIs(t, err, walimpls.ErrReadOnly)

		stored := appendOK(t, w, msg(t, "stored", nil))
		if !disable {
			winner := open(t, newOpener(t, cfg), "batch-refused", 2, walimpls.ReadWrite)
			// The first batch learns of the fence from the broker...
			_, err = appendBatch(t, w, two)
			require.ErrorIs(t, err, walimpls.ErrFenced)
			// ...later ones, empty ones included, are refused up front.
			for _, b := range [][]message.Message{two, nil} {
				ids, err = appendBatch(t, w, b)
				require.ErrorIs(t, err, walimpls.ErrFenced)
				assert.True(t, walimpls.NotStored(err), "%v", err)
				assert.Nil(t, ids)
			}
			requireSameID(t, stored, last(t, winner))
		}

		require.NoError(t, w.Close())
		for _, b := range [][]message.Message{two, nil} {
			ids, err = appendBatch(t, w, b)
			require.ErrorIs(t, err, walimpls.ErrClosed)
			assert.True(t, walimpls.NotStored(err), "%v", err)
			assert.Nil(t, ids)
		}
		requireSameID(t, stored, last(t, ro))
		got := readN(t, ro, cursor.All(), 1)
		assert.Equal(t, []string{"stored"}, payloads(got))
	})
}

// smallRecordsConfig makes every record of batchOf(..., recordPad) its own
// record batch, so that each goes to the broker in a produce request of its
// own: a batch then reaches the log in parts.
func smallRecordsConfig(c *kfake.Cluster, disable bool) Config {
	cfg := testConfig(c)
	cfg.DisableTransactions = disable
	cfg.MaxMessageBytes = 2048
	return cfg
}

const recordPad = 1200

// failNthProduce fails the nth produce request to the log partition of
// topic from now on with a non-retryable error.
func failNthProduce(c *kfake.Cluster, topic string, nth int) *kfake.FaultHandle {
	n := 0
	return c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{logPartition},
		Err: kerr.InvalidRecord,
		When: func(kmsg.Request) bool {
			n++
			return n == nth
		},
	})
}

// TestAppendBatchAtomicProduceFailure fails the third produce request of a
// transactional batch of five: the first two records reach the log, and the
// transaction is aborted, so read_committed readers see nothing of the
// batch. The writer goes on.
func TestAppendBatchAtomicProduceFailure(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := smallRecordsConfig(c, false)
	o := newOpener(t, cfg)
	topic := o.cfg.topicName("batch-abort")
	w := open(t, o, "batch-abort", 1, walimpls.ReadWrite)
	appendOK(t, w, msg(t, "warm", nil))
	h := failNthProduce(c, topic, 3)
	msgs := batchOf(t, "m", 5, recordPad)
	ids, err := appendBatch(t, w, msgs)
	require.Error(t, err)
	assert.Nil(t, ids, "an atomic batch returns no prefix")
	assert.NotErrorIs(t, err, walimpls.ErrFenced)
	assert.True(t, walimpls.IsRetryable(err), "%v", err)
	assert.Equal(t, 1, h.Hits())

	after := appendOK(t, w, msg(t, "after", nil))
	got := readN(t, w, cursor.All(), 2)
	assert.Equal(t, []string{"warm", "after"}, payloads(got))
	assert.True(t, after.EQ(got[1].ID()))
	s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(after)})
	require.NoError(t, err)
	defer s.Close()
	nothingMore(t, s, 100*time.Millisecond)
	// The test means something only if part of the batch was in the log.
	raw := uncommittedPayloads(t, cfg, topic)
	assert.Contains(t, raw, string(msgs[0].Payload()), "records in the log: %d", len(raw))
	assert.Contains(t, raw, string(msgs[1].Payload()))
}

// TestAppendBatchFencedMidBatch fences a transactional writer while its
// batch is half written: the second of its produce requests waits at the
// broker until a higher term has opened (which aborts the writer's open
// transaction). The batch fails with ErrFenced and read_committed readers
// see nothing of it, though its first record is in the log.
func TestAppendBatchFencedMidBatch(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := smallRecordsConfig(c, false)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	topic := a.cfg.topicName("batch-fenced")
	wa := open(t, a, "batch-fenced", 1, walimpls.ReadWrite)
	appendOK(t, wa, msg(t, "warm", nil))

	reached, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !producesTo(req.(*kmsg.ProduceRequest), topic, logPartition) || n.Add(1) != 2 {
			return nil, nil, false
		}
		close(reached)
		c.SleepControl(func() { <-release })
		return nil, nil, false // now handled as usual: with a stale epoch
	})

	msgs := batchOf(t, "m", 4, recordPad)
	type result struct {
		ids []message.ID
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := appendBatch(t, wa, msgs)
		done <- result{ids, err}
	}()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		close(release)
		require.FailNow(t, "the batch's second produce request never came")
	}
	wb := open(t, b, "batch-fenced", 2, walimpls.ReadWrite)
	close(release)
	res := <-done
	require.ErrorIs(t, res.err, walimpls.ErrFenced)
	assert.Nil(t, res.ids)

	b1 := appendOK(t, wb, msg(t, "b1", nil))
	got := readN(t, wb, cursor.All(), 2)
	assert.Equal(t, []string{"warm", "b1"}, payloads(got))
	assert.True(t, b1.EQ(got[1].ID()))
	s, err := wb.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(b1)})
	require.NoError(t, err)
	defer s.Close()
	nothingMore(t, s, 100*time.Millisecond)
	assert.Contains(t, uncommittedPayloads(t, cfg, topic), string(msgs[0].Payload()), "the first part of the batch reached the log")
}

func producesTo(req *kmsg.ProduceRequest, topic string, partition int32) bool {
	for _, tp := range req.Topics {
		if tp.Topic != topic {
			continue
		}
		for _, p := range tp.Partitions {
			if p.Partition == partition {
				return true
			}
		}
	}
	return false
}

// TestAppendBatchPrefixWithoutTransactions fails the third produce request
// of a batch of six without transactions: the batch is not atomic, and the
// IDs returned with the error are those of the two messages before it,
// read back where they say. The error does not claim the rest was not
// stored: the producer may store later records (it resets its sequence and
// goes on), and whatever of the batch follows comes in slice order.
func TestAppendBatchPrefixWithoutTransactions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := smallRecordsConfig(c, true)
	o := newOpener(t, cfg)
	require.False(t, o.Capabilities().AtomicBatch)
	w := open(t, o, "batch-prefix", 1, walimpls.ReadWrite)
	warm := appendOK(t, w, msg(t, "warm", nil))
	h := failNthProduce(c, o.cfg.topicName("batch-prefix"), 3)
	msgs := batchOf(t, "m", 6, recordPad)
	ids, err := appendBatch(t, w, msgs)
	require.Error(t, err)
	assert.Equal(t, 1, h.Hits())
	assert.False(t, walimpls.NotStored(err), "%v", err)
	require.Len(t, ids, 2, "the stored prefix: %v (%v)", ids, err)
	assert.ErrorIs(t, err, kerr.InvalidRecord)
	assert.Contains(t, err.Error(), "message 2 of 6")

	after := appendOK(t, w, msg(t, "after", nil))
	s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(warm)})
	require.NoError(t, err)
	defer s.Close()
	got := collect(t, s, 2, 10*time.Second)
	for i := range 2 {
		assert.True(t, ids[i].EQ(got[i].ID()), "message %d: read %s, returned %s", i, got[i].ID(), ids[i])
		assert.Equal(t, string(msgs[i].Payload()), string(got[i].Payload()))
	}
	// The rest of the batch, whatever was stored of it, then "after".
	next := 3 // message 2 was refused
	var rest []string
	for {
		m := collect(t, s, 1, 10*time.Second)[0]
		if m.ID().EQ(after) {
			break
		}
		p := string(m.Payload())
		rest = append(rest, strings.TrimRight(p, "."))
		k := -1
		for i := next; i < len(msgs); i++ {
			if string(msgs[i].Payload()) == p {
				k = i
			}
		}
		require.GreaterOrEqual(t, k, next, "read %q out of slice order, or a refused message", p)
		next = k + 1
	}
	t.Logf("stored after the prefix: %v", rest)
}

// TestAppendBatchBrokerTooLarge gives a node a limit above the broker's:
// the broker refuses a record of a batch as too large. With transactions
// the whole batch fails with ErrTooLarge and nothing of it is visible;
// without, the IDs of the stored prefix come back with ErrTooLarge of
// unknown outcome for the rest.
func TestAppendBatchBrokerTooLarge(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		const brokerLimit = 64 << 10
		c := newCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(brokerLimit)}))
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		cfg.MaxMessageBytes = 1 << 20
		o := newOpener(t, cfg)
		w := open(t, o, "batch-broker-large", 1, walimpls.ReadWrite)
		warm := appendOK(t, w, msg(t, "warm", nil))
		big := make([]byte, brokerLimit+10)
		r := rand.New(rand.NewPCG(3, 4))
		for i := range big {
			big[i] = byte(r.Uint32())
		}
		msgs := []message.Message{msg(t, "a", nil), message.Restore(big, nil), msg(t, "c", nil)}
		ids, batchErr := appendBatch(t, w, msgs)
		require.ErrorIs(t, batchErr, walimpls.ErrTooLarge)
		var tl *walimpls.TooLargeError
		require.True(t, errors.As(batchErr, &tl))
		assert.Equal(t, len(big), tl.Size, "the largest refused message is named: %v", batchErr)
		if disable {
			assert.False(t, walimpls.NotStored(batchErr), "%v", batchErr)
			assert.LessOrEqual(t, len(ids), 1, "%v", batchErr)
		} else {
			assert.True(t, walimpls.NotStored(batchErr), "%v", batchErr)
			assert.Nil(t, ids)
		}
		after := appendOK(t, w, msg(t, "after", nil))
		s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(warm)})
		require.NoError(t, err)
		defer s.Close()
		var read []string
		for {
			m := collect(t, s, 1, DefaultTransactionTimeout/2)[0]
			if i := len(read); i < len(ids) {
				assert.True(t, ids[i].EQ(m.ID()), "prefix message %d: read %s, returned %s", i, m.ID(), ids[i])
			}
			read = append(read, string(m.Payload()))
			if m.ID().EQ(after) {
				break
			}
		}
		t.Logf("read after warm: %q (error: %v)", read, batchErr)
		if disable {
			assert.NotContains(t, read, string(big))
		} else {
			assert.Equal(t, []string{"after"}, read)
		}
	})
}
