package adaptor

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
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

	rel *releaseTracker // the local release point, when tracked
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
	t.trackLocked(tt)
	return tt, nil
}

// beginN fills out with increasing timeticks at once (one allocation of
// the clock), for a batch in slice order; end must follow for each.
func (t *timeticks) beginN(ctx context.Context, out []uint64) error {
	raw, err := t.alloc.Allocate(ctx)
	if err != nil {
		return errors.Wrap(err, "allocate timetick")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range out {
		out[i] = t.nextLocked(raw)
	}
	t.after += len(out)
	t.trackLocked(out...)
	return nil
}

// end marks an append finished whose outcome is not told (unknown).
func (t *timeticks) end(tt uint64) {
	t.finish([]uint64{tt}, []flightState{unknownFlight}, nil)
}

func (t *timeticks) endLocked(tt uint64) {
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

// The local release point. Scanners of the writing WAL need not wait for
// a watermark in the log to learn what is ordered: the writer knows it. A
// timetick L can be released to them once every append with a timetick at
// or below L has ended and each one that may be delivered is in the
// tail cache — then, whatever the next watermark, exactly those are
// what every other reader delivers below L too.
//
// An append is tracked from begin to end in allocation order (flights, a
// queue of increasing timeticks). The release point follows the front of
// the queue over ended appends: acknowledged ones (their last record must
// be tailed: need) and ones certainly not stored. An append whose outcome
// is unknown may still be stored, and other readers would deliver it if it
// lands before the next watermark: the release point stops below it until
// a watermark above it is written (covered), and then needs that
// watermark tailed, since such an append lies before it if it was stored
// in time.
type flightState uint8

const (
	inFlight flightState = iota
	ackedFlight
	notStoredFlight
	unknownFlight
)

type flight struct {
	tt    uint64
	state flightState
	last  message.ID // the last record's ID of an acknowledged append
}

// releaseTracker is the local release point's state; guarded by
// timeticks.mu. Off (nil) on WALs whose scanners never get local releases.
type releaseTracker struct {
	flights []flight // flights[head:] are tracked
	head    int
	tt      uint64     // every append at or below it has ended
	need    message.ID // what the buffer must hold before tt is released
}

// trackReleases turns the local release point on, before any append.
func (t *timeticks) trackReleases() { t.rel = &releaseTracker{} }

// trackLocked adds appends that just began. Assumes t.mu is held.
func (t *timeticks) trackLocked(tts ...uint64) {
	if t.rel == nil {
		return
	}
	for _, tt := range tts {
		t.rel.flights = append(t.rel.flights, flight{tt: tt})
	}
}

// finish ends the appends of tts with one outcome (last holds the last
// record's ID of each acknowledged one) and reports whether the release
// point moved.
func (t *timeticks) finish(tts []uint64, outcome []flightState, last []message.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tt := range tts {
		t.endLocked(tt)
	}
	r := t.rel
	if r == nil {
		return false
	}
	live := r.flights[r.head:]
	for i, tt := range tts {
		j, ok := slices.BinarySearchFunc(live, tt, func(f flight, tt uint64) int { return cmp.Compare(f.tt, tt) })
		if !ok {
			continue
		}
		live[j].state = outcome[i]
		if outcome[i] == ackedFlight {
			live[j].last = last[i]
		}
	}
	return t.advanceLocked(0, message.ID{})
}

// covered tells the tracker that a watermark wm, stored at id, was
// written: appends of unknown outcome below it are stored before it or
// never delivered.
func (t *timeticks) covered(wm uint64, id message.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rel == nil {
		return false
	}
	return t.advanceLocked(wm, id)
}

// advanceLocked moves the release point over the ended appends at the
// front of the queue. Assumes t.mu is held.
func (t *timeticks) advanceLocked(wm uint64, wmID message.ID) bool {
	r := t.rel
	moved := false
	for r.head < len(r.flights) {
		f := r.flights[r.head]
		switch {
		case f.state == inFlight:
		case f.state == unknownFlight && f.tt >= wm:
		default:
			if f.state == ackedFlight && (r.need.IsZero() || r.need.LT(f.last)) {
				r.need = f.last
			}
			if f.state == unknownFlight && (r.need.IsZero() || r.need.LT(wmID)) {
				r.need = wmID
			}
			r.tt = f.tt
			r.flights[r.head] = flight{}
			r.head++
			moved = true
			continue
		}
		break
	}
	if r.head > 0 && r.head >= len(r.flights)/2 {
		n := copy(r.flights, r.flights[r.head:])
		clear(r.flights[n:])
		r.flights = r.flights[:n]
		r.head = 0
	}
	return moved
}

// releasePoint returns the local release point and what the write-ahead
// buffer must hold before it applies.
func (t *timeticks) releasePoint() (uint64, message.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rel == nil {
		return 0, message.ID{}
	}
	return t.rel.tt, t.rel.need
}
