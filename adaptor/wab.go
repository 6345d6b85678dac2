package adaptor

import (
	"sync"

	"github.com/streamwal/streamwal/message"
)

// writeAheadBuffer holds the most recent window of a channel's log, in log
// order, exactly as the backend stores it: a contiguous run of messages, fed
// by one tail reader. Tailing scanners read it by index instead of each
// reading the backend. The oldest messages are evicted when the byte budget
// is exceeded; a scanner whose position was evicted falls back to reading the
// backend. The writer is never blocked by a slow scanner.
type writeAheadBuffer struct {
	budget int

	mu      sync.Mutex
	entries []message.Immutable // entries[i] has index base+i
	sizes   []int
	base    int64
	bytes   int
	closed  bool
	changed chan struct{} // closed and replaced on push and close
}

func newWriteAheadBuffer(budget int) *writeAheadBuffer {
	return &writeAheadBuffer{budget: budget, changed: make(chan struct{})}
}

// push appends the next message of the log, evicting the oldest ones while
// over budget (the newest is always kept).
func (b *writeAheadBuffer) push(m message.Immutable) {
	size := m.Size() + 64
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entries = append(b.entries, m)
	b.sizes = append(b.sizes, size)
	b.bytes += size
	drop := 0
	for b.bytes > b.budget && drop < len(b.entries)-1 {
		b.bytes -= b.sizes[drop]
		drop++
	}
	if drop > 0 {
		// Copy rather than reslice so evicted messages can be collected.
		b.entries = append([]message.Immutable(nil), b.entries[drop:]...)
		b.sizes = append([]int(nil), b.sizes[drop:]...)
		b.base += int64(drop)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// close wakes every waiting scanner for good.
func (b *writeAheadBuffer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.changed)
	}
}

// find returns the index of the message with id, if it is buffered.
func (b *writeAheadBuffer) find(id message.ID) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lo, hi := 0, len(b.entries)
	for lo < hi {
		mid := (lo + hi) / 2
		c, err := b.entries[mid].ID().Compare(id)
		if err != nil {
			return 0, false
		}
		switch {
		case c == 0:
			return b.base + int64(mid), true
		case c < 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, false
}

// read returns up to max messages from index i. evicted is true when i is
// no longer buffered; wait is set when nothing is there yet; closed when the
// buffer will not grow any more.
func (b *writeAheadBuffer) read(i int64, max int) (msgs []message.Immutable, evicted bool, wait <-chan struct{}, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < b.base {
		return nil, true, nil, false
	}
	off := int(i - b.base)
	if off >= len(b.entries) {
		if b.closed {
			return nil, false, nil, true
		}
		return nil, false, b.changed, false
	}
	n := min(len(b.entries)-off, max)
	return append([]message.Immutable(nil), b.entries[off:off+n]...), false, nil, false
}

// behind reports whether the buffer's window started at or before id but
// has not reached it yet: the tail reader is about to push it.
func (b *writeAheadBuffer) behind(id message.ID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.entries) == 0 {
		return false
	}
	first, last := b.entries[0].ID(), b.entries[len(b.entries)-1].ID()
	return first.LTE(id) && last.LT(id)
}

// waitChanged returns a channel closed at the next push or close.
func (b *writeAheadBuffer) waitChanged() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// isClosed reports whether the buffer stopped growing.
func (b *writeAheadBuffer) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// size returns the bytes buffered.
func (b *writeAheadBuffer) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes
}
