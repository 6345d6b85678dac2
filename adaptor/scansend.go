package adaptor

import (
	"sync"

	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
)

// Delivery: run hands what it releases to a sender goroutine in chunks, and
// the sender hands the messages to the reader one by one (Read's Chan), or
// each chunk whole (ReadBatches' Batches).
//
// A watermark releases thousands of messages at once. Sent by run itself,
// the scan alternated between two phases, each a hand-off per message
// between two goroutines: reading from the backend (the reader idle), then
// delivering (the backend idle). With the sender, delivering a release
// overlaps with reading what the next watermark will release.
//
// Memory stays bounded by the scanner's budget: run reads no further while
// the bytes in its reorder buffer plus those released and not yet taken by
// the reader exceed ScannerBufferBytes (and some are not yet taken: the
// reorder buffer alone may hold one message above its budget). A reader
// that does not read therefore stops the scanner from reading, as when run
// sent the messages itself.
const (
	outChunkLen   = 64
	outChunkBytes = 256 << 10
	// outFreeChunks is how many delivered chunk slices the outbox keeps
	// for run to fill again (4 KiB each, cleared): a watermark releases a
	// few thousand messages at once, which run queues faster than the
	// reader takes them, and with a shorter list most chunks of every
	// release were allocated anew.
	outFreeChunks = 64
)

// outbox is the queue from run to the sender.
type outbox struct {
	// bytes counts what is queued, being sent, or in the chunk run fills:
	// run reads it per message, without a lock.
	bytes atomic.Int64

	mu      sync.Mutex
	chunks  []outChunk // queued, oldest first
	free    [][]message.Immutable
	sending bool // the sender holds a chunk it popped
	// direct is the reader's channel of slices (ReadBatches), nil for one
	// by one: run hands a chunk over itself when the reader waits and
	// nothing is queued before it, saving the sender's hand-off.
	direct chan []message.Immutable

	filling outChunk // owned by run

	kick    chan struct{} // cap 1: a chunk was queued
	drained chan struct{} // cap 1: the sender finished a chunk
}

type outChunk struct {
	msgs  []message.Immutable
	bytes int
}

func newOutbox(direct chan []message.Immutable) *outbox {
	return &outbox{kick: make(chan struct{}, 1), drained: make(chan struct{}, 1), direct: direct}
}

// add appends m (counted as size bytes) to the chunk run fills, queueing
// the chunk once full. Called by run.
func (o *outbox) add(m message.Immutable, size int) {
	if o.filling.msgs == nil {
		o.filling.msgs = o.newSlice()
	}
	o.filling.msgs = append(o.filling.msgs, m)
	o.filling.bytes += size
	o.bytes.Add(int64(size))
	if len(o.filling.msgs) >= outChunkLen || o.filling.bytes >= outChunkBytes {
		o.flush()
	}
}

// flush queues the chunk run fills, if it holds anything. Called by run.
func (o *outbox) flush() {
	if len(o.filling.msgs) == 0 {
		return
	}
	o.mu.Lock()
	if o.direct != nil && len(o.chunks) == 0 && !o.sending {
		// Nothing is queued and the sender holds nothing: it stays idle
		// until run queues, so a chunk run hands over now comes in order.
		o.mu.Unlock()
		select {
		case o.direct <- o.filling.msgs:
			c := o.filling
			o.filling = outChunk{}
			o.sent(c, true)
			return
		default:
		}
		o.mu.Lock()
	}
	o.chunks = append(o.chunks, o.filling)
	o.mu.Unlock()
	o.filling = outChunk{}
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

func (o *outbox) newSlice() []message.Immutable {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.free); n > 0 {
		s := o.free[n-1]
		o.free = o.free[:n-1]
		return s
	}
	return make([]message.Immutable, 0, outChunkLen)
}

// pop takes the oldest queued chunk. Called by the sender.
func (o *outbox) pop() (outChunk, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.chunks) == 0 {
		return outChunk{}, false
	}
	c := o.chunks[0]
	o.chunks[0] = outChunk{}
	o.chunks = o.chunks[1:]
	o.sending = true
	if len(o.chunks) == 0 {
		o.chunks = o.chunks[:0:0]
	}
	return c, true
}

// sent returns a chunk the sender delivered, and wakes run if it waits for
// room. A chunk handed over whole (handedOver: ReadBatches) belongs to the
// reader; another is cleared and filled again. Called by the sender.
func (o *outbox) sent(c outChunk, handedOver bool) {
	if !handedOver {
		clear(c.msgs)
	}
	o.mu.Lock()
	if !handedOver && len(o.free) < outFreeChunks {
		o.free = append(o.free, c.msgs[:0])
	}
	o.sending = false
	o.mu.Unlock()
	o.bytes.Sub(int64(c.bytes))
	select {
	case o.drained <- struct{}{}:
	default:
	}
}

// clear drops whatever was not delivered, once the sender stopped.
func (o *outbox) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.chunks {
		clear(c.msgs)
	}
	o.chunks = nil
	clear(o.filling.msgs)
	o.filling = outChunk{}
	o.free = nil
	o.bytes.Store(0)
}

// emit queues m for the reader, after everything emitted before it.
func (s *scanner) emit(m message.Immutable, size int) { s.box.add(m, size) }

// waitRoom waits, before run reads another message, while the sender still
// has released messages to deliver and either what the scanner holds is
// above its budget, or the scanner tails the tail cache. A tailing
// scanner reads no further until the reader took what was released: the
// shared buffer is its read-ahead, and one that stalls falls back to the
// backend once evicted rather than copying the shared buffer into its own
// (reading ahead pays while catching up, where the backend's hand-off and
// the reader's overlap).
func (s *scanner) waitRoom() error {
	budget := int64(s.v.budget)
	for {
		out := s.box.bytes.Load()
		if out == 0 || (s.backend != nil && int64(s.buf.Bytes()+s.join.bytes)+out <= budget) {
			return nil
		}
		s.box.flush()
		if s.v.hooks.stalled != nil {
			s.v.hooks.stalled(s.backend == nil, s.cursor)
		}
		select {
		case <-s.box.drained:
		case <-s.halt:
			return errStopped
		}
	}
}

// waitDelivered waits until the sender delivered everything emitted: a
// scanner that ends on an error first delivers what it released.
func (s *scanner) waitDelivered() {
	s.box.flush()
	for s.box.bytes.Load() > 0 {
		if s.v.hooks.stalled != nil {
			s.v.hooks.stalled(s.backend == nil, s.cursor)
		}
		select {
		case <-s.box.drained:
		case <-s.halt:
			return
		}
	}
}

// sendLoop is the sender goroutine: it delivers queued chunks in order
// until the scanner halts.
func (s *scanner) sendLoop() {
	for {
		c, ok := s.box.pop()
		if !ok {
			select {
			case <-s.box.kick:
				continue
			case <-s.halt:
				return
			}
		}
		if s.batches != nil {
			select {
			case s.batches <- c.msgs:
			case <-s.halt:
				return
			}
			s.box.sent(c, true)
			continue
		}
		for _, m := range c.msgs {
			if !s.send(m) {
				return
			}
		}
		s.box.sent(c, false)
	}
}

// send hands m to the reader; false when the scanner stops first. When the
// reader waits, a non-blocking send (a single-case select with a default)
// hands it over without the cost of a select that locks two channels.
func (s *scanner) send(m message.Immutable) bool {
	select {
	case s.out <- m:
		return true
	default:
	}
	select {
	case s.out <- m:
		return true
	case <-s.halt:
		return false
	}
}
