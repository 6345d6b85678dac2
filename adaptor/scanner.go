package adaptor

import (
	"context"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/reorder"
	"github.com/streamwal/streamwal/walimpls"
)

// Scanner modes, the "mode" label of streamwal_scanners.
const (
	modeCatchUp = "catchup"
	modeTailing = "tailing"
)

// wabBatch bounds how many messages a tailing scanner copies per lock.
const wabBatch = 64

var errStopped = errors.New("scanner stopped")

// scanner reads a channel's log from the backend (catch-up) or from the
// write-ahead buffer (tailing), and turns it into data messages in strictly
// increasing timetick order. Everything below run's loop is owned by the
// scanner's goroutine.
type scanner struct {
	w    *wal
	opt  ReadOption
	kind map[message.Kind]bool

	out      chan message.Immutable
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	err      error // set by run before done closes

	// Source: a backend scanner while catching up, else the buffer cursor.
	backend walimpls.Scanner
	cursor  int64
	pending []message.Immutable // copied from the buffer, not yet handled
	resume  walimpls.DeliverPolicy
	mode    string

	buf       *reorder.Buffer[message.Immutable]
	join      *joiner
	started   bool   // the first message was handled
	maxTerm   int64  // highest term-begin seen (or known before the start)
	released  uint64 // highest watermark applied
	delivered uint64 // timetick of the last data message delivered
	bufBytes  int    // what the buffer gauge was last told
	// termBegins waiting to be delivered: right before the first released
	// message of their term, so that nothing of a lower term follows them.
	termBegins []message.Immutable
}

func newScanner(ctx context.Context, w *wal, opt ReadOption) (*scanner, error) {
	kinds := opt.Filter.Kinds
	if len(kinds) == 0 {
		kinds = []message.Kind{message.KindData}
	}
	s := &scanner{
		w:    w,
		opt:  opt,
		kind: map[message.Kind]bool{},
		out:  make(chan message.Immutable),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		buf:  reorder.New[message.Immutable](w.opts.ScannerBufferBytes),
		join: newJoiner(),
	}
	for _, k := range kinds {
		s.kind[k] = true
	}
	p := opt.DeliverPolicy.backend
	if id, inclusive, ok := p.StartID(); ok {
		if i, found := w.wab.find(id); found {
			s.cursor = i
			if !inclusive {
				s.cursor++
			}
			s.resume = p
			s.setMode(modeTailing)
			return s, nil
		}
	}
	bs, err := w.impl.Read(ctx, walimpls.ReadOption{Name: opt.Name, DeliverPolicy: p, ReadAheadBytes: w.opts.ScannerBufferBytes / 4})
	if err != nil {
		return nil, err
	}
	s.backend = bs
	s.resume = p
	s.setMode(modeCatchUp)
	return s, nil
}

func (s *scanner) setMode(mode string) {
	if s.mode == mode {
		return
	}
	if s.mode != "" {
		s.w.m.scanners(s.mode).Dec()
	}
	s.mode = mode
	if mode != "" {
		s.w.m.scanners(mode).Inc()
	}
}

func (s *scanner) Chan() <-chan message.Immutable { return s.out }
func (s *scanner) Done() <-chan struct{}          { return s.done }

func (s *scanner) Error() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

func (s *scanner) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.w.forgetScanner(s)
	return nil
}

// abort releases a scanner whose run never started.
func (s *scanner) abort() {
	if s.backend != nil {
		_ = s.backend.Close()
	}
	s.setMode("")
	close(s.out)
	close(s.done)
}

func (s *scanner) run() {
	defer close(s.done)
	defer close(s.out)
	defer func() {
		if s.backend != nil {
			_ = s.backend.Close()
		}
		s.setMode("")
		s.w.m.scanBytes.Sub(float64(s.bufBytes))
	}()
	var last message.ID
	for {
		m, err := s.next()
		if err == nil {
			if !last.IsZero() && !last.LT(m.ID()) {
				// The backend delivered a position again: a duplicate.
				s.w.m.dropped(dropDuplicate).Inc()
				continue
			}
			last = m.ID()
			err = s.handle(m)
		}
		if err != nil {
			if !errors.Is(err, errStopped) {
				s.err = err
			}
			return
		}
	}
}

