package local

import (
	"context"
	"sort"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// wal is one open channel of a Store.
type wal struct {
	o    *Opener
	s    *Store
	ch   *channel
	info walimpls.Channel

	// gen is the claim the ReadWrite open took on the channel (0 for
	// ReadOnly): the journal refuses its records once a later open claimed
	// the channel.
	gen uint64

	closed atomic.Bool
	// fenced is set once the writer is known to be fenced: by the flusher
	// when it publishes a later claim, or when the journal refuses a
	// record. The journal's decision at framing is the authoritative one.
	fenced atomic.Pointer[walimpls.FencedError]

	scanners lifecycle.Group[*scanner]
}

var (
	_ walimpls.WALImpl       = (*wal)(nil)
	_ walimpls.AsyncAppender = (*wal)(nil)
	_ walimpls.BatchReader   = (*wal)(nil)
)

// newWAL returns a WAL of ch, listed among its writers when ReadWrite; nil
// when the channel's deletion was published before (the caller looks the
// name up again: it is a new channel now).
func newWAL(o *Opener, ch *channel, info walimpls.Channel, gen uint64) *wal {
	w := &wal{o: o, s: o.s, ch: ch, info: info, gen: gen}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.deleted.Load() {
		return nil
	}
	if info.Mode == walimpls.ReadWrite {
		if ch.gen > gen {
			// A later open claimed the channel between our claim and now.
			w.fence(&walimpls.FencedError{CurrentTerm: ch.term})
		}
		ch.writers[w] = struct{}{}
	}
	return w
}

// WALName implements walimpls.WALImpl.
func (w *wal) WALName() string { return Name }

// Channel implements walimpls.WALImpl.
func (w *wal) Channel() walimpls.Channel { return w.info }

// fence marks the writer fenced as fe says (its CurrentTerm and Deleted;
// the channel and term are the writer's), unless it is already; it reports
// whether it was not. A deletion overrides an earlier fence: it is the
// last word on the channel.
func (w *wal) fence(fe *walimpls.FencedError) bool {
	mine := &walimpls.FencedError{Channel: w.info.Name, Term: w.info.Term, CurrentTerm: fe.CurrentTerm, Deleted: fe.Deleted}
	if fe.Deleted {
		return w.fenced.Swap(mine) == nil
	}
	return w.fenced.CompareAndSwap(nil, mine)
}

// fencedErr returns a copy of the writer's fence, nil if it is not known to
// be fenced.
func (w *wal) fencedErr() error {
	if fe := w.fenced.Load(); fe != nil {
		c := *fe
		return &c
	}
	return nil
}

// noteFenced records a fence the journal decided.
func (w *wal) noteFenced(err error) {
	var fe *walimpls.FencedError
	if errors.As(err, &fe) {
		w.fence(fe)
	}
}

// writable checks what every Append and Truncate checks first.
func (w *wal) writable(ctx context.Context, op string) error {
	if w.closed.Load() {
		return errors.Wrapf(walimpls.ErrClosed, "local: %s on %s", op, w.info)
	}
	if err := ctx.Err(); err != nil {
		return errors.Wrapf(err, "local: %s on %s", op, w.info)
	}
	if w.info.Mode == walimpls.ReadOnly {
		return errors.Wrapf(walimpls.ErrReadOnly, "local: %s on %s", op, w.info)
	}
	return w.fencedErr()
}

// AppendBatch implements walimpls.WALImpl: the messages are framed into the
// journal together, in slice order and contiguous in one segment, and
// recovery keeps them whole or drops them whole (format.go, Batches). Their
// IDs are consecutive. With SyncNone it returns once the batch is framed
// into the journal's write buffer; with SyncInterval once it is written;
// with SyncAlways once it is written and synced. Errors decided before the
// batch was framed (a message above MaxMessageBytes, a batch that fits in
// no segment, a closed, read-only or fenced WAL, a context already done)
// store nothing and are marked walimpls.MarkNotStored (submit marks its
// own); an error after that (a context that ends while the round is under
// way, a failed write or sync) leaves the outcome of the whole batch
// unknown. An empty batch stores nothing.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	seq, err := w.appendBatch(ctx, msgs)
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	return seqIDs(seq, len(msgs)), nil
}

// seqIDs returns the IDs of n messages from seq on.
func seqIDs(seq uint64, n int) []message.ID {
	ids := make([]message.ID, n)
	for i := range ids {
		ids[i] = message.NewSeqID(Name, int64(seq)+int64(i))
	}
	return ids
}

// appendBatch appends msgs as one batch and returns the seq of the first;
// the others have the seqs that follow.
func (w *wal) appendBatch(ctx context.Context, msgs []message.Message) (uint64, error) {
	req, err := w.appendRequest(ctx, msgs)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	return w.appended(w.s.j.submit(ctx, req))
}

