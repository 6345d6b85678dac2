// Package scanout is a backend scanner's output: the channel its goroutine
// hands what it read to, one message per send (walimpls.Scanner.Chan) or a
// slice per send (walimpls.BatchScanner.Batches). A backend reads a chunk of
// its log and delivers it with one call whichever way it was asked to, so
// the two kinds of scanner share one code path and keep the same promises.
//
// An Out is owned by the scanner's goroutine: Slice, Deliver and Close are
// called from it only; Chan and Batches from anywhere.
package scanout

import "github.com/streamwal/streamwal/message"

// Out delivers a scanner's messages.
type Out struct {
	one  chan message.Immutable
	many chan []message.Immutable
	// scratch is the slice Slice lends: filled again once delivered one by
	// one, or while a batch was not handed over.
	scratch []message.Immutable
}

// New returns an Out that delivers slices when batches is set, messages
// otherwise. buffer is the channel's capacity, in messages or in slices.
func New(batches bool, buffer int) *Out {
	if batches {
		return &Out{many: make(chan []message.Immutable, buffer)}
	}
	return &Out{one: make(chan message.Immutable, buffer)}
}

// Batched reports whether o delivers slices.
func (o *Out) Batched() bool { return o.many != nil }

// Chan is what a walimpls.Scanner returns; nil for an Out that delivers
// slices.
func (o *Out) Chan() <-chan message.Immutable { return o.one }

// Batches is what a walimpls.BatchScanner returns; nil for an Out that
// delivers messages one by one.
func (o *Out) Batches() <-chan []message.Immutable { return o.many }

// Slice returns an empty slice with room for n messages, to fill and pass
// to Deliver. It lends the same slice again until a batch is handed over:
// a delivered slice belongs to its receiver and is never lent again.
func (o *Out) Slice(n int) []message.Immutable {
	if cap(o.scratch) < n {
		o.scratch = make([]message.Immutable, 0, n)
	}
	return o.scratch[:0]
}

// Deliver hands msgs over in order and returns how many it handed over: all
// of them, unless stop closed first. With batches msgs goes as one slice,
// all or nothing, and the caller must not touch it again once it went;
// one by one, Deliver clears msgs before it returns, so that the scanner
// does not pin delivered messages (the caller takes what it needs of them,
// its cursor, beforehand). An empty msgs delivers nothing.
func (o *Out) Deliver(stop <-chan struct{}, msgs []message.Immutable) int {
	if len(msgs) == 0 {
		return 0
	}
	if o.many != nil {
		select {
		case o.many <- msgs:
			o.scratch = nil // the receiver's now
			return len(msgs)
		case <-stop:
			return 0
		}
	}
	n := 0
	for _, m := range msgs {
		select {
		case o.one <- m:
			n++
		case <-stop:
			clear(msgs)
			return n
		}
	}
	// Do not pin delivered messages until the slice is filled again.
	clear(msgs)
	return n
}

// Close closes the channel: the scanner delivers nothing more.
func (o *Out) Close() {
	if o.many != nil {
		close(o.many)
		return
	}
	close(o.one)
}
