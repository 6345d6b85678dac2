// Package reorder is a byte-bounded buffer that holds items arriving out of
// timetick order and releases them in order once a watermark says that
// nothing older can still arrive.
//
// Items mostly arrive in order (concurrent appends only swap neighbours), so
// the buffer keeps an in-order run in a FIFO and only the items that break
// it in a heap; releasing merges the two. It is pure logic: no goroutines,
// no locks (its owner serialises access).
package reorder

import (
	"github.com/cockroachdb/errors"
)

// ErrFull is returned by Push when the item does not fit the byte budget.
var ErrFull = errors.New("reorder buffer full")

// Item is one buffered element.
type Item[T any] struct {
	// TimeTick orders release.
	TimeTick uint64
	// Key identifies the item; a second item with a key already buffered is
	// a duplicate. An empty Key is never a duplicate.
	Key string
	// Size is what the item counts against the budget.
	Size  int
	Value T
}

// Buffer holds items until released. The zero value is not usable; use New.
type Buffer[T any] struct {
	run    []entry[T] // in timetick order: run[runHead:] are buffered
	runHd  int
	h      []entry[T] // a min-heap by (timetick, seq) of out-of-order items
	keys   map[string]struct{}
	bytes  int
	budget int
	seq    uint64 // arrival counter, to keep equal timeticks in push order
}

type entry[T any] struct {
	Item[T]
	seq uint64
}

// New returns a buffer bounded to budget bytes (≤ 0: unbounded).
func New[T any](budget int) *Buffer[T] {
	return &Buffer[T]{keys: map[string]struct{}{}, budget: budget}
}

// Push buffers it. It reports false for a duplicate key (nothing changes),
// and ErrFull when the item would take the buffer above its budget — except
// into an empty buffer, which always takes one item so that an item larger
// than the budget can still pass through alone.
func (b *Buffer[T]) Push(it Item[T]) (added bool, err error) {
	if it.Key != "" {
		if _, dup := b.keys[it.Key]; dup {
			return false, nil
		}
	}
	if b.budget > 0 && b.Len() > 0 && b.bytes+it.Size > b.budget {
		return false, errors.Wrapf(ErrFull, "%d bytes buffered, %d more exceed the budget of %d", b.bytes, it.Size, b.budget)
	}
	b.seq++
	e := entry[T]{Item: it, seq: b.seq}
	if n := len(b.run); n == b.runHd || b.run[n-1].TimeTick <= it.TimeTick {
		b.run = append(b.run, e)
	} else {
		b.heapPush(e)
	}
	if it.Key != "" {
		b.keys[it.Key] = struct{}{}
	}
	b.bytes += it.Size
	return true, nil
}

// PopUpTo removes and returns, in timetick order, every item whose timetick
// is at or below watermark. Items of equal timetick come out in push order.
func (b *Buffer[T]) PopUpTo(watermark uint64) []Item[T] {
	if m, ok := b.MinTimeTick(); !ok || m > watermark {
		return nil
	}
	return b.PopUpToAppend(make([]Item[T], 0, b.Len()), watermark)
}

// PopUpToAppend is PopUpTo appending to dst, so that an owner releasing at
// every watermark can reuse one slice instead of allocating one per
// watermark.
func (b *Buffer[T]) PopUpToAppend(dst []Item[T], watermark uint64) []Item[T] {
	out := dst
	if m, ok := b.MinTimeTick(); !ok || m > watermark {
		return out
	}
	for {
		fromRun := b.runHd < len(b.run) && b.run[b.runHd].TimeTick <= watermark
		fromHeap := len(b.h) > 0 && b.h[0].TimeTick <= watermark
		if fromRun && fromHeap && less(b.h[0], b.run[b.runHd]) {
			fromRun = false
		}
		var e entry[T]
		switch {
		case fromRun:
			e = b.run[b.runHd]
			b.run[b.runHd] = entry[T]{}
			b.runHd++
		case fromHeap:
			e = b.heapPop()
		default:
			b.compact()
			return out
		}
		if e.Key != "" {
			delete(b.keys, e.Key)
		}
		b.bytes -= e.Size
		out = append(out, e.Item)
	}
}

// compact reuses the run's space once half of it is released.
func (b *Buffer[T]) compact() {
	if b.runHd == len(b.run) {
		b.run, b.runHd = b.run[:0], 0
		return
	}
	if b.runHd > len(b.run)/2 {
		n := copy(b.run, b.run[b.runHd:])
		clear(b.run[n:])
		b.run, b.runHd = b.run[:n], 0
	}
}

// Each calls fn for every buffered item, in no particular order.
func (b *Buffer[T]) Each(fn func(Item[T])) {
	for _, e := range b.run[b.runHd:] {
		fn(e.Item)
	}
	for _, e := range b.h {
		fn(e.Item)
	}
}

// Len returns the number of buffered items.
func (b *Buffer[T]) Len() int { return len(b.run) - b.runHd + len(b.h) }

// Bytes returns the bytes buffered.
func (b *Buffer[T]) Bytes() int { return b.bytes }

// MinTimeTick returns the lowest buffered timetick, and false when empty.
func (b *Buffer[T]) MinTimeTick() (uint64, bool) {
	switch {
	case b.runHd < len(b.run) && len(b.h) > 0:
		return min(b.run[b.runHd].TimeTick, b.h[0].TimeTick), true
	case b.runHd < len(b.run):
		return b.run[b.runHd].TimeTick, true
	case len(b.h) > 0:
		return b.h[0].TimeTick, true
	}
	return 0, false
}

func less[T any](a, b entry[T]) bool {
	if a.TimeTick != b.TimeTick {
		return a.TimeTick < b.TimeTick
	}
	return a.seq < b.seq
}

// heapPush and heapPop keep b.h a binary min-heap without boxing entries
// into interfaces, as container/heap would.
func (b *Buffer[T]) heapPush(e entry[T]) {
	b.h = append(b.h, e)
	for i := len(b.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(b.h[i], b.h[p]) {
			break
		}
		b.h[i], b.h[p] = b.h[p], b.h[i]
		i = p
	}
}

func (b *Buffer[T]) heapPop() entry[T] {
	top := b.h[0]
	n := len(b.h) - 1
	b.h[0] = b.h[n]
	b.h[n] = entry[T]{}
	b.h = b.h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && less(b.h[l], b.h[m]) {
			m = l
		}
		if r < n && less(b.h[r], b.h[m]) {
			m = r
		}
		if m == i {
			break
		}
		b.h[i], b.h[m] = b.h[m], b.h[i]
		i = m
	}
	return top
}