// next returns the next message of the log, switching between catch-up and
// tailing as the write-ahead buffer allows.
func (s *scanner) next() (message.Immutable, error) {
	for {
		if s.backend != nil {
			select {
			case m, ok := <-s.backend.Chan():
				if !ok {
					if err := s.backend.Error(); err != nil {
						return message.Immutable{}, err
					}
					return message.Immutable{}, errors.Wrap(walimpls.ErrClosed, "backend scanner ended")
				}
				s.resume = walimpls.DeliverStartAfter(m.ID())
				if err := s.tryTailing(m.ID()); err != nil {
					return message.Immutable{}, err
				}
				return m, nil
			case <-s.stop:
				return message.Immutable{}, errStopped
			case <-s.w.ctx.Done():
				return message.Immutable{}, errors.Wrap(walimpls.ErrClosed, "wal closed")
			}
		}
		if len(s.pending) > 0 {
			m := s.pending[0]
			s.pending = s.pending[1:]
			s.resume = walimpls.DeliverStartAfter(m.ID())
			return m, nil
		}
		msgs, evicted, wait, closed := s.w.wab.read(s.cursor, wabBatch)
		switch {
		case len(msgs) > 0:
			s.cursor += int64(len(msgs))
			s.pending = msgs
			continue
		case evicted || closed:
			// Fell behind the buffer (or it stopped): read the backend
			// again from where we are. A truncated position fails here
			// with ErrPositionGone rather than skipping.
			bs, err := s.w.impl.Read(s.w.ctx, walimpls.ReadOption{Name: s.opt.Name, DeliverPolicy: s.resume,
				ReadAheadBytes: s.w.opts.ScannerBufferBytes / 4})
			if err != nil {
				return message.Immutable{}, err
			}
			s.backend = bs
			s.setMode(modeCatchUp)
			if evicted {
				s.w.m.fallbacks.Inc()
			}
			continue
		}
		select {
		case <-wait:
		case <-s.stop:
			return message.Immutable{}, errStopped
		case <-s.w.ctx.Done():
			return message.Immutable{}, errors.Wrap(walimpls.ErrClosed, "wal closed")
		}
	}
}

// tryTailing switches a catching-up scanner to the write-ahead buffer once
// the buffer holds the message it just read. A scanner that reads the
// backend as fast as the tail reader would otherwise race it for ever; so
// when the buffer's window covers id but the tail reader has not pushed it
// yet, the scanner waits for it.
func (s *scanner) tryTailing(id message.ID) error {
	for {
		if s.w.wab.isClosed() {
			return nil
		}
		if i, found := s.w.wab.find(id); found {
			_ = s.backend.Close()
			s.backend = nil
			s.cursor = i + 1
			s.setMode(modeTailing)
			return nil
		}
		if !s.w.wab.behind(id) {
			return nil
		}
		wait := s.w.wab.waitChanged()
		// Look again after taking the channel, so a push in between is
		// not missed.
		if _, found := s.w.wab.find(id); found || !s.w.wab.behind(id) {
			continue
		}
		select {
		case <-wait:
		case <-s.stop:
			return errStopped
		case <-s.w.ctx.Done():
			return errors.Wrap(walimpls.ErrClosed, "wal closed")
		}
	}
}

// handle applies one log message to the scanner's state.
func (s *scanner) handle(m message.Immutable) error {
	if !s.started {
		s.started = true
		s.maxTerm = s.w.termBefore(m.ID())
	}
	// Parse the reserved properties once: they are strings in a map.
	term, _ := m.Term()
	tt, hasTT := m.TimeTick()
	switch m.Kind() {
	case message.KindTermBegin:
		if term > s.maxTerm {
			s.maxTerm = term
			if n := s.join.dropUpTo(0, term); n > 0 {
				s.w.m.dropped(dropPartOrphan).Add(float64(n))
			}
		}
		if s.kind[message.KindTermBegin] {
			s.termBegins = append(s.termBegins, m)
		}
		return nil
	case message.KindTimeTick:
		if !hasTT || term < s.maxTerm || tt <= s.released {
			return nil
		}
		if n := s.join.dropUpTo(tt, s.maxTerm); n > 0 {
			s.w.m.dropped(dropPartOrphan).Add(float64(n))
		}
		released := s.buf.PopUpTo(tt)
		resume := resumePositions(released, s.buf, m.ID())
		for i, it := range released {
			// Parsing every released message's term was a sixth of a
			// catch-up scan's CPU; only a waiting term-begin needs it.
			if len(s.termBegins) > 0 {
				t, _ := it.Value.Term()
				if err := s.flushTermBegins(t); err != nil {
					return err
				}
			}
			if err := s.deliver(it.Value, it.TimeTick, resume[i]); err != nil {
				return err
			}
		}
		if err := s.flushTermBegins(term); err != nil {
			return err
		}
		s.released = tt
		s.updateBytes()
		if s.kind[message.KindTimeTick] && s.passesTimeTick(tt) {
			return s.send(m)
		}
		return nil
	case message.KindPart:
		if !s.admit(term, tt, hasTT) {
			return nil
		}
		joined, res := s.join.add(m)
		switch res {
		case partDuplicate:
			s.w.m.dropped(dropPartDuplicate).Inc()
		case partMalformed:
			s.w.m.dropped(dropPartOrphan).Inc()
		case partCompleted:
			return s.buffer(joined, tt)
		}
		return s.checkBudget()
	case message.KindData:
		if !s.admit(term, tt, hasTT) {
			return nil
		}
		return s.buffer(m, tt)
	default:
		// A kind this version does not know (a log written by a newer
		// streamwal, or by something else): never delivered as data.
		s.w.m.dropped(dropMalformed).Inc()
		return nil
	}
}