// AppendBatchAsync implements walimpls.AsyncAppender: AppendBatch, framed
// into the journal in the caller's goroutine and answered by the flusher
// once its round is done (at once with SyncNone, as AppendBatch returns).
func (w *wal) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	req, err := w.appendRequest(ctx, msgs)
	if err != nil || len(msgs) == 0 {
		done(nil, err)
		return
	}
	w.s.j.submitAsync(ctx, req, func(seq uint64, err error) {
		seq, err = w.appended(seq, err)
		if err != nil {
			done(nil, err)
			return
		}
		done(seqIDs(seq, len(msgs)), nil)
	})
}

// appendRequest checks an append and encodes its messages (the journal
// keeps the bodies, not the caller's buffers).
func (w *wal) appendRequest(ctx context.Context, msgs []message.Message) (request, error) {
	if err := w.writable(ctx, "append"); err != nil {
		return request{}, walimpls.MarkNotStored(err)
	}
	limit := w.s.cfg.MaxMessageBytes
	for i, m := range msgs {
		if size := m.Size(); size > limit {
			err := error(&walimpls.TooLargeError{Size: size, Limit: limit})
			if len(msgs) > 1 {
				err = errors.Wrapf(err, "message %d of a batch of %d", i, len(msgs))
			}
			return request{}, errors.Wrapf(err, "local: append to %s", w.info)
		}
	}
	bodies := make([][]byte, len(msgs))
	for i, m := range msgs {
		bodies[i] = encodeMessage(m)
	}
	return request{kind: reqAppend, ch: w.ch, term: w.info.Term, gen: w.gen, bodies: bodies}, nil
}

// appended is the outcome of a submitted append: a fence found by the
// journal fences this WAL.
func (w *wal) appended(seq uint64, err error) (uint64, error) {
	if err != nil {
		var fe *walimpls.FencedError
		if errors.As(err, &fe) {
			w.fence(fe)
			return 0, err
		}
		return 0, errors.Wrapf(err, "local: append to %s", w.info)
	}
	return seq, nil
}

// Truncate implements walimpls.WALImpl. The truncation point is synced
// before Truncate returns, whatever the sync policy. A fenced writer's
// Truncate is ErrFenced, whatever upTo, and removes nothing.
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if err := w.writable(ctx, "truncate"); err != nil {
		return walimpls.MarkNotStored(err)
	}
	// Decided again when the truncate record is framed; this check makes a
	// fenced writer's every Truncate ErrFenced, before its position is
	// looked at.
	if err := w.s.j.checkClaim(w.ch, w.info.Term, w.gen); err != nil {
		w.noteFenced(err)
		return walimpls.MarkNotStored(err)
	}
	seq, err := seqOf(upTo)
	if err != nil {
		return errors.Wrapf(err, "local: truncate %s", w.info)
	}
	ch := w.ch
	// With SyncNone, an acknowledged message may not be published yet.
	if err := w.s.j.awaitPublished(ctx, ch, seq); err != nil {
		return errors.Wrapf(err, "local: truncate %s", w.info)
	}
	ch.mu.RLock()
	if seq > ch.lastSeq {
		last := ch.lastSeq
		ch.mu.RUnlock()
		return errors.Wrapf(walimpls.ErrInvalidPosition, "local: truncate %s to %d beyond its last message %d", w.info, seq, last)
	}
	if seq <= ch.keep.Load() {
		ch.mu.RUnlock()
		return nil
	}
	// The last message below the point: reads at or below it are gone.
	i := sort.Search(len(ch.entries), func(i int) bool { return ch.entries[i].seq >= seq })
	lastRemoved := ch.lastRemoved.Load()
	if i > 0 {
		lastRemoved = max(lastRemoved, ch.entries[i-1].seq)
	}
	ch.mu.RUnlock()
	r := request{kind: reqTruncate, ch: ch, term: w.info.Term, gen: w.gen, keep: seq, lastRemoved: lastRemoved}
	if _, err := w.s.j.submit(ctx, r); err != nil {
		var fe *walimpls.FencedError
		if errors.As(err, &fe) {
			w.fence(fe)
			return err
		}
		return errors.Wrapf(err, "local: truncate %s", w.info)
	}
	return nil
}

