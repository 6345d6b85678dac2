package s3

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// wal is one channel's WAL of an Opener: a writer (ReadWrite) and the
// scanners it started.
type wal struct {
	o     *Opener
	hub   *hub
	ch    walimpls.Channel
	epoch epochEntry // ReadWrite: the epoch it writes
	wr    *writer    // nil ReadOnly
	log   *slog.Logger
	// acked is one past the last slot the writer acknowledged.
	acked atomic.Uint64

	closed atomic.Bool
	scans  lifecycle.Group[*scanner]
}

var (
	_ walimpls.WALImpl       = (*wal)(nil)
	_ walimpls.BatchReader   = (*wal)(nil)
	_ walimpls.AsyncAppender = (*wal)(nil)
)

func newWAL(o *Opener, h *hub, ch walimpls.Channel, e epochEntry) *wal {
	w := &wal{o: o, hub: h, ch: ch, epoch: e, log: o.log.With("channel", ch.Name, "term", ch.Term)}
	if ch.Mode == walimpls.ReadWrite {
		w.log = w.log.With("epoch", e.Epoch)
		w.wr = newWriter(o, w, e)
	}
	return w
}

func (w *wal) WALName() string           { return Name }
func (w *wal) Channel() walimpls.Channel { return w.ch }

// checkWrite returns why this WAL may not write now, marked not stored.
func (w *wal) checkWrite(ctx context.Context, op string) error {
	if w.closed.Load() {
		return walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "s3: %s on %s", op, w.ch))
	}
	if w.ch.Mode == walimpls.ReadOnly {
		return errors.Wrapf(walimpls.ErrReadOnly, "s3: %s on %s", op, w.ch)
	}
	if err := w.wr.failure(); err != nil {
		return walimpls.MarkNotStored(err)
	}
	if err := ctx.Err(); err != nil {
		return walimpls.MarkNotStored(errors.Wrapf(err, "s3: %s on %s", op, w.ch))
	}
	return nil
}

// encode checks a batch and lays it out as a request: one record per
// message, each its head (encoded here) and its payload. With keep false
// the payload is the caller's bytes, not copied: an async caller may reuse
// them only once done is called, and the writer is done with them by then
// (a copy of every payload into a buffer of the backend's own was the
// most of its CPU after the SDK's hash). With keep true the records are
// copied into one buffer of the backend's: AppendBatch may return while
// its flush is still on its way (its context ended), and its caller may
// then reuse what it passed.
func (w *wal) encode(msgs []message.Message, keep bool) (*request, error) {
	limit := w.o.cfg.MaxMessageBytes
	heads, payloads := 0, 0
	for i, m := range msgs {
		if s := m.Size(); s > limit {
			return nil, errors.Wrapf(&walimpls.TooLargeError{Size: s, Limit: limit},
				"s3: append to %s: message %d of %d", w.ch, i, len(msgs))
		}
		heads += recordHeadSize(m)
		payloads += len(m.Payload())
	}
	r := &request{count: len(msgs), bytes: heads + payloads}
	size := heads
	r.pieces = r.inline[:0]
	if keep {
		size += payloads
	} else if len(msgs) > 1 {
		r.pieces = make([][]byte, 0, 2*len(msgs))
	}
	b := w.o.arena.alloc(size)
	for i, m := range msgs {
		start := len(b)
		var err error
		if b, err = appendRecordHead(b, m); err != nil {
			return nil, errors.Wrapf(err, "s3: append to %s: message %d of %d", w.ch, i, len(msgs))
		}
		if keep {
			b = append(b, m.Payload()...)
			continue
		}
		r.pieces = append(r.pieces, b[start:len(b):len(b)])
		if p := m.Payload(); len(p) > 0 {
			r.pieces = append(r.pieces, p)
		}
	}
	if keep {
		r.pieces = append(r.pieces, b) // the records, whole
	}
	return r, nil
}

// AppendBatchAsync implements walimpls.AsyncAppender.
func (w *wal) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	if err := w.checkWrite(ctx, "append"); err != nil {
		done(nil, err)
		return
	}
	r, err := w.encode(msgs, false)
	if err != nil {
		done(nil, err)
		return
	}
	if len(msgs) == 0 {
		done(nil, nil)
		return
	}
	w.wr.submit(ctx, r, done)
}

// AppendBatch implements walimpls.WALImpl: the batch goes into one object,
// whole.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	if err := w.checkWrite(ctx, "append"); err != nil {
		return nil, err
	}
	r, err := w.encode(msgs, true) // it may return before the flush ends
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	type answer struct {
		ids []message.ID
		err error
	}
	res := make(chan answer, 1)
	queued := w.wr.submit(ctx, r, func(ids []message.ID, err error) { res <- answer{ids, err} })
	select {
	case a := <-res:
		return a.ids, a.err
	case <-ctx.Done():
		if w.wr.cancel(queued, ctx.Err()) {
			a := <-res
			return a.ids, a.err
		}
		select {
		case a := <-res:
			return a.ids, a.err
		default:
		}
		// On its way to the store: the outcome is unknown.
		return nil, errors.Wrapf(ctx.Err(), "s3: append to %s", w.ch)
	}
}

// fenceLocal fences the writer with err (a Delete by this Opener).
func (w *wal) fenceLocal(err error) {
	if w.wr != nil {
		w.wr.fence(err)
	}
}

// Read implements walimpls.WALImpl.
func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	return w.read(ctx, opt, false)
}

// ReadBatches implements walimpls.BatchReader: a slice per object.
func (w *wal) ReadBatches(ctx context.Context, opt walimpls.ReadOption) (walimpls.BatchScanner, error) {
	return w.read(ctx, opt, true)
}

func (w *wal) read(ctx context.Context, opt walimpls.ReadOption, batches bool) (*scanner, error) {
	if w.closed.Load() {
		return nil, errors.Wrapf(walimpls.ErrClosed, "s3: read %s", w.ch)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "s3: read %s", w.ch)
	}
	start, m, err := w.startOf(ctx, opt.DeliverPolicy)
	if err != nil {
		return nil, err
	}
	s := newScanner(w, opt, start, m, batches)
	if !w.scans.Add(s) {
		return nil, errors.Wrapf(walimpls.ErrClosed, "s3: read %s", w.ch)
	}
	go s.run()
	return s, nil
}

// Close implements walimpls.WALImpl: the writer stops (see writer.close)
// and the scanners end with ErrClosed.
func (w *wal) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	if w.wr != nil {
		w.wr.close()
	}
	w.scans.StopAll(errors.Wrapf(walimpls.ErrClosed, "s3: scanner of %s", w.ch))
	w.o.forget(w)
	w.log.Debug("closed")
	return nil
}

// manifestNow reads the manifest, and publishes it to the Opener's
// scanners of the channel.
func (w *wal) manifestNow(ctx context.Context) (*manifest, string, error) {
	m, etag, err := w.o.getManifest(ctx, w.ch.Name)
	if err != nil {
		if errors.Is(err, errNotFound) {
			return nil, "", errors.Wrapf(walimpls.ErrPositionGone, "s3: %s: the channel's manifest is gone", w.ch)
		}
		return nil, "", err
	}
	w.hub.noteManifest(m)
	return m, etag, nil
}