// flushTermBegins delivers the waiting term-begins of terms up to term.
func (s *scanner) flushTermBegins(term int64) error {
	for len(s.termBegins) > 0 {
		if t, _ := s.termBegins[0].Term(); t > term {
			return nil
		}
		if err := s.send(s.termBegins[0]); err != nil {
			return err
		}
		s.termBegins = s.termBegins[1:]
	}
	return nil
}

// admit applies the log-level fence and drops messages that arrive after a
// watermark already covered them (unacknowledged retries).
func (s *scanner) admit(term int64, tt uint64, hasTT bool) bool {
	if term < s.maxTerm {
		s.w.m.dropped(dropStaleTerm).Inc()
		return false
	}
	if !hasTT || tt <= s.released {
		s.w.m.dropped(dropLate).Inc()
		return false
	}
	return true
}

// buffer holds a data message until a watermark releases it. Duplicates by
// ID never reach it: run drops any message whose ID does not follow the
// previous one's.
func (s *scanner) buffer(m message.Immutable, tt uint64) error {
	if _, err := s.buf.Push(reorder.Item[message.Immutable]{TimeTick: tt, Size: m.Size() + 64, Value: m}); err != nil {
		return errors.Wrapf(ErrScannerBufferFull, "%v", err)
	}
	return s.checkBudget()
}

func (s *scanner) checkBudget() error {
	s.updateBytes()
	if total := s.buf.Bytes() + s.join.bytes; total > s.w.opts.ScannerBufferBytes && s.buf.Len()+len(s.join.partials) > 1 {
		return errors.Wrapf(ErrScannerBufferFull, "%d bytes held, budget %d", total, s.w.opts.ScannerBufferBytes)
	}
	return nil
}

func (s *scanner) updateBytes() {
	b := s.buf.Bytes() + s.join.bytes
	s.w.m.scanBytes.Add(float64(b - s.bufBytes))
	s.bufBytes = b
}

// deliver sends a released data message if it passes the filter. A second
// message with an already delivered timetick is a duplicate from a retry.
func (s *scanner) deliver(m message.Immutable, tt uint64, resume message.ID) error {
	if tt <= s.delivered {
		s.w.m.dropped(dropDuplicate).Inc()
		return nil
	}
	s.delivered = tt
	if !s.kind[message.KindData] || !s.passesTimeTick(tt) {
		return nil
	}
	if vcs := s.opt.Filter.VChannels; len(vcs) > 0 && !slices.Contains(vcs, m.VChannel()) {
		return nil
	}
	return s.send(m.WithLastConfirmed(resume))
}

// resumePositions returns, for each released message, the position from
// which a new scanner finds every message with a higher timetick: the
// lowest ID among the messages released after it, those still buffered, and
// the watermark that released them.
func resumePositions(released []reorder.Item[message.Immutable], rest *reorder.Buffer[message.Immutable], watermark message.ID) []message.ID {
	low := watermark
	rest.Each(func(it reorder.Item[message.Immutable]) {
		if it.Value.ID().LT(low) {
			low = it.Value.ID()
		}
	})
	out := make([]message.ID, len(released))
	for i := len(released) - 1; i >= 0; i-- {
		out[i] = low
		if id := released[i].Value.ID(); id.LT(low) {
			low = id
		}
	}
	return out
}

func (s *scanner) passesTimeTick(tt uint64) bool {
	f := s.opt.Filter
	if f.TimeTickAbove > 0 && tt <= f.TimeTickAbove {
		return false
	}
	if f.TimeTickAtLeast > 0 && tt < f.TimeTickAtLeast {
		return false
	}
	if p := s.opt.DeliverPolicy; p.byTTOnly && tt < p.fromTT {
		return false
	}
	return true
}

func (s *scanner) send(m message.Immutable) error {
	select {
	case s.out <- m:
		return nil
	case <-s.stop:
		return errStopped
	case <-s.w.ctx.Done():
		return errors.Wrap(walimpls.ErrClosed, "wal closed")
	}
}
