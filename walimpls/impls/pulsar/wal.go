package pulsar

import (
	"context"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// wal is one channel's WAL: the channel's topic and its meta topic.
type wal struct {
	o         *Opener
	ch        walimpls.Channel
	topic     string
	metaTopic string
	declared  int // Capabilities.MaxMessageBytes
	log       *slog.Logger
	nonce     string // identifies this WAL's term claim

	truncMu sync.Mutex // serializes Truncate
	// trunc is the highest truncation point known, nil if none. Every
	// scanner checks it before each delivery, hence no lock.
	trunc atomic.Pointer[msgID]
	// deleted is set once the channel is known to be deleted; see
	// finishDeleted.
	deleted atomic.Bool

	mu       sync.Mutex
	closed   bool
	scanners lifecycle.Group[*scanner]
	wr       *writer  // nil for ReadOnly; set before the watcher starts
	watch    *watcher // set by Open before the WAL is shared
}

var (
	_ walimpls.WALImpl       = (*wal)(nil)
	_ walimpls.AsyncAppender = (*wal)(nil)
)

func newWAL(o *Opener, ch walimpls.Channel) *wal {
	return &wal{
		o: o, ch: ch,
		topic:     o.cfg.topicName(ch.Name),
		metaTopic: o.cfg.metaTopicName(ch.Name),
		declared:  o.Capabilities().MaxMessageBytes,
		log:       o.log.With("channel", ch.Name, "term", ch.Term, "mode", ch.Mode.String()),
		nonce:     newNonce(),
	}
}

// startWriter claims the channel's term and takes the topic over; see the
// package documentation for the protocol.
func (w *wal) startWriter(ctx context.Context, st metaState) error {
	if st.maxTerm > w.ch.Term {
		return fencedError(w.ch.Name, w.ch.Term, st.maxTerm)
	}
	if h := w.o.hooks.beforeClaim; h != nil {
		h(ctx, w)
	}
	// The durable subscriptions keep the log and the meta records from
	// retention until Truncate acknowledges them.
	for _, t := range []string{w.topic, w.metaTopic} {
		if err := w.o.ensureSubscription(ctx, t); err != nil {
			return err
		}
	}
	w.wr = newWriter(w)
	if err := w.startWatcher(st); err != nil {
		return err
	}
	// A higher claim written since the fold, seen by the watcher already:
	// give up before claiming.
	if err := w.wr.fencedErr(); err != nil {
		return err
	}
	if err := w.o.writeMeta(ctx, w.metaTopic, map[string]string{
		metaKind: metaClaim, metaTerm: strconvI(w.ch.Term), metaNonce: w.nonce,
	}); err != nil {
		return err
	}
	return w.wr.start(ctx)
}

// checkWinner folds the meta topic and returns a FencedError unless this
// WAL's claim wins: it is the claim of the highest term, and the last one
// of that term. Called once the claim is written, so that the fold holds
// it: a meta topic without it (gone, or created anew and holding other
// claims or none) is a deleted channel's, and so is one that ends in a
// deletion record; the FencedError then has Deleted set. The fold's
// truncation point is taken over as well.
func (w *wal) checkWinner(ctx context.Context) error {
	st, err := w.o.readMeta(ctx, w.metaTopic, w.nonce)
	switch {
	case isTopicNotFound(err):
		return deletedError(w.ch.Name, w.ch.Term)
	case err != nil:
		return err
	case st.deleted, !st.mineSeen:
		return deletedError(w.ch.Name, w.ch.Term)
	}
	w.setTrunc(st.trunc, st.hasTrunc)
	if st.winnerNonce == w.nonce {
		return nil
	}
	return fencedError(w.ch.Name, w.ch.Term, st.maxTerm)
}

// finishDeleted finishes the WAL for good once its channel is known to be
// deleted, by this opener's Delete or by a deletion record its meta
// watcher saw: its scanners end with ErrPositionGone, its writer is fenced
// with a FencedError with Deleted set (which closes its producer), and it
// no longer reads or writes the channel's topics (Read and Last fail), so
// that nothing of it makes a broker that creates topics on use create the
// deleted topics again. The scanners end before the writer is fenced: a
// Delete that waits for the writer's producer to go finds no reader of
// this WAL left on the topics it deletes next. Idempotent.
func (w *wal) finishDeleted() {
	if !w.deleted.CompareAndSwap(false, true) {
		return
	}
	w.log.Warn("the channel was deleted")
	w.scanners.StopAll(goneDeleted(w.ch.Name))
	if w.wr != nil {
		w.wr.fenceDeleted(deletedError(w.ch.Name, w.ch.Term))
	}
}

func (w *wal) WALName() string           { return Name }
func (w *wal) Channel() walimpls.Channel { return w.ch }

func (w *wal) closedErr() error {
	return errors.Wrapf(walimpls.ErrClosed, "pulsar: channel %q", w.ch.Name)
}

func (w *wal) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// setTrunc raises the truncation point to id (if ok); it never lowers it.
func (w *wal) setTrunc(id msgID, ok bool) {
	if !ok {
		return
	}
	for {
		cur := w.trunc.Load()
		if cur != nil && cur.compare(id) >= 0 {
			return
		}
		if w.trunc.CompareAndSwap(cur, &id) {
			return
		}
	}
}

func (w *wal) truncPoint() (msgID, bool) {
	if p := w.trunc.Load(); p != nil {
		return *p, true
	}
	return msgID{}, false
}

// AppendBatch implements walimpls.WALImpl: each message becomes one Pulsar
// message (the payload its payload, every property a message property),
// handed to the producer in slice order after the batch's sizes were
// checked. The batch is not atomic (see the package documentation): a
// failure returns the ids of the leading messages whose receipts arrived.
// Refusals decided before anything was handed to the producer (a closed or
// fenced WAL, a done context) are marked walimpls.MarkNotStored.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	if err := w.checkAppend(ctx, msgs); err != nil || len(msgs) == 0 {
		return nil, err
	}
	ids, err := w.wr.append(ctx, msgs)
	return pulsarIDs(ids), err
}

