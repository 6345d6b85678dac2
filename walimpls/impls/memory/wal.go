package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/utility/serial"
	"github.com/streamwal/streamwal/walimpls"
)

type wal struct {
	opener *Opener
	log    *channelLog
	ch     walimpls.Channel
	claim  uint64 // the log's claim counter when this WAL opened ReadWrite

	closed  atomic.Bool
	closing chan struct{} // closed by Close: ends appends waiting out an injected latency
	scans   lifecycle.Group[*scanner]

	// appends stores the batches of AppendBatchAsync in order; asyncClosed
	// (set by Close, under asyncMu) keeps a batch from queueing after the
	// queue closed.
	asyncMu     sync.Mutex
	asyncClosed bool
	appends     *serial.Queue
}

var (
	_ walimpls.WALImpl     = (*wal)(nil)
	_ walimpls.BatchReader = (*wal)(nil)
)

func newWAL(o *Opener, l *channelLog, ch walimpls.Channel, claim uint64) *wal {
	return &wal{opener: o, log: l, ch: ch, claim: claim, closing: make(chan struct{}), appends: serial.New()}
}

func (w *wal) WALName() string           { return Name }
func (w *wal) Channel() walimpls.Channel { return w.ch }

// checkWrite returns why this WAL may not write, if it may not. Nothing is
// stored when it refuses.
func (w *wal) checkWrite(ctx context.Context, op string) error {
	if w.closed.Load() {
		return walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "memory: %s on %s", op, w.ch))
	}
	if w.ch.Mode == walimpls.ReadOnly {
		return errors.Wrapf(walimpls.ErrReadOnly, "memory: %s on %s", op, w.ch)
	}
	if err := ctx.Err(); err != nil {
		return walimpls.MarkNotStored(errors.Wrapf(err, "memory: %s on %s", op, w.ch))
	}
	return nil
}

// fencedLocked reports the fence error of this WAL: a higher term owns the
// channel, or a later open of the same term does. Assumes w.log.mu is held.
func (w *wal) fencedLocked() error {
	l := w.log
	if l.deleted {
		return walimpls.MarkNotStored(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, Deleted: true})
	}
	if !w.opener.cluster.FencingEnabled() {
		return nil
	}
	if l.term > w.ch.Term || l.term == w.ch.Term && l.claim != w.claim {
		return walimpls.MarkNotStored(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, CurrentTerm: l.term})
	}
	return nil
}

// AppendBatch implements walimpls.WALImpl: the batch is stored under one
// lock, whole or not at all, in slice order.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	if err := w.checkWrite(ctx, "append"); err != nil {
		return nil, err
	}
	if limit := w.opener.cfg.MaxMessageBytes; limit > 0 {
		for i, m := range msgs {
			if m.Size() > limit {
				return nil, errors.Wrapf(&walimpls.TooLargeError{Size: m.Size(), Limit: limit}, "memory: append to %s: message %d of %d", w.ch, i, len(msgs))
			}
		}
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	latency, fail := w.opener.cluster.appendFaults()
	if latency > 0 {
		var err error
		w.opener.cluster.wait(func() {
			t := time.NewTimer(latency)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				err = walimpls.MarkNotStored(errors.Wrapf(ctx.Err(), "memory: append to %s", w.ch))
			case <-w.closing:
				err = walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "memory: append to %s", w.ch))
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if fail {
		return nil, walimpls.MarkNotStored(errors.Wrapf(ErrInjected, "memory: append to %s", w.ch))
	}
	// Own the bytes: the caller may reuse its buffers once we return.
	stored := make([]entry, len(msgs))
	for i, m := range msgs {
		stored[i] = entry{m: m.Copy(), size: m.Size()}
	}
	l := w.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := w.fencedLocked(); err != nil {
		return nil, err
	}
	if w.closed.Load() {
		return nil, walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "memory: append to %s", w.ch))
	}
	ids := make([]message.ID, len(stored))
	for i := range stored {
		ids[i] = message.NewSeqID(Name, l.next()+int64(i))
	}
	l.entries = append(l.entries, stored...)
	l.broadcast()
	return ids, nil
}

func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if err := w.checkWrite(ctx, "truncate"); err != nil {
		return err
	}
	seq, err := message.SeqOf(Name, upTo)
	if err != nil {
		return errors.WithStack(fmt.Errorf("memory: truncate %s: %w: %w", w.ch, err, walimpls.ErrInvalidPosition))
	}
	l := w.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := w.fencedLocked(); err != nil {
		return err
	}
	if seq >= l.next() {
		return errors.Wrapf(walimpls.ErrInvalidPosition,
			"memory: truncate %s to %d: beyond the last message %d", w.ch, seq, l.next()-1)
	}
	if seq > l.first {
		l.truncate(seq)
	}
	return nil
}

// Last implements walimpls.WALImpl.
func (w *wal) Last(ctx context.Context) (message.ID, error) {
	if w.closed.Load() {
		return message.ID{}, errors.Wrapf(walimpls.ErrClosed, "memory: last of %s", w.ch)
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, errors.Wrapf(err, "memory: last of %s", w.ch)
	}
	l := w.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next() == 0 {
		return message.ID{}, nil
	}
	return message.NewSeqID(Name, l.next()-1), nil
}

func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	return w.read(ctx, opt, false)
}

// ReadBatches implements walimpls.BatchReader.
func (w *wal) ReadBatches(ctx context.Context, opt walimpls.ReadOption) (walimpls.BatchScanner, error) {
	return w.read(ctx, opt, true)
}

func (w *wal) read(ctx context.Context, opt walimpls.ReadOption, batches bool) (*scanner, error) {
	if w.closed.Load() {
		return nil, errors.Wrapf(walimpls.ErrClosed, "memory: read %s", w.ch)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "memory: read %s", w.ch)
	}
	start, err := w.startSeq(opt.DeliverPolicy)
	if err != nil {
		return nil, err
	}
	s := newScanner(w, start, opt.ReadAheadBytes, batches)
	if !w.scans.Add(s) {
		return nil, errors.Wrapf(walimpls.ErrClosed, "memory: read %s", w.ch)
	}
	go s.run()
	return s, nil
}

// startSeq resolves a deliver policy to the first sequence to deliver.
func (w *wal) startSeq(p cursor.Policy) (int64, error) {
	l := w.log
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case p.IsAll():
		return l.first, nil
	case p.IsLatest():
		return l.next(), nil
	}
	if n, ok := p.Tail(); ok {
		if n < 1 {
			return 0, errors.Wrapf(walimpls.ErrInvalidPosition, "memory: read %s from %s: n must be at least 1", w.ch, p)
		}
		return max(l.first, l.next()-int64(n)), nil
	}
	id, inclusive, _ := p.StartID()
	seq, err := message.SeqOf(Name, id)
	if err != nil {
		return 0, errors.WithStack(fmt.Errorf("memory: read %s from %s: %w: %w", w.ch, p, err, walimpls.ErrInvalidPosition))
	}
	if !inclusive {
		seq++
	}
	if seq < l.first {
		return 0, errors.Wrapf(walimpls.ErrPositionGone, "memory: read %s from %s: log starts at %d", w.ch, p, l.first)
	}
	return seq, nil
}

func (w *wal) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	close(w.closing)
	w.stopAsync()
	w.scans.StopAll(errors.Wrapf(walimpls.ErrClosed, "memory: scanner of %s", w.ch))
	w.opener.forget(w)
	return nil
}
