package memory

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/scanout"
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
	out       *scanout.Out
}

var (
	_ walimpls.Scanner      = (*scanner)(nil)
	_ walimpls.BatchScanner = (*scanner)(nil)
)

func newScanner(w *wal, start int64, readAhead int, batches bool) *scanner {
	if readAhead <= 0 {
		readAhead = defaultReadAheadBytes
	}
	return &scanner{Run: lifecycle.NewRun(), w: w, readAhead: readAhead, next: start, out: scanout.New(batches, 0)}
}

// Chan implements walimpls.Scanner (Read).
func (s *scanner) Chan() <-chan message.Immutable { return s.out.Chan() }

// Batches implements walimpls.BatchScanner (ReadBatches).
func (s *scanner) Batches() <-chan []message.Immutable { return s.out.Batches() }

// run owns s.next and s.out until it returns. The WAL's Close stops it with
// ErrClosed as the reason.
func (s *scanner) run() {
	err := s.deliver()
	s.w.scans.Remove(s)
	s.out.Close()
	s.End(err)
}

func (s *scanner) deliver() error {
	for {
		msgs, gone, wait := s.w.log.readFrom(s.out.Slice(0), s.next, readBatch, s.readAhead)
		if gone {
			return errors.Wrapf(walimpls.ErrPositionGone, "memory: scanner of %s at %d", s.w.ch, s.next)
		}
		if len(msgs) > 0 {
			n := s.out.Deliver(s.Stopping(), msgs)
			s.next += int64(n)
			if n < len(msgs) {
				return nil // stopping
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