// AppendBatchAsync implements walimpls.AsyncAppender: AppendBatch queued
// for the writer without waiting, answered from the writer's goroutine.
func (w *wal) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	if err := w.checkAppend(ctx, msgs); err != nil || len(msgs) == 0 {
		done(nil, err)
		return
	}
	w.wr.appendAsync(ctx, msgs, func(ids []msgID, err error) { done(pulsarIDs(ids), err) })
}

// checkAppend refuses an append that cannot go to the writer: a closed or
// read-only WAL, a message above the limit, a done context.
func (w *wal) checkAppend(ctx context.Context, msgs []message.Message) error {
	if w.isClosed() {
		return walimpls.MarkNotStored(w.closedErr())
	}
	if w.wr == nil {
		return errors.Wrapf(walimpls.ErrReadOnly, "pulsar: append to channel %q", w.ch.Name)
	}
	for i, m := range msgs {
		if size := m.Size(); size > w.declared {
			return errors.Wrapf(&walimpls.TooLargeError{Size: size, Limit: w.declared},
				"pulsar: append to channel %q: message %d of %d", w.ch.Name, i, len(msgs))
		}
	}
	if err := ctx.Err(); err != nil {
		return walimpls.MarkNotStored(err)
	}
	return nil
}

func pulsarIDs(ids []msgID) []message.ID {
	if len(ids) == 0 {
		return nil
	}
	out := make([]message.ID, len(ids))
	for i, id := range ids {
		out[i] = message.NewID(id)
	}
	return out
}

