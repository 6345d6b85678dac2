package kafka

import (
	"context"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// wal is one channel's WAL: partition 0 of the channel's topic.
type wal struct {
	o     *Opener
	ch    walimpls.Channel
	topic string
	// limit is the broker's batch limit for the topic; declared is what
	// callers see (limit minus the framing overhead).
	limit    int
	declared int
	log      *slog.Logger
	nonce    nonce // identifies this WAL's term claim

	mu       sync.Mutex
	closed   bool
	scanners lifecycle.Group[*scanner]
	wr       appender // nil for ReadOnly; set before the WAL is shared
}

var _ walimpls.WALImpl = (*wal)(nil)

func newWAL(o *Opener, ch walimpls.Channel, topic string, limit int) *wal {
	return &wal{
		o: o, ch: ch, topic: topic,
		limit: limit, declared: limit - recordOverhead,
		log:   o.log.With("channel", ch.Name, "term", ch.Term, "mode", ch.Mode.String()),
		nonce: newNonce(),
	}
}

// startWriter claims the channel's term and starts the appender; see the
// package documentation for the protocol.
func (w *wal) startWriter(ctx context.Context) error {
	cs, err := w.o.readClaims(ctx, w.topic)
	if err != nil {
		return err
	}
	if m := cs.maxTerm(); m > w.ch.Term {
		return fencedError(w.ch.Name, w.ch.Term, m)
	}
	off, err := w.o.writeClaim(ctx, w.topic, w.ch.Term, w.nonce)
	if err != nil {
		return err
	}
	if w.o.cfg.DisableTransactions {
		if err := w.checkWinner(ctx); err != nil {
			return err
		}
		pw, err := newPlainWriter(w)
		if err != nil {
			return err
		}
		w.wr = pw
	} else {
		tw, err := newTxnWriter(ctx, w)
		if err != nil {
			return err
		}
		w.wr = tw
	}
	w.o.dropClaimsBefore(ctx, w.topic, off)
	return nil
}

// checkWinner reads the claims and returns a FencedError unless this WAL's
// claim wins.
func (w *wal) checkWinner(ctx context.Context) error {
	cs, err := w.o.readClaims(ctx, w.topic)
	if err != nil {
		return err
	}
	win, ok := cs.winner()
	if ok && win.nonce == w.nonce {
		return nil
	}
	current := win.term
	if !ok {
		// Our claim is gone: only a later winner deletes claims.
		current = 0
	}
	return fencedError(w.ch.Name, w.ch.Term, current)
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

// Append implements walimpls.WALImpl: the payload becomes the record value
// and every property a record header.
func (w *wal) Append(ctx context.Context, m message.Message) (message.ID, error) {
	if w.isClosed() {
		return message.ID{}, w.closedErr()
	}
	if w.wr == nil {
		return message.ID{}, errors.Wrapf(walimpls.ErrReadOnly, "kafka: append to channel %q", w.ch.Name)
	}
	if size := m.Size(); size > w.declared || wireSize(m) > w.limit {
		return message.ID{}, &walimpls.TooLargeError{Size: size, Limit: w.declared}
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, err
	}
	off, err := w.wr.append(ctx, w.record(m), m.Size())
	if err != nil {
		return message.ID{}, err
	}
	return message.NewSeqID(Name, off), nil
}

func (w *wal) record(m message.Message) *kgo.Record {
	props := m.Properties()
	keys := props.Keys()
	hs := make([]kgo.RecordHeader, 0, len(keys))
	for _, k := range keys {
		v, _ := props.Get(k)
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: w.topic, Partition: logPartition, Value: m.Payload(), Headers: hs}
}

// Truncate implements walimpls.WALImpl with DeleteRecords on the log
// partition.
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if w.isClosed() {
		return w.closedErr()
	}
	if w.wr == nil {
		return errors.Wrapf(walimpls.ErrReadOnly, "kafka: truncate channel %q", w.ch.Name)
	}
	seq, err := message.SeqOf(Name, upTo)
	if err != nil {
		return errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: truncate channel %q: %v", w.ch.Name, err)
	}
	start, end, err := w.o.bounds(ctx, w.topic, logPartition, true)
	if err != nil {
		return errors.Wrapf(err, "kafka: truncate channel %q", w.ch.Name)
	}
	if seq <= start {
		return nil
	}
	if seq >= end {
		return errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: truncate channel %q at %d: the log ends at %d", w.ch.Name, seq, end)
	}
	// Offsets are not dense (transaction markers, aborted records): make
	// sure a message is stored at or after seq.
	found := false
	for next := seq; next < end && !found; {
		fp, after, err := w.o.fetchRaw(ctx, w.topic, logPartition, next, 1<<20, true)
		if err != nil {
			return errors.Wrapf(err, "kafka: truncate channel %q", w.ch.Name)
		}
		found = len(fp.Records) > 0
		if after <= next {
			break
		}
		next = after
	}
	if !found {
		return errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: truncate channel %q at %d: no message at or after it", w.ch.Name, seq)
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: w.topic, Partition: logPartition, At: seq})
	resp, err := w.o.adm.DeleteRecords(ctx, os)
	if err == nil {
		if r, ok := resp.Lookup(w.topic, logPartition); ok {
			err = r.Err
		}
	}
	if err != nil {
		return errors.Wrapf(err, "kafka: truncate channel %q at %d", w.ch.Name, seq)
	}
	return nil
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
	w.o.forget(w)
	w.log.Debug("closed")
	return nil
}

// shutdown stops the appender.
func (w *wal) shutdown() {
	if w.wr != nil {
		w.wr.close()
	}
}
