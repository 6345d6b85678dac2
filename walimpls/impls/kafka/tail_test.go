package kafka

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// readTail reads a DeliverTail(n) scanner up to and including the message
// last, and returns what it delivered.
func readTail(t *testing.T, w walimpls.WALImpl, n int, last message.ID) []message.Immutable {
	t.Helper()
	return walimplstest.ReadUntil(t, w, cursor.Tail(n), last, 10*time.Second)
}

// TestDeliverTail pins DeliverTail on a log of single appends, with
// transactions (two offsets per message) and without (one): the scanner
// delivers a suffix of the log holding at least n messages, every message
// when n is the log's length or more (math.MaxInt included), and for a
// small n no more than 2n: what the first window of offsets holds, not
// the log. An n below 1 is refused.
func TestDeliverTail(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o := newOpener(t, cfg)
		w := open(t, o, "tail", 1, walimpls.ReadWrite)
		ids := appendMany(t, w, "m", 20)
		last := ids[len(ids)-1]

		for _, n := range []int{1, 2, 3, 7} {
			got := readTail(t, w, n, last)
			requireSuffix(t, ids, got)
			require.GreaterOrEqual(t, len(got), n, "tail(%d)", n)
			require.LessOrEqual(t, len(got), 2*n, "tail(%d) read more than its first window", n)
			if !disable {
				require.Len(t, got, n, "tail(%d): one message per two offsets", n)
			}
		}
		for _, n := range []int{19, 20, 21, 1000, math.MaxInt} {
			got := readTail(t, w, n, last)
			requireSuffix(t, ids, got)
			require.GreaterOrEqual(t, len(got), min(n, len(ids)), "tail(%d)", n)
		}
		got := readTail(t, w, 1000, last)
		require.True(t, ids[0].EQ(got[0].ID()), "tail(1000) of 20 messages starts at the first")

		ro := open(t, newOpener(t, cfg), "tail", 0, walimpls.ReadOnly)
		requireSuffix(t, ids, readTail(t, ro, 4, last))

		for _, n := range []int{0, -1, math.MinInt} {
			_, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Tail(n)})
			require.ErrorIs(t, err, walimpls.ErrInvalidPosition, "tail(%d)", n)
		}
	})
}

// TestDeliverTailEmpty reads the tail of a channel that never held a
// message: the scanner starts at the log start and delivers what is
// appended after Read.
func TestDeliverTailEmpty(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newOpener(t, testConfig(c))
	w := open(t, o, "tail-empty", 1, walimpls.ReadWrite)
	s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Tail(3)})
	require.NoError(t, err)
	defer s.Close()
	id := appendOK(t, w, msg(t, "first", nil))
	got := collect(t, s, 1, 10*time.Second)
	require.True(t, id.EQ(got[0].ID()))
}

// TestDeliverTailTruncated reads tails after truncations: a tail longer
// than what is kept starts at the first kept message (the log start, never
// a removed position), a shorter one still ends at the last message, and a
// log truncated to its last message gives that message.
func TestDeliverTailTruncated(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o := newOpener(t, cfg)
		w := open(t, o, "tail-trunc", 1, walimpls.ReadWrite)
		ids := appendMany(t, w, "m", 10)
		last := ids[len(ids)-1]
		require.NoError(t, w.Truncate(context.Background(), ids[6]))

		for _, n := range []int{4, 5, 100} {
			got := readTail(t, w, n, last)
			requireSuffix(t, ids, got)
			require.True(t, ids[6].EQ(got[0].ID()), "tail(%d) starts at the first kept message", n)
		}
		got := readTail(t, w, 2, last)
		requireSuffix(t, ids, got)
		require.GreaterOrEqual(t, len(got), 2)

		require.NoError(t, w.Truncate(context.Background(), last))
		got = readTail(t, w, 3, last)
		require.Len(t, got, 1)
	})
}

