package pulsar

import (
	"context"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"

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

	mu       sync.Mutex
	closed   bool
	scanners lifecycle.Group[*scanner]
	trunc    msgID // highest truncation point known; valid if hasTrunc
	hasTrunc bool
	wr       *writer  // nil for ReadOnly; set before the watcher starts
	watch    *watcher // set by Open before the WAL is shared
}

var _ walimpls.WALImpl = (*wal)(nil)

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
	// The durable subscriptions keep the log and the meta records from
	// retention until Truncate acknowledges them.
	for _, t := range []string{w.topic, w.metaTopic} {
		if err := w.o.ensureSubscription(ctx, t); err != nil {
			return err
		}
	}
	w.wr = newWriter(w)
	if err := w.startWatcher(); err != nil {
		return err
	}
	if err := w.o.writeMeta(ctx, w.metaTopic, map[string]string{
		metaKind: metaClaim, metaTerm: strconvI(w.ch.Term), metaNonce: w.nonce,
	}); err != nil {
		return err
	}
	return w.wr.start(ctx)
}

// checkWinner reads the meta topic and returns a FencedError unless this
// WAL's claim wins.
func (w *wal) checkWinner(ctx context.Context) error {
	st, err := w.o.readMeta(ctx, w.metaTopic)
	if err != nil {
		return err
	}
	if st.winnerNonce == w.nonce {
		return nil
	}
	return fencedError(w.ch.Name, w.ch.Term, st.maxTerm)
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

func (w *wal) setTrunc(id msgID, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok && (!w.hasTrunc || w.trunc.compare(id) < 0) {
		w.trunc, w.hasTrunc = id, true
	}
}

func (w *wal) truncPoint() (msgID, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.trunc, w.hasTrunc
}

// Append implements walimpls.WALImpl: the payload becomes the message
// payload and every property a message property.
func (w *wal) Append(ctx context.Context, m message.Message) (message.ID, error) {
	if w.isClosed() {
		return message.ID{}, w.closedErr()
	}
	if w.wr == nil {
		return message.ID{}, errors.Wrapf(walimpls.ErrReadOnly, "pulsar: append to channel %q", w.ch.Name)
	}
	if size := m.Size(); size > w.declared {
		return message.ID{}, &walimpls.TooLargeError{Size: size, Limit: w.declared}
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, err
	}
	id, err := w.wr.append(ctx, m)
	if err != nil {
		return message.ID{}, err
	}
	return message.NewID(id), nil
}

// Truncate implements walimpls.WALImpl. It records the truncation point in
// the meta topic (reads below it fail with ErrPositionGone from then on,
// on every node that opens the channel later), then acknowledges the
// entries before upTo's entry cumulatively on the durable subscription, so
// that the broker's retention may delete them.
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
	if last := fromPulsar(lasts[0]); last.entry < 0 || id.compare(last) > 0 {
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
