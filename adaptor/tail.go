package adaptor

// The tail reader: one goroutine per WAL (wal.tail), started by Open where
// appends are confirmed or term-begins must all be noted, else by the first
// scanner (ensureTail), and stopped by Close, copies the log into the
// tail cache, notes the term-begins it reads and fences this WAL at
// a later one. What it and
// recovery learned lives in a tailLog, behind that type's one lock.

import (
	"container/heap"
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// startTail runs the reader that feeds the tail cache, from Open.
func (w *wal) startTail(s *backendScan) {
	w.mu.Lock()
	w.tailing = true
	w.mu.Unlock()
	w.wg.Add(1)
	go w.tail(s)
}

// ensureTail starts the tail reader, if it is not running yet, from the
// log's end. On a backend that fences, a WAL reads nothing back until its
// first scanner: only scanners read the tail cache (and the local
// releases it publishes), and where the backend fences no other writer's
// term-begin can come after this WAL's own without the backend refusing
// its appends, so nothing but the buffer depends on the reader. A scanner
// catching up from before the end reads the backend until it meets the
// buffer.
func (w *wal) ensureTail(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.tailing {
		return nil
	}
	// Under mu, so that two first scanners start one reader; Close waits
	// for mu, and cancels the reader's context after it.
	last, err := w.impl.Last(ctx)
	if err != nil {
		return errors.Wrap(err, "start the tail reader")
	}
	p := cursor.All()
	if !last.IsZero() {
		p = cursor.StartAfter(last)
	}
	s, err := readBackend(w.impl)(w.ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: p})
	if err != nil {
		return errors.Wrap(err, "start the tail reader")
	}
	w.cache.startsAt(last, false)
	w.tailing = true
	w.wg.Add(1)
	go w.tail(s)
	return nil
}

// tailBatch bounds how many messages the tail reader takes from the backend
// before it pushes them to the tail cache under one lock.
const tailBatch = 64

// tail owns the tail reader: it copies the log into the tail cache
// and notices higher terms. When the backend scanner fails it reopens it
// after the last message it copied.
//
// It takes what the backend has ready without blocking and pushes it as a
// batch: one lock, one wake-up of tailing scanners and one gauge update per
// batch instead of per message, on the append path of every WAL. Where the
// backend offers batch scanners, the batch is the backend's slice: one
// hand-off per slice, not per message.
func (w *wal) tail(s *backendScan) {
	defer w.wg.Done()
	defer w.cache.close()
	defer w.learned.end()
	var last message.ID
	for attempt := 0; ; {
		batch, ok, stopped := s.receiveBatch(tailBatch, w.ctx.Done())
		if stopped {
			_ = s.Close()
			return
		}
		if ok {
			attempt = 0
			last = batch[len(batch)-1].ID()
			w.tailed(batch)
			clear(batch) // the buffer holds them now; do not pin them here
			continue
		}
		select { // Error is valid once Done is closed
		case <-s.Done():
		case <-w.ctx.Done():
		}
		err := s.Error()
		_ = s.Close()
		if w.ctx.Err() != nil {
			return
		}
		w.log.Warn("tail reader ended; restarting", "error", err, "after", last)
		if last.IsZero() || errors.Is(err, walimpls.ErrPositionGone) || errors.Is(err, walimpls.ErrClosed) {
			// Without a position to resume from, tailing scanners fall
			// back to reading the backend themselves.
			return
		}
		if w.opts.Retry.Wait(w.ctx, attempt) != nil {
			return
		}
		attempt++
		ns, rerr := readBackend(w.impl)(w.ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: cursor.StartAfter(last)})
		if rerr != nil {
			w.log.Warn("tail reader restart failed", "error", rerr)
			return
		}
		s = ns
	}
}

// tailed handles a batch the tail reader read, in log order: term-begins
// are noted (and may fence this WAL) before the batch reaches the buffer, so
// a scanner that reads a message there already knows every term-begin
// before it.
func (w *wal) tailed(batch []message.Immutable) {
	for _, m := range batch {
		if m.Kind() != message.KindTermBegin {
			continue
		}
		t, _ := m.Term()
		w.learned.noteTermBegin(m.ID(), t)
		if w.opts.ReadOnly {
			continue
		}
		// A higher term began, or a later open of this one (the same-term
		// rule: the later claim wins). A backend that fences has stopped
		// this writer already; on one that cannot, this is where it stops.
		if t > w.ch.Term || t == w.ch.Term && w.beginID.LT(m.ID()) {
			// Fenced first: an append that sees fencedAt reports the
			// fence's reason, which must be there to read.
			w.fence(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, CurrentTerm: t})
			w.learned.fencedBy(m.ID())
		}
	}
	w.m.tailCacheBytes.Set(float64(w.cache.push(batch...)))
	if w.confirm {
		w.learned.readTo(batch[len(batch)-1].ID())
	}
}

