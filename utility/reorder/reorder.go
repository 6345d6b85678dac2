// Package reorder is a byte-bounded buffer that holds items arriving out of
// timetick order and releases them in order once a watermark says that
// nothing older can still arrive.
//
// It is pure logic: no goroutines, no locks (its owner serialises access).
package reorder

import (
	"container/heap"

	"github.com/cockroachdb/errors"
)

// ErrFull is returned by Push when the item does not fit the byte budget.
var ErrFull = errors.New("reorder buffer full")

// Item is one buffered element.
type Item[T any] struct {
	// TimeTick orders release.
	TimeTick uint64
	// Key identifies the item; a second item with a key already buffered is a
	// duplicate.
	Key string
	// Size is what the item counts against the budget.
	Size  int
	Value T
}

// Buffer holds items until released. The zero value is not usable; use New.
type Buffer[T any] struct {
	h      itemHeap[T]
	keys   map[string]struct{}
	bytes  int
	budget int
	seq    uint64 // arrival counter, to keep equal timeticks in push order
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
	if _, dup := b.keys[it.Key]; dup {
		return false, nil
	}
	if b.budget > 0 && len(b.h) > 0 && b.bytes+it.Size > b.budget {
		return false, errors.Wrapf(ErrFull, "%d bytes buffered, %d more exceed the budget of %d", b.bytes, it.Size, b.budget)
	}
	b.seq++
	heap.Push(&b.h, entry[T]{Item: it, seq: b.seq})
	b.keys[it.Key] = struct{}{}
	b.bytes += it.Size
	return true, nil
}

// PopUpTo removes and returns, in timetick order, every item whose timetick
// is at or below watermark. Items of equal timetick come out in push order.
func (b *Buffer[T]) PopUpTo(watermark uint64) []Item[T] {
	var out []Item[T]
	for len(b.h) > 0 && b.h[0].TimeTick <= watermark {
		it := heap.Pop(&b.h).(entry[T])
		delete(b.keys, it.Key)
		b.bytes -= it.Size
		out = append(out, it.Item)
	}
	return out
}

// Each calls fn for every buffered item, in no particular order.
func (b *Buffer[T]) Each(fn func(Item[T])) {
	for _, e := range b.h {
		fn(e.Item)
	}
}

// Len returns the number of buffered items.
func (b *Buffer[T]) Len() int { return len(b.h) }

// Bytes returns the bytes buffered.
func (b *Buffer[T]) Bytes() int { return b.bytes }

// MinTimeTick returns the lowest buffered timetick, and false when empty.
func (b *Buffer[T]) MinTimeTick() (uint64, bool) {
	if len(b.h) == 0 {
		return 0, false
	}
	return b.h[0].TimeTick, true
}

type entry[T any] struct {
	Item[T]
	seq uint64
}

// itemHeap orders by timetick, then arrival.
type itemHeap[T any] []entry[T]

func (h itemHeap[T]) Len() int { return len(h) }
func (h itemHeap[T]) Less(i, j int) bool {
	if h[i].TimeTick != h[j].TimeTick {
		return h[i].TimeTick < h[j].TimeTick
	}
	return h[i].seq < h[j].seq
}
func (h itemHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap[T]) Push(x any)   { *h = append(*h, x.(entry[T])) }
func (h *itemHeap[T]) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	var zero entry[T]
	old[n-1] = zero
	*h = old[:n-1]
	return it
}
