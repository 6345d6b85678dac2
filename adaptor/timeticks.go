package adaptor

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"
)

// timeticks allocates the channel's timeticks and tracks the appends still in
// flight, so that a watermark W is only written once every message with a
// timetick below W has been acknowledged.
type timeticks struct {
	alloc TimeTickAllocator

	mu      sync.Mutex
	last    uint64              // highest timetick handed out or recovered
	pending map[uint64]struct{} // timeticks of appends in flight
	changed chan struct{}       // closed and replaced when pending shrinks while waited on
	// waiting is set while a watermark holds changed: only then does end
	// pay for a new channel, not on every append.
	waiting bool
}

func newTimeticks(alloc TimeTickAllocator, floor uint64) *timeticks {
	return &timeticks{alloc: alloc, last: floor, pending: map[uint64]struct{}{}, changed: make(chan struct{})}
}

// next allocates a timetick above every earlier one. Assumes t.mu is held.
func (t *timeticks) nextLocked(raw uint64) uint64 {
	tt := max(raw, t.last+1)
	t.last = tt
	return tt
}

// begin allocates the timetick of an append and marks it in flight; end must
// follow.
func (t *timeticks) begin(ctx context.Context) (uint64, error) {
	raw, err := t.alloc.Allocate(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "allocate timetick")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tt := t.nextLocked(raw)
	t.pending[tt] = struct{}{}
	return tt, nil
}

// end marks an append finished, acknowledged or not.
func (t *timeticks) end(tt uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, tt)
	if t.waiting {
		t.waiting = false
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// watermark allocates a watermark timetick W and waits until no append
// with a timetick below W is in flight. Appends that begin later get
// timeticks above W.
func (t *timeticks) watermark(ctx context.Context) (uint64, error) {
	raw, err := t.alloc.Allocate(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "allocate watermark timetick")
	}
	t.mu.Lock()
	w := t.nextLocked(raw)
	for {
		blocked := false
		for tt := range t.pending {
			if tt < w {
				blocked = true
				break
			}
		}
		if !blocked {
			t.mu.Unlock()
			return w, nil
		}
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
}
