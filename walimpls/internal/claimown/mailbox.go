package claimown

import (
	"context"
	"sync"

	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/walimpls"
)

// Mailbox carries requests of type Q to a writer's loop, the one
// goroutine that owns the writer's resource, and holds the loop's
// lifecycle: Go starts it, Close stops it and waits for it. A request
// carries its own reply channel (buffered, of type R), on which the loop
// answers it exactly once; Submit waits for that answer.
type Mailbox[Q, R any] struct {
	reqs   chan Q
	closed func() error

	orphans func(Q) // answers what the loop left queued (SetOrphans)

	stop     chan struct{}
	done     chan struct{}
	drained  chan struct{} // closed once the orphans were answered, after done
	ctx      context.Context
	cancel   context.CancelFunc
	stopOnce sync.Once
	started  atomic.Bool
}

// NewMailbox returns a mailbox that queues up to capacity requests.
// closed returns the error of a request refused because the writer closed
// (a walimpls.ErrClosed). The loop answers every request it takes before
// it returns: a request unanswered once the loop has returned was never
// taken, and stored nothing.
func NewMailbox[Q, R any](capacity int, closed func() error) *Mailbox[Q, R] {
	m := &Mailbox[Q, R]{
		reqs:    make(chan Q, capacity),
		closed:  closed,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		drained: make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m
}

// Submit queues req and waits for the loop's answer on reply. The error
// is the mailbox's own, when there is no answer (the answer carries the
// request's outcome):
//
//   - ctx ends, or the loop has returned, before req is queued: ctx's
//     error or the closed error, marked walimpls.MarkNotStored;
//   - ctx ends after req was queued: the answer or ctx's error, unmarked
//     (the request may be in flight); when both are there, either comes
//     back;
//   - the loop returns after req was queued: its answer if it gave one,
//     else the closed error, marked walimpls.MarkNotStored (never taken).
func (m *Mailbox[Q, R]) Submit(ctx context.Context, req Q, reply <-chan R) (R, error) {
	var zero R
	select {
	case m.reqs <- req:
	case <-ctx.Done():
		return zero, walimpls.MarkNotStored(ctx.Err()) // never queued
	case <-m.done:
		return zero, walimpls.MarkNotStored(m.closed())
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err() // the request may be in flight
	case <-m.done:
		select {
		case r := <-reply:
			return r, nil
		default:
		}
		return zero, walimpls.MarkNotStored(m.closed()) // never taken
	}
}

// SetOrphans sets how a request that the loop left queued as it returned
// is answered, for requests queued with Post (whose callers do not wait
// for an answer, as Submit's do): orphans answers each exactly once. Call
// it before Go.
func (m *Mailbox[Q, R]) SetOrphans(orphans func(Q)) { m.orphans = orphans }

// Post queues req and returns without waiting for its answer: for a writer
// whose requests answer through a callback. When req cannot be queued (ctx
// ends first, or the loop has returned) Post returns the error Submit
// would, marked walimpls.MarkNotStored, and nothing answers req. A queued
// request is answered exactly once: by the loop, or, when the loop
// returned without taking it, by the orphans function (SetOrphans).
func (m *Mailbox[Q, R]) Post(ctx context.Context, req Q) error {
	select {
	case m.reqs <- req:
	case <-ctx.Done():
		return walimpls.MarkNotStored(ctx.Err()) // never queued
	case <-m.done:
		return walimpls.MarkNotStored(m.closed())
	}
	select {
	case <-m.done:
		// Queued after the loop returned, and perhaps after Go's drain
		// of what it left: answer whatever is still queued here.
		m.Drain(m.orphans)
	default:
	}
	return nil
}

// Requests is the queue the loop takes requests from.
func (m *Mailbox[Q, R]) Requests() <-chan Q { return m.reqs }

// Drain hands every request still queued to answer, without waiting: for
// the loop, once it stops.
func (m *Mailbox[Q, R]) Drain(answer func(Q)) {
	for {
		select {
		case r := <-m.reqs:
			answer(r)
		default:
			return
		}
	}
}

// Stopping is closed once Close was called: the loop should answer what
// it must and return.
func (m *Mailbox[Q, R]) Stopping() <-chan struct{} { return m.stop }

// Context is cancelled once Close was called: it aborts what the loop (and
// the writer's other goroutines) wait for.
func (m *Mailbox[Q, R]) Context() context.Context { return m.ctx }

// Go starts loop on a goroutine; the mailbox counts it as returned once
// loop returns. Call it at most once.
func (m *Mailbox[Q, R]) Go(loop func()) {
	if m.started.Swap(true) {
		panic("claimown: Mailbox.Go called twice")
	}
	go func() {
		defer close(m.drained)
		loop()
		close(m.done)
		if m.orphans != nil {
			m.Drain(m.orphans)
		}
	}()
}

// Started reports whether Go was called.
func (m *Mailbox[Q, R]) Started() bool { return m.started.Load() }

// Close closes Stopping, cancels Context, and waits for the loop to return
// (and the requests it left to be answered, see SetOrphans) if it was
// started. It is idempotent.
func (m *Mailbox[Q, R]) Close() {
	m.stopOnce.Do(func() {
		close(m.stop)
		m.cancel()
	})
	if m.started.Load() {
		<-m.drained
	}
}
