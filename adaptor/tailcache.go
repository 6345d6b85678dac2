package adaptor

import (
	"sync"

	"github.com/streamwal/streamwal/message"
)

// tailCache holds the most recent window of a channel's log, in log
// order, exactly as the backend stores it: a contiguous run of messages, fed
// by one tail reader. Tailing scanners read it by index instead of each
// reading the backend. The oldest messages are evicted when the byte budget
// is exceeded; a scanner whose position was evicted falls back to reading the
// backend. The writer is never blocked by a slow scanner.
type tailCache struct {
	budget int

	mu sync.Mutex
	// origin is where the tail reader starts, or zero when unknown (a
	// read-only WAL that tails from the latest position): its first push
	// is origin (inclusive) or the message after it. Set before the tail
	// reader starts.
	origin          message.ID
	originInclusive bool
	// entries.at(i) has index base+i. A full buffer evicts on every push:
	// copying the window then (and growing one slice while it fills) made
	// the tail reader, not the backend, the append path's bottleneck, so
	// the window is a queue of fixed blocks.
	entries cacheQueue
	base    int64
	bytes   int
	closed  bool
	changed chan struct{} // closed and replaced on push (if waited on) and close
	waiting bool          // a reader holds changed; push must close it

	// The writer's local release point (wal.offerRelease): offered, and
	// published once the buffer holds what it needs.
	offer struct {
		tt   uint64
		need message.ID
	}
	released  localRelease
	noRelease bool
}

type cacheEntry struct {
	m    message.Immutable
	size int
}

// cacheBlock is how many entries a block of the window holds.
const cacheBlock = 256

// cacheQueue is a queue of entries in fixed blocks: pushing never copies
// what is queued, and popping frees a block once it is empty. One spare
// block is kept, so a full buffer that evicts as it pushes allocates
// nothing.
type cacheQueue struct {
	blocks [][]cacheEntry // blocks[0][off:], then the others, are queued
	off    int
	n      int
	spare  []cacheEntry
}

func (q *cacheQueue) len() int { return q.n }

// at returns the i-th queued entry, 0 ≤ i < len.
func (q *cacheQueue) at(i int) *cacheEntry {
	j := q.off + i
	return &q.blocks[j/cacheBlock][j%cacheBlock]
}

func (q *cacheQueue) push(e cacheEntry) {
	if k := len(q.blocks); k == 0 || len(q.blocks[k-1]) == cacheBlock {
		b := q.spare
		if b == nil {
			b = make([]cacheEntry, 0, cacheBlock)
		}
		q.spare = nil
		q.blocks = append(q.blocks, b)
	}
	k := len(q.blocks) - 1
	q.blocks[k] = append(q.blocks[k], e)
	q.n++
}

// popFront drops the oldest entry; the queue must not be empty.
func (q *cacheQueue) popFront() {
	q.blocks[0][q.off] = cacheEntry{} // let the message be collected
	q.off++
	q.n--
	if q.off == len(q.blocks[0]) {
		q.spare = q.blocks[0][:0]
		q.blocks[0] = nil
		q.blocks = q.blocks[1:]
		q.off = 0
	}
}

func newTailCache(budget int) *tailCache {
	return &tailCache{budget: budget, changed: make(chan struct{})}
}

// push appends the next messages of the log, evicting the oldest ones while
// over budget (the newest is always kept), and returns the bytes buffered.
// The tail reader pushes what it read in batches: one lock and one wake-up
// per batch.
func (b *tailCache) push(msgs ...message.Immutable) int {
	if len(msgs) == 0 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.bytes
	}
	// Sizes walk each message's properties: do it outside the lock.
	var sizes [64]int
	sz := sizes[:0]
	if len(msgs) > len(sizes) {
		sz = make([]int, 0, len(msgs))
	}
	for _, m := range msgs {
		sz = append(sz, m.Size()+64)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, m := range msgs {
		b.entries.push(cacheEntry{m: m, size: sz[i]})
		b.bytes += sz[i]
	}
	for b.bytes > b.budget && b.entries.len() > 1 {
		b.bytes -= b.entries.at(0).size
		b.entries.popFront()
		b.base++
	}
	b.publishLocked()
	b.wakeLocked()
	return b.bytes
}

