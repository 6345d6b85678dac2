package pulsar

import (
	"context"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// maxVerifications bounds how many fresh readers a scanner creates in a
// row to confirm a gap before it gives up with an error.
const maxVerifications = 10

// outBuffer bounds the messages a scanner's Chan buffers.
const outBuffer = 256

// start is where a scanner's reader starts when it has delivered nothing.
type start struct {
	earliest  bool  // DeliverAll with no truncation point known
	latest    bool  // DeliverLatest
	id        msgID // otherwise
	inclusive bool
}

func (s start) readerOptions() (pulsar.MessageID, bool) {
	switch {
	case s.earliest:
		return pulsar.EarliestMessageID(), true
	case s.latest:
		return pulsar.LatestMessageID(), false
	}
	return s.id.toPulsar(), s.inclusive
}

// Read implements walimpls.WALImpl. Every scanner is a pulsar Reader (a
// non-durable subscription) on the opener's shared client; see the package
// documentation for the positions and the gap check.
func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	if w.isClosed() {
		return nil, w.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opt.ReadAheadBytes < 0 {
		return nil, errors.Newf("pulsar: read channel %q: negative read-ahead %d", w.ch.Name, opt.ReadAheadBytes)
	}
	readAhead := opt.ReadAheadBytes
	if readAhead == 0 {
		readAhead = w.o.cfg.ReadAheadBytes
	}
	trunc, hasTrunc := w.truncPoint()
	var st start
	p := opt.DeliverPolicy
	switch pid, inclusive, ok := p.StartID(); {
	case p.IsAll() && hasTrunc:
		st = start{id: trunc, inclusive: true}
	case p.IsAll():
		st = start{earliest: true}
	case p.IsLatest():
		st = start{latest: true}
	case ok:
		id, isOurs := idOf(pid)
		if !isOurs {
			return nil, errors.Wrapf(walimpls.ErrInvalidPosition, "pulsar: read channel %q from %s", w.ch.Name, pid)
		}
		if hasTrunc && id.compare(trunc) < 0 && (inclusive || !justBefore(id, trunc)) {
			return nil, errors.Wrapf(walimpls.ErrPositionGone, "pulsar: read channel %q from %s: truncated up to %s", w.ch.Name, p, trunc)
		}
		st = start{id: id, inclusive: inclusive}
	default:
		return nil, errors.Wrapf(walimpls.ErrInvalidPosition, "pulsar: read channel %q: deliver policy %s", w.ch.Name, p)
	}
	s := &scanner{
		w: w, name: opt.Name, start: st, queue: receiverQueue(readAhead),
		// A buffered channel lets the scanner hand messages over in runs
		// instead of one goroutine switch each; what it holds counts
		// against the read-ahead.
		out: make(chan message.Immutable, min(receiverQueue(readAhead), outBuffer)), done: make(chan struct{}),
	}
	if err := s.openReader(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if st.latest {
		// Everything up to the last message now stored counts as
		// delivered: the gap check then knows which message comes next,
		// also if the reader reconnects before it delivers anything.
		last, err := s.r.GetLastMessageID()
		if err != nil {
			s.r.Close()
			return nil, errors.Wrapf(err, "pulsar: read channel %q: last message id", w.ch.Name)
		}
		l := fromPulsar(last)
		s.last, s.hasLast = l, true
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !w.addScanner(s) {
		s.cancel()
		s.r.Close()
		return nil, w.closedErr()
	}
	go s.run()
	return s, nil
}

// justBefore reports whether a start right after id needs nothing below
// trunc: id is the message before trunc in its batch, or trunc begins an
// entry and id is in the entry before it.
func justBefore(id, trunc msgID) bool {
	if id.ledger != trunc.ledger {
		return false
	}
	if trunc.batch > 0 {
		return id.entry == trunc.entry && id.batch == trunc.batch-1
	}
	return id.entry == trunc.entry-1
}

// scanner delivers one channel's messages. Its goroutine (run) owns the
// reader and everything below "owned by run".
type scanner struct {
	w      *wal
	name   string
	start  start
	queue  int
	out    chan message.Immutable
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	closeOnce sync.Once
	mu        sync.Mutex
	reason    error // why the scanner was stopped from outside; nil for a user Close
	err       error // set before done is closed

	// owned by run (set by Read before run starts)
	r       pulsar.Reader
	last    msgID // last delivered (or, for Latest, last stored at Read)
	hasLast bool
	// suspect is the message a reader delivered that does not follow
	// last; a fresh reader that delivers it again confirms that nothing
	// lies between.
	suspect    msgID
	hasSuspect bool
	verifies   int
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

// Close implements walimpls.Scanner.
func (s *scanner) Close() error {
	s.stop(nil)
	<-s.done
	return nil
}

// stop ends the scanner; reason is what Error reports.
func (s *scanner) stop(reason error) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.reason = reason
		s.mu.Unlock()
		s.cancel()
	})
}

// openReader creates the reader: right after the last delivered message,
// or at the scanner's start.
func (s *scanner) openReader() error {
	opts := pulsar.ReaderOptions{Topic: s.w.topic, ReceiverQueueSize: s.queue, Name: s.name}
	if s.hasLast {
		opts.StartMessageID = s.last.toPulsar()
	} else {
		opts.StartMessageID, opts.StartMessageIDInclusive = s.start.readerOptions()
	}
	r, err := s.w.o.client.CreateReader(opts)
	if err != nil {
		if isGone(err) {
			return errors.Wrapf(walimpls.ErrPositionGone, "pulsar: scanner %q of channel %q: %v", s.name, s.w.ch.Name, err)
		}
		return errors.Wrapf(err, "pulsar: scanner %q of channel %q", s.name, s.w.ch.Name)
	}
	s.r = r
	return nil
}

// reopen replaces the reader. Owned by run.
func (s *scanner) reopen() error {
	s.r.Close()
	s.r = nil
	backoff := 10 * time.Millisecond
	for {
		err := s.openReader()
		if err == nil || errors.Is(err, walimpls.ErrPositionGone) || s.ctx.Err() != nil {
			return err
		}
		s.w.log.Debug("scanner reader", "scanner", s.name, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (s *scanner) run() {
	defer close(s.done)
	defer close(s.out)
	defer s.w.removeScanner(s)
	defer func() {
		if s.r != nil {
			s.r.Close()
		}
	}()
	err := s.consume()
	if s.ctx.Err() != nil {
		s.mu.Lock()
		err = s.reason
		s.mu.Unlock()
	}
	s.err = err
	if err != nil {
		s.w.log.Debug("scanner ended", "scanner", s.name, "err", err)
	}
}

// consume delivers messages until the scanner stops (nil) or fails.
func (s *scanner) consume() error {
	for {
		m, err := s.r.Next(s.ctx)
		if s.ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.w.log.Debug("reader failed; reopening", "scanner", s.name, "err", err)
			if err := s.reopen(); err != nil || s.ctx.Err() != nil {
				return err
			}
			continue
		}
		id := fromPulsar(m.ID())
		if s.hasLast && id.compare(s.last) <= 0 {
			continue // delivered already (a reconnected inclusive reader)
		}
		if !s.expected(id) {
			if s.verifies++; s.verifies > maxVerifications {
				return errors.Newf("pulsar: scanner %q of channel %q: cannot read past %s without a gap", s.name, s.w.ch.Name, id)
			}
			s.w.log.Debug("gap in delivery; reopening the reader", "scanner", s.name, "got", id, "after", s.last)
			s.suspect, s.hasSuspect = id, true
			if err := s.reopen(); err != nil || s.ctx.Err() != nil {
				return err
			}
			continue
		}
		s.hasSuspect, s.verifies = false, 0
		msg := message.NewImmutable(message.Restore(m.Payload(), m.Properties()), message.NewID(id))
		select {
		case s.out <- msg:
			s.last, s.hasLast = id, true
		case <-s.ctx.Done():
			return nil
		}
	}
}

// expected reports whether id may be delivered next without a gap: it
// follows the last delivered message, or, before the first one, it is
// where the scanner starts; or a fresh reader confirmed it.
func (s *scanner) expected(id msgID) bool {
	if s.hasSuspect && id.compare(s.suspect) == 0 {
		return true
	}
	if s.hasLast {
		return follows(s.last, id)
	}
	switch {
	case s.start.earliest:
		return id.entry == 0 && id.batch <= 0
	case s.start.inclusive:
		return id.compare(s.start.id) == 0
	}
	return follows(s.start.id, id)
}
