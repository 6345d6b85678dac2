package adaptor

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"
)

// timeticks allocates the channel's timeticks and tracks the appends still in
// flight, so that a watermark W is only written once every message with a
// timetick below W has been acknowledged.
//
// Timeticks are handed out in increasing order under mu, so the appends a
// watermark W must wait for are exactly those that began before W was
// allocated: counting them is enough, no set of timeticks is kept (a map
// insert and delete per append was a visible share of the append path).
type timeticks struct {
	alloc TimeTickAllocator

	mu   sync.Mutex
	last uint64 // highest timetick handed out or recovered
	// mark is the last watermark allocated; before counts the appends in
	// flight with a timetick below it, after those above it.
	mark          uint64
	before, after int
	changed       chan struct{} // closed and replaced when before reaches 0 while waited on
	// waiting is set while a watermark holds changed: only then does end
	// pay for a new channel, not on every append.
	waiting bool
}

func newTimeticks(alloc TimeTickAllocator, floor uint64) *timeticks {
	return &timeticks{alloc: alloc, last: floor, changed: make(chan struct{})}
}

// next allocates a timetick above every earlier one. Assumes t.mu is held.
func (t *timeticks) nextLocked(raw uint64) uint64 {
	tt := max(raw, t.last+1)
	t.last = tt
	return tt
}

// begin allocates the timetick of an append and marks it in flight; end must
// follow, once, with the same timetick.
func (t *timeticks) begin(ctx context.Context) (uint64, error) {
	raw, err := t.alloc.Allocate(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "allocate timetick")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tt := t.nextLocked(raw)
	t.after++
	return tt, nil
}

// beginN allocates n increasing timeticks at once (one allocation), for a
// batch in slice order; end must follow for each.
func (t *timeticks) beginN(ctx context.Context, n int) ([]uint64, error) {
	raw, err := t.alloc.Allocate(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "allocate timetick")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint64, n)
	for i := range out {
		out[i] = t.nextLocked(raw)
	}
	t.after += n
	return out, nil
}

// end marks an append finished, acknowledged or not.
func (t *timeticks) end(tt uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tt > t.mark {
		t.after--
		return
	}
	t.before--
	if t.before == 0 && t.waiting {
		t.waiting = false
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// watermark allocates a watermark timetick W and waits until no append
// with a timetick below W is in flight. Appends that begin later get
// timeticks above W. Watermarks are allocated one at a time (the WAL's
// watermarkMu); one abandoned on a done ctx leaves its appends counted in
// before, where the next watermark, above them too, waits for them.
func (t *timeticks) watermark(ctx context.Context) (uint64, error) {
	raw, err := t.alloc.Allocate(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "allocate watermark timetick")
	}
	t.mu.Lock()
	w := t.nextLocked(raw)
	t.mark = w
	t.before += t.after
	t.after = 0
	for t.before > 0 {
		wait := t.changed
		t.waiting = true
		t.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		t.mu.Lock()
	}
	t.mu.Unlock()
	return w, nil
}
