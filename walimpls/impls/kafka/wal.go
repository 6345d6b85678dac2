package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

// wal is one channel's WAL: partition 0 of the channel's topic.
type wal struct {
	o     *Opener
	ch    walimpls.Channel
	topic string
	// topicID is the topic's ID when the WAL opened (zero on brokers
	// without IDs): a topic of that name under another ID is a new channel.
	topicID topicID
	// limit is the broker's batch limit for the topic; declared is what
	// callers see (limit minus the framing overhead).
	limit    int
	declared int
	log      *slog.Logger
	nonce    nonce // identifies this WAL's term claim
	// life ends when the WAL closes; calls that may wait long (Last) end
	// with it.
	life    context.Context
	endLife context.CancelFunc
	// fence is set once, to the *walimpls.FencedError every later Append
	// and Truncate returns. Only a transactional writer is ever fenced by
	// another writer; a Delete through this WAL's opener fences every WAL,
	// replacing an earlier fence (see markDeleted).
	fence *claimown.Fence
	// deleted is set by markDeleted: the channel was deleted through this
	// WAL's opener.
	deleted atomic.Bool

	mu       sync.Mutex
	closed   bool
	scanners lifecycle.Group[*scanner]
	wr       appender // nil for ReadOnly; set before the WAL is shared
	// closing counts the clients of ended scanners still being closed
	// (closeClient); Close waits for them.
	closing sync.WaitGroup
}

var (
	_ walimpls.WALImpl       = (*wal)(nil)
	_ walimpls.AsyncAppender = (*wal)(nil)
	_ walimpls.BatchReader   = (*wal)(nil)
)

func newWAL(o *Opener, ch walimpls.Channel, topic string, id topicID, limit int) *wal {
	w := &wal{
		o: o, ch: ch, topic: topic, topicID: id,
		limit: limit, declared: limit - recordOverhead,
		log:   o.log.With("channel", ch.Name, "term", ch.Term, "mode", ch.Mode.String()),
		nonce: newNonce(),
		fence: claimown.NewFence(),
	}
	w.life, w.endLife = context.WithCancel(context.Background())
	return w
}

// startWriter starts the appender. With transactions it first claims the
// channel's term (see the package documentation for the protocol); without
// them the backend cannot fence, claims nothing and accepts every term.
func (w *wal) startWriter(ctx context.Context) error {
	if w.o.cfg.DisableTransactions {
		pw, err := newPlainWriter(w)
		if err != nil {
			return err
		}
		w.wr = pw
		return nil
	}
	cs, err := w.o.readClaims(ctx, w.topic, w.topicID)
	switch {
	case errors.Is(err, errTopicGone):
		return errors.Wrapf(errDeleting, "kafka: open channel %q: its topic vanished", w.ch.Name)
	case err != nil:
		return err
	case cs.deleting():
		return errors.Wrapf(errDeleting, "kafka: open channel %q: its claims hold the deletion marker", w.ch.Name)
	}
	if m := cs.maxTerm(); m > w.ch.Term {
		return fencedError(w.ch.Name, w.ch.Term, m)
	}
	off, err := w.o.writeClaim(ctx, w.topic, w.ch.Term, w.nonce)
	if err != nil {
		return err
	}
	tw, err := newTxnWriter(ctx, w)
	if err != nil {
		return err
	}
	w.wr = tw
	w.o.dropClaimsBefore(ctx, w.topic, off)
	return nil
}

// fencing reports whether this WAL is a writer that can be fenced: a
// ReadWrite WAL with transactions.
func (w *wal) fencing() bool { return w.wr != nil && !w.o.cfg.DisableTransactions }

// fencedErr returns the error of a fenced WAL, nil while it is not fenced.
func (w *wal) fencedErr() error { return w.fence.Err() }

// setFenced records err (a *walimpls.FencedError) as the WAL's fence, the
// first time only, and returns the recorded one.
func (w *wal) setFenced(err error) error {
	err, first := w.fence.Set(err)
	if first {
		w.o.m.fenced.Inc()
		w.log.Warn("fenced", "err", err)
	}
	return err
}

// checkFence reads the claims and, when this WAL's claim no longer wins,
// records the fence and returns it. Any other error leaves the WAL as it
// was.
func (w *wal) checkFence(ctx context.Context) error {
	err := w.checkWinner(ctx)
	var fe *walimpls.FencedError
	if errors.As(err, &fe) {
		return w.setFenced(err)
	}
	return err
}