// confirmAck waits until the tail reader has read past id, an append's last
// record, and fails the append if a term-begin that fences this WAL came
// before it: on a backend that cannot fence, a stale writer's appends are
// stored, but no reader delivers them, so they must not be acknowledged.
func (w *wal) confirmAck(ctx context.Context, id message.ID) error {
	for {
		pos, at, ended, wake := w.learned.await(id)
		switch {
		case !at.IsZero() && at.LT(id):
			// Stored after the term-begin of the new owner: every reader
			// drops it. The WAL was fenced before fencedAt was set (tailed).
			return walimpls.MarkNotStored(errors.Wrapf(w.usable(), "adaptor: append to %s: stored at %s after the fencing term-begin at %s", w.ch.Name, id, at))
		case !pos.IsZero() && id.LTE(pos):
			return nil
		case ended:
			return walimpls.MarkOutcomeUnknown(errors.Wrapf(walimpls.ErrClosed, "adaptor: append to %s: stored at %s, the tail reader ended before confirming it", w.ch.Name, id))
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return walimpls.MarkOutcomeUnknown(errors.Wrapf(ctx.Err(), "adaptor: append to %s: stored at %s, not yet confirmed", w.ch.Name, id))
		}
	}
}

// termBegin is where a term began in the log.
type termBegin struct {
	id   message.ID
	term int64
}

// tailLog is what reading the log taught a WAL: the term-begins recovery
// and the tail reader saw, how far the tail reader has read, where a
// term-begin fenced the WAL, and whether the reader ended. An append that
// waits for the tail reader to read past it (confirm) waits on a channel
// of its own, closed once the reader passed its position, or at a fence or
// the reader's end: a batch the reader handles wakes the appends it
// confirms, not every append waiting.
type tailLog struct {
	mu         sync.Mutex
	termBegins []termBegin // in log order
	pos        message.ID  // the last message the tail reader handled
	fencedAt   message.ID  // the term-begin that fenced the WAL, if one did
	ended      bool        // the tail reader stopped for good
	waiters    confirmWaiters
}

// confirmWaiter is an append waiting for the tail reader to read id.
type confirmWaiter struct {
	id   message.ID
	wake chan struct{}
}

// confirmWaiters is a min-heap of waiters by ID (container/heap).
type confirmWaiters []confirmWaiter

func (h confirmWaiters) Len() int           { return len(h) }
func (h confirmWaiters) Less(i, j int) bool { return h[i].id.LT(h[j].id) }
func (h confirmWaiters) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *confirmWaiters) Push(x any)        { *h = append(*h, x.(confirmWaiter)) }
func (h *confirmWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = confirmWaiter{}
	*h = old[:len(old)-1]
	return w
}

func newTailLog() *tailLog { return &tailLog{} }

// wakeAllLocked wakes every waiting append, to look again (a fence, the
// reader's end). Called with mu held.
func (l *tailLog) wakeAllLocked() {
	for _, w := range l.waiters {
		close(w.wake)
	}
	clear(l.waiters)
	l.waiters = l.waiters[:0]
}

// noteTermBegin records a term-begin read from the log (recovery and the
// tail reader see each in log order; a repeat is ignored).
func (l *tailLog) noteTermBegin(id message.ID, term int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.termBegins); n > 0 && !l.termBegins[n-1].id.LT(id) {
		return
	}
	l.termBegins = append(l.termBegins, termBegin{id: id, term: term})
}

// termBefore returns the highest term that began before id in the log, as
// far as the WAL has read it: a scanner starting at id fences lower terms
// from its first message on.
func (l *tailLog) termBefore(id message.ID) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t int64
	for _, tb := range l.termBegins {
		if !tb.id.LT(id) {
			break
		}
		t = max(t, tb.term)
	}
	return t
}

// readTo records that the tail reader handled the log up to id.
func (l *tailLog) readTo(id message.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pos = id
	for len(l.waiters) > 0 && l.waiters[0].id.LTE(id) {
		close(heap.Pop(&l.waiters).(confirmWaiter).wake)
	}
}

// fencedBy records the first term-begin that fenced the WAL.
func (l *tailLog) fencedBy(id message.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fencedAt.IsZero() {
		l.fencedAt = id
	}
	l.wakeAllLocked()
}

// end records that the tail reader stopped for good.
func (l *tailLog) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	l.wakeAllLocked()
}

// await returns the reader's progress for an append stored at id and,
// while that does not decide the append yet, a channel closed once it may:
// the reader passed id, a term-begin fenced the WAL, or the reader ended.
func (l *tailLog) await(id message.ID) (pos, fencedAt message.ID, ended bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	decided := !l.fencedAt.IsZero() && l.fencedAt.LT(id) || !l.pos.IsZero() && id.LTE(l.pos) || l.ended
	if !decided {
		ch := make(chan struct{})
		heap.Push(&l.waiters, confirmWaiter{id: id, wake: ch})
		wake = ch
	}
	return l.pos, l.fencedAt, l.ended, wake
}
