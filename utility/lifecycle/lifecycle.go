// Package lifecycle gives the goroutine behind a scanner the stop, done and
// error contract that walimpls.Scanner and walimpls.Scanner promise, so that
// every backend keeps it the same way:
//
//   - Close stops the goroutine and waits for it; it is idempotent.
//   - Done closes once the goroutine has ended (after it closed its output).
//   - Error is nil until Done closes; then nil after a user Close, the reason
//     given to Stop when the scanner was stopped from outside (its WAL
//     closed), or the failure the goroutine ended with (or recorded with
//     Fail before any Stop).
//
// Group tracks the live scanners of one WAL, so that the WAL's Close can
// stop them all and wait for them, and no scanner starts after it.
package lifecycle

import (
	"context"
	"sync"
)

// Run is the lifecycle of one goroutine. The goroutine watches Context (or
// Stopping) and calls End exactly once, as its last act.
type Run struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	stopOnce sync.Once
	mu       sync.Mutex
	reason   error // the first Stop's reason; guarded by mu
	failed   error // the Fail that came before any Stop; guarded by mu
	err      error // written by End before done closes
}

// NewRun returns a Run that is not stopped.
func NewRun() *Run {
	r := &Run{done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// Context is cancelled by Stop and Close: the goroutine's blocking calls
// take it.
func (r *Run) Context() context.Context { return r.ctx }

// Stopping is closed by Stop and Close.
func (r *Run) Stopping() <-chan struct{} { return r.ctx.Done() }

// Stopped reports whether Stop or Close was called.
func (r *Run) Stopped() bool { return r.ctx.Err() != nil }

// Done is closed once the goroutine has called End.
func (r *Run) Done() <-chan struct{} { return r.done }

// Error is why the goroutine ended, once Done is closed; nil before.
func (r *Run) Error() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Stop asks the goroutine to end without waiting; reason is what Error will
// report (nil for a user's Close). Only the first call counts.
func (r *Run) Stop(reason error) {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.reason = reason
		r.mu.Unlock()
		r.cancel()
	})
}

// Close stops the goroutine and waits for it to end. It always returns nil:
// a scanner's Close cannot fail.
func (r *Run) Close() error {
	r.Stop(nil)
	<-r.done
	return nil
}

// Fail records err as how the goroutine ends, for one that failed but has
// work to finish before End: the adaptor's scanner hands its reader what
// it released before it failed. A Stop after Fail still cancels Context,
// so that the work is cut short, but Error stays err: the failure came
// first. A Fail after a Stop or another Fail does nothing, and so does
// Fail(nil).
func (r *Run) Fail(err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == nil && !r.Stopped() {
		r.failed = err
	}
}

// End records how the goroutine ended and closes Done. A goroutine that was
// stopped ends with the stop's reason, whatever it saw while stopping (a
// cancelled call, a closed client); one that called Fail first ends with
// that failure.
func (r *Run) End(err error) {
	r.mu.Lock()
	switch {
	case r.failed != nil:
		err = r.failed
	case r.Stopped():
		err = r.reason
	}
	r.mu.Unlock()
	r.err = err
	r.cancel() // release the context's resources
	close(r.done)
}

// Member is what a Group holds: a scanner with a Run.
type Member interface {
	comparable
	Stop(reason error)
	Done() <-chan struct{}
}

// Group is the set of live scanners of one WAL. The zero value is ready.
type Group[M Member] struct {
	mu     sync.Mutex
	closed bool
	live   map[M]struct{}
}

// Add registers m; it reports false once StopAll has run, and then the
// caller must not start m.
func (g *Group[M]) Add(m M) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if g.live == nil {
		g.live = make(map[M]struct{})
	}
	g.live[m] = struct{}{}
	return true
}

// Remove forgets m (a scanner that ended by itself).
func (g *Group[M]) Remove(m M) {
	g.mu.Lock()
	delete(g.live, m)
	g.mu.Unlock()
}

// Len is the number of live members.
func (g *Group[M]) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

// StopAll refuses later Adds, stops every live member with reason and
// waits for each to end.
func (g *Group[M]) StopAll(reason error) {
	g.mu.Lock()
	g.closed = true
	live := g.live
	g.live = nil
	g.mu.Unlock()
	for m := range live {
		m.Stop(reason)
	}
	for m := range live {
		<-m.Done()
	}
}