// checkWinner reads the claims and returns a FencedError unless this WAL's
// claim wins. The channel was deleted (a FencedError with Deleted set)
// when the deletion marker wins or the topic is gone or new.
func (w *wal) checkWinner(ctx context.Context) error {
	cs, err := w.o.readClaims(ctx, w.topic, w.topicID)
	switch {
	case errors.Is(err, errTopicGone):
		return deletedError(w.ch, "kafka: the channel's topic was deleted")
	case err != nil:
		return err
	}
	win, ok := cs.winner()
	switch {
	case ok && win.nonce == w.nonce:
		return nil
	case ok && win.isDeletion():
		return deletedError(w.ch, "kafka: the channel is being deleted")
	case ok:
		return fencedError(w.ch.Name, w.ch.Term, win.term)
	}
	// No claim at all. Only a later winner deletes ours, and it keeps its
	// own: the claim partition was emptied by hand, or the topic is a new
	// one, created after a Delete. Either way the channel is not ours.
	if gone, err := w.o.topicGone(ctx, w.topic, w.topicID); err == nil && gone {
		return deletedError(w.ch, "kafka: the channel's topic was deleted")
	}
	return fencedError(w.ch.Name, w.ch.Term, 0)
}

// markDeleted finishes the WAL of a channel its own opener is deleting: its
// appends and truncations fail with a FencedError with Deleted set from now
// on, its scanners end with ErrPositionGone, and Read and Last fail with
// ErrPositionGone.
func (w *wal) markDeleted() {
	w.deleted.Store(true)
	if prev, _ := w.fence.Replace(deletedError(w.ch, "kafka: deleted through this opener"), nil); prev == nil && w.wr != nil {
		w.o.m.fenced.Inc()
	}
	w.log.Info("channel deleted through this opener")
	w.scanners.StopAll(w.goneErr("scanner"))
}

// goneErr is the ErrPositionGone error of a WAL whose channel was deleted.
func (w *wal) goneErr(what string) error {
	return errors.Wrapf(walimpls.ErrPositionGone, "kafka: %s of channel %q: the channel was deleted", what, w.ch.Name)
}

func (w *wal) WALName() string           { return Name }
func (w *wal) Channel() walimpls.Channel { return w.ch }

func (w *wal) closedErr() error {
	return errors.Wrapf(walimpls.ErrClosed, "kafka: channel %q", w.ch.Name)
}

func (w *wal) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// AppendBatch implements walimpls.WALImpl: each message becomes one record
// of the log partition (the payload its value, every property a header),
// produced in slice order. With transactions the batch is one transaction,
// whole or nothing; without, the IDs of a stored prefix come back with an
// error (see the package documentation, "Appends").
//
// Refusals decided before any record reaches the broker (a closed or a
// fenced WAL, a context already done) are marked with
// walimpls.MarkNotStored; a message above the limit refuses the whole batch
// with a *walimpls.TooLargeError.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	recs, sizes, err := w.records(ctx, msgs)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	start := time.Now()
	offs, err := w.wr.appendBatch(ctx, recs, sizes)
	w.o.m.observeAppend(start, sizes, len(offs), err)
	return seqIDs(offs), err
}

// AppendBatchAsync implements walimpls.AsyncAppender: AppendBatch, handed
// to the writer without waiting (the transactional writer's queue, or the
// client's buffer when transactions are off), answered from the writer's
// goroutine.
func (w *wal) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	recs, sizes, err := w.records(ctx, msgs)
	if err != nil || len(recs) == 0 {
		done(nil, err)
		return
	}
	start := time.Now()
	w.wr.appendBatchAsync(ctx, recs, sizes, func(offs []int64, err error) {
		w.o.m.observeAppend(start, sizes, len(offs), err)
		done(seqIDs(offs), err)
	})
}

// records checks an append (the WAL, its fence, the sizes, ctx) and
// returns the records to produce with each message's Size; none for an
// empty batch.
func (w *wal) records(ctx context.Context, msgs []message.Message) ([]*kgo.Record, []int, error) {
	if w.isClosed() {
		return nil, nil, walimpls.MarkNotStored(w.closedErr())
	}
	if w.wr == nil {
		return nil, nil, errors.Wrapf(walimpls.ErrReadOnly, "kafka: append to channel %q", w.ch.Name)
	}
	if err := w.fencedErr(); err != nil {
		return nil, nil, walimpls.MarkNotStored(err)
	}
	sizes := make([]int, len(msgs))
	for i, m := range msgs {
		sizes[i] = m.Size()
		if sizes[i] > w.declared || wireSize(m) > w.limit {
			return nil, nil, w.tooLarge(sizes[i], i, len(msgs))
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, walimpls.MarkNotStored(err)
	}
	if len(msgs) == 0 {
		return nil, nil, nil
	}
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = w.record(m)
	}
	return recs, sizes, nil
}

func seqIDs(offs []int64) []message.ID {
	if len(offs) == 0 {
		return nil
	}
	ids := make([]message.ID, len(offs))
	for i, off := range offs {
		ids[i] = message.NewSeqID(Name, off)
	}
	return ids
}

