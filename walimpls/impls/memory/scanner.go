package memory

import (
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// readBatch bounds how many messages a scanner copies per lock.
const readBatch = 64

type scanner struct {
	w    *wal
	next int64

	out  chan message.Immutable
	stop chan struct{}
	done chan struct{}

	stopOnce sync.Once
	err      error // written by run before done closes
}

var _ walimpls.Scanner = (*scanner)(nil)

func newScanner(w *wal, start int64) *scanner {
	return &scanner{
		w:    w,
		next: start,
		out:  make(chan message.Immutable),
		stop: make(chan struct{}),
		done: make(chan struct{}),
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
	s.w.scans.remove(s)
	return nil
}

// run owns s.next and s.out until it returns.
func (s *scanner) run() {
	defer close(s.done)
	defer close(s.out)
	for {
		msgs, gone, wait := s.w.log.readFrom(s.next, readBatch)
		if gone {
			s.err = errors.Wrapf(walimpls.ErrPositionGone, "memory: scanner of %s at %d", s.w.ch, s.next)
			return
		}
		for _, m := range msgs {
			select {
			case s.out <- message.NewImmutable(m, message.NewSeqID(Name, s.next)):
				s.next++
			case <-s.stop:
				return
			case <-s.w.closing:
				s.err = errors.Wrapf(walimpls.ErrClosed, "memory: scanner of %s", s.w.ch)
				return
			}
		}
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-s.stop:
			return
		case <-s.w.closing:
			s.err = errors.Wrapf(walimpls.ErrClosed, "memory: scanner of %s", s.w.ch)
			return
		}
	}
}

// scannerSet tracks a WAL's live scanners so Close can end them.
type scannerSet struct {
	mu     sync.Mutex
	closed bool
	live   map[*scanner]struct{}
}

// add registers s; false after closeAll.
func (ss *scannerSet) add(s *scanner) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	if ss.live == nil {
		ss.live = map[*scanner]struct{}{}
	}
	ss.live[s] = struct{}{}
	return true
}

func (ss *scannerSet) remove(s *scanner) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.live, s)
}

// closeAll waits for every scanner to end; the WAL's closing channel has
// already told them to.
func (ss *scannerSet) closeAll() {
	ss.mu.Lock()
	ss.closed = true
	live := ss.live
	ss.live = nil
	ss.mu.Unlock()
	for s := range live {
		<-s.done
	}
}
