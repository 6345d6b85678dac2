package adaptor

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Reading: the source of a scanner (the backend while catching up, the
// tail cache while tailing), and the parsing of each message's
// reserved properties, once.

// logEntry is a message read from the log with its reserved properties
// parsed: they are strings in a map, and parsing them is most of what
// ordering a message costs.
type logEntry struct {
	m     message.Immutable
	kind  message.Kind
	term  int64
	tt    uint64
	hasTT bool
	size  int // m.Size()
}

// parse reads m's reserved properties, in one pass.
func parse(m message.Immutable) logEntry {
	h := m.Header()
	return logEntry{m: m, kind: h.Kind, term: h.Term, tt: h.TimeTick, hasTT: h.HasTimeTick, size: h.Size}
}

// next returns the next message of the log, switching between catch-up and
// tailing as the tail cache allows.
func (s *scanner) next() (message.Immutable, error) {
	for {
		if s.backend != nil {
			m, ok, err := s.receive()
			if err != nil {
				return message.Immutable{}, err
			}
			if !ok {
				// Error is valid once Done is closed, which may come a
				// little after Chan closed.
				select {
				case <-s.backend.Done():
				case <-s.halt:
					return message.Immutable{}, errStopped
				}
				if err := s.backend.Error(); err != nil {
					return message.Immutable{}, err
				}
				return message.Immutable{}, errors.Wrap(walimpls.ErrClosed, "backend scanner ended")
			}
			s.resume = cursor.StartAfter(m.ID())
			if err := s.tryTailing(m.ID()); err != nil {
				return message.Immutable{}, err
			}
			return m, nil
		}
		if s.pendAt < len(s.pending) {
			m := s.pending[s.pendAt]
			if s.v.truncatedBelow(m.ID()) {
				// Overtaken by a truncation: the buffer still holds what the
				// log no longer does. Never deliver past it, never skip it.
				return message.Immutable{}, errors.Wrapf(walimpls.ErrPositionGone,
					"adaptor: scanner %q at %s, before the truncation point", s.opt.Name, m.ID())
			}
			s.pending[s.pendAt] = message.Immutable{}
			s.pendAt++
			s.resume = cursor.StartAfter(m.ID())
			return m, nil
		}
		s.localRelease()
		msgs, evicted, wait, closed := s.v.cache.readAppend(s.pending[:0], s.cursor, tailCacheBatch)
		s.pending, s.pendAt = msgs, 0
		switch {
		case len(msgs) > 0:
			s.cursor += int64(len(msgs))
			continue
		case evicted || closed:
			// Fell behind the buffer (or it stopped): read the backend
			// again from where we are. A truncated position fails here
			// with ErrPositionGone rather than skipping.
			bs, err := s.v.read(s.Context(), walimpls.ReadOption{Name: s.opt.Name, DeliverPolicy: s.resume,
				ReadAheadBytes: s.v.budget / 4})
			if err != nil {
				if s.Stopped() {
					// Cut short by the stop (its WAL closing, say): the
					// stop's reason is why the scanner ends, not
					// "context canceled".
					return message.Immutable{}, errStopped
				}
				return message.Immutable{}, err
			}
			s.backend = bs
			s.setMode(modeCatchUp)
			if evicted {
				s.v.m.fallbacks.Inc()
			}
			continue
		}
		select {
		case <-wait:
		case <-s.halt:
			return message.Immutable{}, errStopped
		}
	}
}

// backendScan is a backend scanner the adaptor reads: a batch scanner when
// the backend offers one (walimpls.BatchReader), which saves a goroutine
// hand-off per message, else a one-by-one scanner. Done, Error and Close
// are those of the scanner either way.
type backendScan struct {
	scanLife
	one  walimpls.Scanner      // Read; nil with many
	many walimpls.BatchScanner // ReadBatches; nil with one
	// batch is what the adaptor's scanner received and did not take yet:
	// batch[at:].
	batch []message.Immutable
	at    int
	// scratch is where receiveBatch gathers one-by-one messages.
	scratch []message.Immutable
}

// scanLife is what both kinds of backend scanner share.
type scanLife interface {
	Done() <-chan struct{}
	Error() error
	Close() error
}

// readBackend starts a backend scanner through ReadBatches when impl
// offers it, else through Read.
func readBackend(impl walimpls.WALImpl) func(context.Context, walimpls.ReadOption) (*backendScan, error) {
	if br, ok := impl.(walimpls.BatchReader); ok {
		return func(ctx context.Context, opt walimpls.ReadOption) (*backendScan, error) {
			bs, err := br.ReadBatches(ctx, opt)
			if err != nil {
				return nil, err
			}
			return &backendScan{scanLife: bs, many: bs}, nil
		}
	}
	return func(ctx context.Context, opt walimpls.ReadOption) (*backendScan, error) {
		s, err := impl.Read(ctx, opt)
		if err != nil {
			return nil, err
		}
		return &backendScan{scanLife: s, one: s}, nil
	}
}

// Close stops the backend scanner and drops what it delivered and was not
// taken.
func (b *backendScan) Close() error {
	clear(b.batch[b.at:])
	b.batch, b.at = nil, 0
	return b.scanLife.Close()
}

// receiveBatch waits for the backend scanner's next messages and takes
// what it has ready: a slice as the backend delivered it, or up to max
// messages received one by one (the first waited for, the rest taken
// without blocking). ok is false when the scanner ended, stopped true when
// stop closed first. A slice from the backend is the caller's; gathered
// messages are valid until the next call.
func (b *backendScan) receiveBatch(max int, stop <-chan struct{}) (batch []message.Immutable, ok, stopped bool) {
	if b.many != nil {
		for { // an empty slice (not the contract's) has nothing to take
			select {
			case batch, ok = <-b.many.Batches():
				if !ok || len(batch) > 0 {
					return batch, ok, false
				}
			case <-stop:
				return nil, false, true
			}
		}
	}
	var m message.Immutable
	select {
	case m, ok = <-b.one.Chan():
	case <-stop:
		return nil, false, true
	}
	if !ok {
		return nil, false, false
	}
	batch = append(b.scratch[:0], m)
	// A single-case select with a default is a cheap non-blocking receive.
	for len(batch) < max {
		select {
		case m, ok = <-b.one.Chan():
		default:
			ok = false
		}
		if !ok {
			break
		}
		batch = append(batch, m)
	}
	b.scratch = batch
	return batch, true, false
}

// receive takes the next message from the backend scanner: from the slice
// it received last, else from the next one, or one message of a one-by-one
// scanner (held messages do not count against the scanner's budget).
// Stopping is checked before each receive without blocking, so that a
// backend that always has a message ready cannot keep a stopped scanner
// running.
func (s *scanner) receive() (m message.Immutable, ok bool, err error) {
	b := s.backend
	if b.at == len(b.batch) {
		if err := s.stopping(); err != nil {
			return message.Immutable{}, false, err
		}
		batch, ok, stopped := b.receiveBatch(1, s.halt)
		switch {
		case stopped:
			return message.Immutable{}, false, errStopped
		case !ok:
			return message.Immutable{}, false, nil
		}
		b.batch, b.at = batch, 0
	}
	m = b.batch[b.at]
	b.batch[b.at] = message.Immutable{}
	b.at++
	return m, true, nil
}

// stopping returns why the scanner must stop, if it must, without blocking.
func (s *scanner) stopping() error {
	select {
	case <-s.halt:
		return errStopped
	default:
		return nil
	}
}

// tryTailing switches a catching-up scanner to the tail cache once
// the buffer holds the message it just read. A scanner that reads the
// backend as fast as the tail reader would otherwise race it for ever; so
// when the buffer's window covers id but the tail reader has not pushed it
// yet, the scanner waits for it.
func (s *scanner) tryTailing(id message.ID) error {
	for {
		// One lock per message read from the backend, not three.
		i, found, behind, closed := s.v.cache.locate(id)
		switch {
		case closed:
			return nil
		case found:
			_ = s.backend.Close()
			s.backend = nil
			s.cursor = i + 1
			s.setMode(modeTailing)
			return nil
		case !behind:
			return nil
		}
		wait := s.v.cache.waitChanged()
		// Look again after taking the channel, so a push in between is
		// not missed.
		if _, found, behind, _ := s.v.cache.locate(id); found || !behind {
			continue
		}
		select {
		case <-wait:
		case <-s.halt:
			return errStopped
		}
	}
}