// tooLarge is the error of message i of a batch of n whose size is above
// the limit.
func (w *wal) tooLarge(size, i, n int) error {
	err := error(&walimpls.TooLargeError{Size: size, Limit: w.declared})
	if n > 1 {
		return errors.Wrapf(err, "kafka: append to channel %q: message %d of %d", w.ch.Name, i, n)
	}
	return errors.Wrapf(err, "kafka: append to channel %q", w.ch.Name)
}

func (w *wal) record(m message.Message) *kgo.Record {
	props := m.Properties()
	hs := make([]kgo.RecordHeader, 0, props.Len())
	for k, v := range props.Pairs() {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	// Sorted, so that a record's headers do not depend on map order.
	slices.SortFunc(hs, func(a, b kgo.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	return &kgo.Record{Topic: w.topic, Partition: logPartition, Value: m.Payload(), Headers: hs}
}

// Truncate implements walimpls.WALImpl with DeleteRecords on the log
// partition. A writer with transactions reads the claims right before it
// deletes: a WAL whose claim no longer wins is fenced and removes nothing
// (see the package documentation for the window this leaves).
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if w.isClosed() {
		return w.closedErr()
	}
	if w.wr == nil {
		return errors.Wrapf(walimpls.ErrReadOnly, "kafka: truncate channel %q", w.ch.Name)
	}
	if err := w.fencedErr(); err != nil {
		return err
	}
	seq, err := message.SeqOf(Name, upTo)
	if err != nil {
		return errors.WithStack(fmt.Errorf("kafka: truncate channel %q: %w: %w", w.ch.Name, err, walimpls.ErrInvalidPosition))
	}
	start, end, err := w.o.bounds(ctx, w.topic, logPartition, true)
	if err != nil {
		return errors.Wrapf(err, "kafka: truncate channel %q", w.ch.Name)
	}
	// Delete up to just after the last message before seq, not up to seq:
	// offsets are not dense, and a log start above the last removed
	// message would make StartAfter(it) look truncated.
	deleteAt := int64(-1) // none: a no-op
	if seq > start {
		if err := w.checkTruncatePoint(ctx, seq, end); err != nil {
			return err
		}
		prev, found, err := w.lastBelow(ctx, start, seq)
		if err != nil {
			return errors.Wrapf(err, "kafka: truncate channel %q", w.ch.Name)
		}
		if found {
			deleteAt = prev + 1
		}
	}
	if w.fencing() {
		if err := w.checkFence(ctx); err != nil {
			if errors.Is(err, walimpls.ErrFenced) {
				return err
			}
			return errors.Wrapf(err, "kafka: truncate channel %q: term claim check", w.ch.Name)
		}
	}
	if deleteAt < 0 {
		return nil
	}
	// Kafka cannot make the deletion conditional on the claims: bound how
	// long after the check it may still land.
	ctx, cancel := context.WithTimeout(ctx, w.o.cfg.RequestTimeout)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: w.topic, Partition: logPartition, At: deleteAt})
	resp, err := w.o.adm.DeleteRecords(ctx, os)
	if err == nil {
		if r, ok := resp.Lookup(w.topic, logPartition); ok {
			err = r.Err
		}
	}
	if err != nil {
		return errors.Wrapf(err, "kafka: truncate channel %q before offset %d", w.ch.Name, deleteAt)
	}
	return nil
}

// checkTruncatePoint returns ErrInvalidPosition unless a message is stored
// at or after seq, below the last stable offset end.
func (w *wal) checkTruncatePoint(ctx context.Context, seq, end int64) error {
	if seq >= end {
		return errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: truncate channel %q at %d: the log ends at %d", w.ch.Name, seq, end)
	}
	// Offsets are not dense (transaction markers, aborted records): make
	// sure a message is stored at or after seq.
	for next := seq; next < end; {
		fp, after, err := w.o.fetchRaw(ctx, w.topic, logPartition, next, 1<<20, true)
		if err != nil {
			return errors.Wrapf(err, "kafka: truncate channel %q", w.ch.Name)
		}
		if len(fp.Records) > 0 {
			return nil
		}
		if after <= next {
			break
		}
		next = after
	}
	return errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: truncate channel %q at %d: no message at or after it", w.ch.Name, seq)
}

// Close implements walimpls.WALImpl: it stops the appender and every
// scanner. It is idempotent.
func (w *wal) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.shutdown()
	w.scanners.StopAll(w.closedErr())
	w.closing.Wait()
	w.o.forget(w)
	w.log.Debug("closed")
	return nil
}

// closeClient closes an ended scanner's client in the background: closing
// a franz-go client takes milliseconds (its connections and loops end one
// by one), which a scanner's Close - and an open, or a retried append,
// that reads a little and closes - need not wait for. Close waits for it.
func (w *wal) closeClient(cl *kgo.Client) {
	w.closing.Add(1)
	go func() {
		defer w.closing.Done()
		cl.Close()
	}()
}

// shutdown ends the WAL's life and stops the appender.
func (w *wal) shutdown() {
	w.endLife()
	if w.wr != nil {
		w.wr.close()
	}
}