// Truncate implements walimpls.WALImpl. It folds the term claims (a
// writer that another claim beats is fenced and removes nothing, even
// before its meta watcher has seen that claim), records the truncation
// point in the meta topic (reads below it fail with ErrPositionGone from
// then on, on every node that opens the channel later), then acknowledges
// the entries before upTo's entry cumulatively on the durable subscription,
// so that the broker's retention may delete them.
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if w.isClosed() {
		return w.closedErr()
	}
	if w.wr == nil {
		return errors.Wrapf(walimpls.ErrReadOnly, "pulsar: truncate channel %q", w.ch.Name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	id, ok := idOf(upTo)
	if !ok {
		return errors.Wrapf(walimpls.ErrInvalidPosition, "pulsar: truncate channel %q at %s", w.ch.Name, upTo)
	}
	if err := w.wr.fencedErr(); err != nil {
		return err
	}
	w.truncMu.Lock()
	defer w.truncMu.Unlock()
	// An open that returned before this fold began wrote its claim before
	// it: a Truncate that starts after a winner's Open returned is refused.
	if err := w.wr.checkClaim(ctx); err != nil {
		if errors.Is(err, walimpls.ErrFenced) {
			return err
		}
		return errors.Wrapf(err, "pulsar: truncate channel %q: term claims", w.ch.Name)
	}
	if cur, ok := w.truncPoint(); ok && id.compare(cur) <= 0 {
		return nil
	}
	c, err := w.o.subscribe(ctx, w.topic)
	if err != nil {
		return errors.Wrapf(err, "pulsar: truncate channel %q", w.ch.Name)
	}
	defer c.Close()
	lasts, err := c.GetLastMessageIDs()
	if err != nil || len(lasts) != 1 {
		return errors.Wrapf(errors.Join(err, errors.New("no last message id")), "pulsar: truncate channel %q", w.ch.Name)
	}
	switch last, ok := lastOf(lasts[0]); {
	case !ok:
		return errors.Wrapf(walimpls.ErrInvalidPosition, "pulsar: truncate channel %q at %s: the log is empty", w.ch.Name, id)
	case id.compare(last) > 0:
		return errors.Wrapf(walimpls.ErrInvalidPosition, "pulsar: truncate channel %q at %s: the log ends at %s", w.ch.Name, id, last)
	}
	if err := w.o.writeMeta(ctx, w.metaTopic, map[string]string{metaKind: metaTrunc, metaTruncID: id.Marshal()}); err != nil {
		return errors.Wrapf(err, "pulsar: truncate channel %q", w.ch.Name)
	}
	w.setTrunc(id, true)
	// Acknowledge whole entries only: the entry holding upTo stays. The
	// first entry of a ledger has nothing before it in its ledger to name;
	// the next truncation acknowledges the earlier ledgers.
	if id.entry > 0 {
		ack := msgID{ledger: id.ledger, entry: id.entry - 1, batch: -1, partition: id.partition}
		if err := c.AckIDCumulative(ack.toPulsar()); err != nil {
			w.log.Warn("acknowledging the truncated entries failed; retention keeps them", "upTo", id, "err", err)
		}
	}
	return nil
}

// Last implements walimpls.WALImpl: the topic's last message id, asked
// with GET_LAST_MESSAGE_ID through a short-lived reader of the shared
// client (on read-only and fenced WALs alike). The broker names the last
// message of a batch entry by its batch index, so Last equals the ID the
// append of that message returned; a topic that never held a message (or
// does not exist) gives the zero ID. The client's calls take no context:
// the request runs on a goroutine of the opener, and Last returns when ctx
// ends.
func (w *wal) Last(ctx context.Context) (message.ID, error) {
	if w.isClosed() {
		return message.ID{}, w.closedErr()
	}
	if w.deleted.Load() {
		return message.ID{}, goneDeleted(w.ch.Name)
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, err
	}
	id, ok, err := w.lastStored(ctx)
	switch {
	case err != nil:
		return message.ID{}, err
	case !ok:
		return message.ID{}, nil
	}
	return message.NewID(id), nil
}

// lastStored asks the broker for the log topic's last message id (see
// Last); ok is false when the topic holds no message. The client's calls
// take no context: the request runs on a goroutine the opener waits for on
// Close, and lastStored returns ctx's error when ctx ends first.
func (w *wal) lastStored(ctx context.Context) (id msgID, ok bool, err error) {
	type result struct {
		id  msgID
		ok  bool
		err error
	}
	res := make(chan result, 1)
	if !w.o.goBackground(func() {
		id, ok, err := w.o.lastMessage(w.topic)
		res <- result{id, ok, err}
	}) {
		return msgID{}, false, w.closedErr()
	}
	select {
	case r := <-res:
		switch {
		case w.isClosed():
			return msgID{}, false, w.closedErr()
		case r.err != nil:
			return msgID{}, false, errors.Wrapf(r.err, "pulsar: last message of channel %q", w.ch.Name)
		}
		return r.id, r.ok, nil
	case <-ctx.Done():
		return msgID{}, false, ctx.Err()
	}
}

// Close implements walimpls.WALImpl: it stops the writer and every scanner.
// It is idempotent.
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
	w.o.forget(w)
	w.log.Debug("closed")
	return nil
}

// shutdown stops the writer, which closes its producer and client, and
// the meta watcher.
func (w *wal) shutdown() {
	if w.wr != nil {
		w.wr.close()
	}
	if w.watch != nil {
		w.watch.stop()
	}
}