// TestDeliverTailAbortedRecords puts aborted transactions between the
// messages at the end of the log: offsets that hold no message, so the
// search widens its window several times before it has counted n.
func TestDeliverTailAbortedRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	o := newOpener(t, cfg)
	name := "tail-aborted"
	topic := o.cfg.topicName(name)
	w := open(t, o, name, 1, walimpls.ReadWrite)
	ids := appendMany(t, w, "a", 5)
	for range 3 {
		openForeignTxn(t, cfg, topic, 100).end(t, false)
	}
	got := readTail(t, w, 2, ids[4])
	requireSuffix(t, ids, got)
	require.GreaterOrEqual(t, len(got), 2)

	ids = append(ids, appendOK(t, w, msg(t, "b", nil)))
	got = readTail(t, w, 3, ids[5])
	requireSuffix(t, ids, got)
	require.GreaterOrEqual(t, len(got), 3)
	got = readTail(t, w, 6, ids[5])
	require.Len(t, got, 6)
}

// TestDeliverTailBatches reads tails of a log written in batches: offsets
// are dense inside a transaction, so the first window holds more than n.
func TestDeliverTailBatches(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newOpener(t, testConfig(c))
	w := open(t, o, "tail-batches", 1, walimpls.ReadWrite)
	var ids []message.ID
	for b := range 3 {
		got, err := appendBatch(t, w, batchOf(t, fmt.Sprint(b), 10, 0))
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	for _, n := range []int{1, 5, 10, 11, 29, 30} {
		got := readTail(t, w, n, ids[len(ids)-1])
		requireSuffix(t, ids, got)
		require.GreaterOrEqual(t, len(got), n, "tail(%d)", n)
		require.LessOrEqual(t, len(got), 2*n, "tail(%d)", n)
	}
}

// TestDeliverTailTruncationOvertakesSearch truncates while Read searches
// for the start: its first fetch waits at the broker until the truncation
// has moved the log start above the offset it asks for. The search starts
// again from the new log start, and the scanner delivers what is kept.
func TestDeliverTailTruncationOvertakesSearch(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newOpener(t, testConfig(c))
	name := "tail-overtaken"
	topic := o.cfg.topicName(name)
	w := open(t, o, name, 1, walimpls.ReadWrite)
	ids := appendMany(t, w, "m", 20)
	md, err := o.adm.Metadata(context.Background(), topic)
	require.NoError(t, err)
	topicID := md.Topics[topic].ID

	reached, release := make(chan struct{}), make(chan struct{})
	var fetches atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		// The search's fetches do not wait for data (a scanner's do).
		if !fetchesFrom(req.(*kmsg.FetchRequest), topic, topicID, logPartition) || req.(*kmsg.FetchRequest).MaxWaitMillis != 0 || fetches.Add(1) != 1 {
			return nil, nil, false
		}
		close(reached)
		c.SleepControl(func() { <-release })
		return nil, nil, false // now handled as usual: below the new log start
	})

	type result struct {
		s   walimpls.Scanner
		err error
	}
	done := make(chan result, 1)
	go func() {
		// 15 of 20 one-message transactions: the first window is 30 of
		// the 40 offsets, above the first 5 messages.
		s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Tail(15)})
		done <- result{s, err}
	}()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		close(release)
		require.FailNow(t, "the search never fetched")
	}
	require.NoError(t, w.Truncate(context.Background(), ids[12]))
	close(release)
	res := <-done
	require.NoError(t, res.err)
	defer res.s.Close()
	got := collect(t, res.s, 8, 10*time.Second)
	requireSuffix(t, ids, got)
	require.True(t, ids[12].EQ(got[0].ID()))
}

// fetchesFrom reports whether req fetches a partition of topic, named or,
// from Fetch v13 on, given by its id.
func fetchesFrom(req *kmsg.FetchRequest, topic string, id [16]byte, partition int32) bool {
	for _, tp := range req.Topics {
		if tp.Topic != topic && tp.TopicID != id {
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
