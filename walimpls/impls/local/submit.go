package local

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

type reqKind uint8

const (
	reqAppend reqKind = iota
	reqTerm
	reqTruncate
	reqDelete
)

// request is one record (or one decision) to submit to the journal.
type request struct {
	kind reqKind
	ch   *channel // nil for reqDelete, which looks its channel up when framed
	name string   // reqDelete: the channel to delete
	term int64    // the writer's term; for reqTerm the term to store
	// gen is the writer's claim on the channel (reqAppend, reqTruncate):
	// the record is refused unless it is still the channel's latest.
	gen uint64
	// bodies (reqAppend) are the encoded messages of one batch, in order:
	// they are framed together, contiguous, and acknowledged together.
	bodies [][]byte
	// reqTruncate: the first seq to keep and the last one removed.
	keep, lastRemoved uint64
}

// waiter is a submitter waiting for the flush round that carries its
// record; the flusher finishes it.
type waiter struct {
	done chan struct{}
	err  error
	// seq is the request's seq, set under the journal's mutex as it is
	// framed, before the flusher can take it.
	seq uint64
	// notify, when set, is told the outcome by notes, for a
	// submitter that does not wait (submitAsync).
	notify func(error)
}

// submit frames r into the pending batch and waits as the policy requires:
// a SyncNone append returns once framed, every other request once the
// round that carries it is written (and synced, per the policy, and always
// for term and truncate records) and published. It returns the seq of an
// appended message, or the claim a reqTerm took. Refusals (fencing, size),
// a failed or closing journal and a context that ends before the record is
// framed are returned at once, marked walimpls.MarkNotStored: nothing was
// framed. A request abandoned by its context after it was framed is still
// carried out, and its error is not marked. A reqAppend's seq is the first
// of its batch; the batch's other messages have the seqs that follow.
func (j *journal) submit(ctx context.Context, r request) (uint64, error) {
	var w *waiter
	if r.kind != reqAppend || j.s.cfg.Sync != SyncNone {
		w = &waiter{done: make(chan struct{})}
	}
	seq, err := j.enqueue(ctx, r, w)
	if err != nil || w == nil {
		return seq, err
	}
	select {
	case <-w.done:
		return seq, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// submitAsync is submit telling done instead of waiting: before it
// returns when the request is refused or needs no round (a SyncNone
// append), else from the flusher once the round that carries it is done.
func (j *journal) submitAsync(ctx context.Context, r request, done func(uint64, error)) {
	if r.kind == reqAppend && j.s.cfg.Sync == SyncNone {
		done(j.enqueue(ctx, r, nil))
		return
	}
	w := &waiter{done: make(chan struct{})}
	w.notify = func(err error) { done(w.seq, err) }
	if _, err := j.enqueue(ctx, r, w); err != nil {
		done(0, err)
	}
}

// enqueue frames r into the pending batch, with w (nil: nobody waits) on
// its last record. Its errors are submit's refusals.
func (j *journal) enqueue(ctx context.Context, r request, w *waiter) (uint64, error) {
	size := frameSize(0)
	if r.kind == reqAppend {
		size = 0
		for _, body := range r.bodies {
			size += frameSize(len(body))
		}
	}
	if r.kind == reqAppend {
		// Disk pressure holds appends back before they take the mutex: a
		// throttled one waits without holding anybody up, and every other
		// record (the ones that free space among them) passes.
		if err := j.s.disk.admit(ctx, size, j.stopped); err != nil {
			return 0, walimpls.MarkNotStored(err)
		}
	}
	j.mu.Lock()
	if err := j.admit(ctx, size); err != nil {
		j.mu.Unlock()
		return 0, walimpls.MarkNotStored(err)
	}
	kick := j.pend.empty()
	seq, err := j.frame(r, w)
	if w != nil {
		w.seq = seq
	}
	j.mu.Unlock()
	if err != nil {
		return 0, walimpls.MarkNotStored(err)
	}
	if kick {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
	return seq, nil
}

// admit checks that the journal takes records, and waits until the pending
// batch has room for size more bytes: a round writes at most MaxBatchBytes
// (a larger record, or batch of messages, alone), and a submitter that does
// not wait for its round cannot run ahead of the disk by more than that.
// Called with mu held, which it releases while it waits.
func (j *journal) admit(ctx context.Context, size int) error {
	for {
		if j.err != nil {
			return j.err
		}
		if j.closing {
			return errors.Wrap(walimpls.ErrClosed, "local: store closed")
		}
		if j.pend.bytes == 0 || j.pend.bytes+size <= j.s.cfg.MaxBatchBytes {
			return nil
		}
		if j.room == nil {
			j.room = make(chan struct{})
		}
		room := j.room
		j.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			j.mu.Lock()
			return ctx.Err()
		}
		j.mu.Lock()
	}
}
