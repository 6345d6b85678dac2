package memory

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// readBatch bounds how many messages a scanner copies per lock.
const readBatch = 64

// defaultReadAheadBytes is a scanner's read-ahead when ReadOption leaves it
// at 0.
const defaultReadAheadBytes = 1 << 20

type scanner struct {
	*lifecycle.Run
	w         *wal
	readAhead int
	next      int64 // owned by run
	out       chan message.Immutable
}

var _ walimpls.Scanner = (*scanner)(nil)

func newScanner(w *wal, start int64, readAhead int) *scanner {
	if readAhead <= 0 {
		readAhead = defaultReadAheadBytes
	}
	return &scanner{Run: lifecycle.NewRun(), w: w, readAhead: readAhead, next: start, out: make(chan message.Immutable)}
}

func (s *scanner) Chan() <-chan message.Immutable { return s.out }

// run owns s.next and s.out until it returns. The WAL's Close stops it with
// ErrClosed as the reason.
func (s *scanner) run() {
	err := s.deliver()
	s.w.scans.Remove(s)
	close(s.out)
	s.End(err)
}

func (s *scanner) deliver() error {
	for {
		msgs, gone, wait := s.w.log.readFrom(s.next, readBatch, s.readAhead)
		if gone {
			return errors.Wrapf(walimpls.ErrPositionGone, "memory: scanner of %s at %d", s.w.ch, s.next)
		}
		for _, m := range msgs {
			select {
			case s.out <- message.NewImmutable(m, message.NewSeqID(Name, s.next)):
				s.next++
			case <-s.Stopping():
				return nil
			}
		}
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-s.Stopping():
			return nil
		}
	}
}