// wakeLocked wakes waiting scanners. Waking costs a channel; only pay it
// when a scanner waits. Assumes b.mu is held.
func (b *tailCache) wakeLocked() {
	if b.waiting && !b.closed {
		b.waiting = false
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// localRelease is the writer's release point as published to its tailing
// scanners: timetick tt applies to a scanner that has read up to index
// (whose message has ID at).
type localRelease struct {
	tt    uint64
	index int64
	at    message.ID
}

// offerRelease offers the writer's release point tt, which applies once
// the buffer holds need (zero: nothing to wait for). It is published at
// the newest buffered message as soon as that is at or past need.
func (b *tailCache) offerRelease(tt uint64, need message.ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noRelease || tt <= b.offer.tt {
		return
	}
	b.offer.tt, b.offer.need = tt, need
	b.publishLocked()
	b.wakeLocked()
}

// stopReleases ends local releases for good: the writer is fenced, and
// what the tail reader pushes from now on may be another writer's.
func (b *tailCache) stopReleases() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.noRelease = true
}

// publishLocked publishes the offered release point if the buffer holds
// what it needs. Assumes b.mu is held.
func (b *tailCache) publishLocked() {
	if b.noRelease || b.offer.tt <= b.released.tt {
		return
	}
	n := b.entries.len()
	if n == 0 {
		return
	}
	newest := b.entries.at(n - 1).m.ID()
	if !b.offer.need.IsZero() && newest.LT(b.offer.need) {
		return
	}
	b.released = localRelease{tt: b.offer.tt, index: b.base + int64(n) - 1, at: newest}
}

// releasePoint returns the published local release point.
func (b *tailCache) releasePoint() (tt uint64, index int64, at message.ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.released.tt, b.released.index, b.released.at
}

// close wakes every waiting scanner for good.
func (b *tailCache) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.changed)
	}
}

// find returns the index of the message with id, if it is buffered.
func (b *tailCache) find(id message.ID) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.findLocked(id)
}

// findLocked is find. Assumes b.mu is held.
func (b *tailCache) findLocked(id message.ID) (int64, bool) {
	lo, hi := 0, b.entries.len()
	for lo < hi {
		mid := (lo + hi) / 2
		c, err := b.entries.at(mid).m.ID().Compare(id)
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
func (b *tailCache) read(i int64, max int) (msgs []message.Immutable, evicted bool, wait <-chan struct{}, closed bool) {
	return b.readAppend(nil, i, max)
}

// readAppend is read appending to dst, so that a scanner reuses one slice
// instead of allocating a copy per batch.
func (b *tailCache) readAppend(dst []message.Immutable, i int64, max int) (msgs []message.Immutable, evicted bool, wait <-chan struct{}, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < b.base {
		return dst, true, nil, false
	}
	off := int(i - b.base)
	if off >= b.entries.len() {
		if b.closed {
			return dst, false, nil, true
		}
		b.waiting = true
		return dst, false, b.changed, false
	}
	n := min(b.entries.len()-off, max)
	// A copy: the slots are zeroed by later evictions.
	for k := off; k < off+n; k++ {
		dst = append(dst, b.entries.at(k).m)
	}
	return dst, false, nil, false
}

// locate tells a catching-up scanner, under one lock, where id stands: at
// index i (found), about to be pushed by the tail reader (behind, see
// behind), or neither; closed when the buffer stopped growing.
func (b *tailCache) locate(id message.ID) (i int64, found, behind, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, false, false, true
	}
	if i, found = b.findLocked(id); found {
		return i, true, false, false
	}
	return 0, false, b.behindLocked(id), false
}

// behindLocked reports whether the buffer's window started at or before id
// but has not reached it yet: the tail reader is about to push it. Assumes
// b.mu is held.
func (b *tailCache) behindLocked(id message.ID) bool {
	if b.closed {
		return false
	}
	n := b.entries.len()
	if n == 0 {
		// Nothing pushed yet: the window starts where the tail reader
		// starts, when that is known.
		switch {
		case b.origin.IsZero():
			return false
		case b.originInclusive:
			return b.origin.LTE(id)
		}
		return b.origin.LT(id)
	}
	return b.entries.at(0).m.ID().LTE(id) && b.entries.at(n-1).m.ID().LT(id)
}

// startsAt records where the tail reader starts: at from (inclusive) or
// right after it.
func (b *tailCache) startsAt(from message.ID, inclusive bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.origin, b.originInclusive = from, inclusive
}

// waitChanged returns a channel closed at the next push or close.
func (b *tailCache) waitChanged() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.waiting = true
	}
	return b.changed
}

// firstWithTimeTick returns the ID of the first buffered data message or
// part before id with timetick tt: the first copy of an append that was
// retried (firstCopies). Rare, so a linear walk that parses properties.
func (b *tailCache) firstWithTimeTick(before message.ID, tt uint64) (message.ID, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries.len() {
		e := b.entries.at(k)
		if !e.m.ID().LT(before) {
			return message.ID{}, false
		}
		if k := e.m.Kind(); k != message.KindData && k != message.KindPart {
			continue
		}
		if t, ok := e.m.TimeTick(); ok && t == tt {
			return e.m.ID(), true
		}
	}
	return message.ID{}, false
}