// Last implements walimpls.WALImpl: the channel's last published message.
// With SyncNone an append is acknowledged once framed, before it is
// published, so Last first waits for the messages framed before the call
// to be published (one write round; see doc.go, Last).
func (w *wal) Last(ctx context.Context) (message.ID, error) {
	if w.closed.Load() {
		return message.ID{}, errors.Wrapf(walimpls.ErrClosed, "local: last of %s", w.info)
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, errors.Wrapf(err, "local: last of %s", w.info)
	}
	ch := w.ch
	if w.s.cfg.Sync == SyncNone {
		if err := w.s.j.awaitPublished(ctx, ch, w.s.j.framedLastSeq(ch)); err != nil {
			return message.ID{}, errors.Wrapf(err, "local: last of %s", w.info)
		}
	}
	ch.mu.RLock()
	last := ch.lastSeq
	ch.mu.RUnlock()
	if last == 0 {
		return message.ID{}, nil
	}
	return message.NewSeqID(Name, int64(last)), nil
}

// seqOf decodes a position; foreign and zero IDs are ErrInvalidPosition.
func seqOf(id message.ID) (uint64, error) {
	seq, err := message.SeqOf(Name, id)
	if err != nil || seq < 0 {
		return 0, errors.Wrapf(walimpls.ErrInvalidPosition, "position %s", id)
	}
	return uint64(seq), nil
}

// Read implements walimpls.WALImpl.
func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	return w.read(ctx, opt, false)
}

// ReadBatches implements walimpls.BatchReader.
func (w *wal) ReadBatches(ctx context.Context, opt walimpls.ReadOption) (walimpls.BatchScanner, error) {
	return w.read(ctx, opt, true)
}

func (w *wal) read(ctx context.Context, opt walimpls.ReadOption, batches bool) (*scanner, error) {
	if w.closed.Load() {
		return nil, errors.Wrapf(walimpls.ErrClosed, "local: read %s", w.info)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "local: read %s", w.info)
	}
	if opt.ReadAheadBytes < 0 {
		return nil, errors.Newf("local: read %s: negative read-ahead %d", w.info, opt.ReadAheadBytes)
	}
	ch := w.ch
	if ch.deleted.Load() {
		// Every position of a deleted channel is gone; a deletion
		// published after this check ends the scanner instead.
		return nil, errors.Wrapf(walimpls.ErrPositionGone, "local: read %s: the channel was deleted", w.info)
	}
	var cursor uint64
	p := opt.DeliverPolicy
	if id, inclusive, ok := p.StartID(); ok {
		seq, err := seqOf(id)
		if err != nil {
			return nil, errors.Wrapf(err, "local: read %s from %s", w.info, p)
		}
		cursor = seq
		if !inclusive {
			cursor = seq + 1
		}
		if lr := ch.lastRemoved.Load(); lr >= cursor && lr != 0 {
			return nil, errors.Wrapf(walimpls.ErrPositionGone, "local: read %s from %s: truncated up to %d", w.info, p, lr)
		}
	} else if p.IsLatest() {
		// After the last message framed: with SyncNone it may have been
		// acknowledged before it was published.
		cursor = w.s.j.framedLastSeq(ch) + 1
	} else if n, ok := p.Tail(); ok {
		if n < 1 {
			return nil, errors.Wrapf(walimpls.ErrInvalidPosition, "local: read %s from %s: n must be at least 1", w.info, p)
		}
		cursor = ch.tailStart(n)
	} else {
		cursor = ch.keep.Load()
	}
	budget := opt.ReadAheadBytes
	if budget == 0 {
		budget = w.s.cfg.ReadAheadBytes
	}
	sc := newScanner(w, opt.Name, cursor, budget, batches)
	if !w.scanners.Add(sc) {
		return nil, errors.Wrapf(walimpls.ErrClosed, "local: read %s", w.info)
	}
	go sc.run()
	return sc, nil
}

// tailStart returns where a cursor.Tail(n) read starts: the n-th last
// published message, found in the index in constant time, so that reading
// the end of a long channel costs the same as reading the end of a short
// one; the first message kept when fewer are kept. With SyncNone, messages
// acknowledged but not yet published follow it: the scanner then delivers
// more than the last n stored, never fewer, as the contract allows.
func (ch *channel) tailStart(n int) uint64 {
	ch.mu.RLock()
	defer ch.mu.RUnlock()
	if n >= len(ch.entries) {
		// Every entry is at or after keep, and keep is never gone: like
		// cursor.All.
		return ch.keep.Load()
	}
	return ch.entries[len(ch.entries)-n].seq
}

// Close implements walimpls.WALImpl: it ends the WAL's scanners and waits
// for them. Idempotent.
func (w *wal) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	w.scanners.StopAll(errors.Wrapf(walimpls.ErrClosed, "local: %s closed", w.info))
	if w.info.Mode == walimpls.ReadWrite {
		w.ch.mu.Lock()
		delete(w.ch.writers, w)
		w.ch.mu.Unlock()
	}
	w.o.forget(w)
	return nil
}
