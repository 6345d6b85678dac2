package pulsar

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// maxVerifications bounds how many fresh readers a scanner creates in a
// row to confirm a gap before it gives up with an error.
const maxVerifications = 10

// outBuffer bounds the messages a scanner's Chan buffers.
const outBuffer = 256

// start is where a scanner's reader starts when it has delivered nothing.
type start struct {
	earliest  bool  // cursor.All with no truncation point known
	latest    bool  // cursor.Latest
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
	if w.deleted.Load() {
		return nil, goneDeleted(w.ch.Name)
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
	p := opt.DeliverPolicy
	tailN, tail := p.Tail()
	var last msgID
	var hasLast bool
	if tail {
		if tailN < 1 {
			return nil, errors.Wrapf(walimpls.ErrInvalidPosition, "pulsar: read channel %q from %s: n must be at least 1", w.ch.Name, p)
		}
		// Before the truncation point is taken: a truncation recorded
		// meanwhile is then known, and a start below it is never chosen.
		var err error
		if last, hasLast, err = w.lastStored(ctx); err != nil {
			return nil, errors.Wrapf(err, "pulsar: read channel %q from %s", w.ch.Name, p)
		}
	}
	trunc, hasTrunc := w.truncPoint()
	var st start
	switch pid, inclusive, ok := p.StartID(); {
	case p.IsAll() && hasTrunc:
		st = start{id: trunc, inclusive: true}
	case p.IsAll():
		st = start{earliest: true}
	case p.IsLatest():
		st = start{latest: true}
	case tail:
		st = tailStart(tailN, last, hasLast, trunc, hasTrunc)
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
		Run: lifecycle.NewRun(), w: w, name: opt.Name, start: st, queue: receiverQueue(readAhead),
		// A buffered channel lets the scanner hand messages over in runs
		// instead of one goroutine switch each; what it holds counts
		// against the read-ahead.
		out: make(chan message.Immutable, min(receiverQueue(readAhead), outBuffer)),
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
	if !w.scanners.Add(s) {
		s.r.Close()
		if w.deleted.Load() {
			return nil, goneDeleted(w.ch.Name)
		}
		return nil, w.closedErr()
	}
	go s.run()
	return s, nil
}

// tailStart returns where a cursor.Tail(n) scanner starts, given the last
// message stored (hasLast false when there is none) and the truncation
// point. GET_LAST_MESSAGE_ID names the last message by its batch index, so
// the last entry holds batch+1 messages (a message sent without batching is
// index 0); every entry before it holds at least one, and entry ids are
// consecutive within a ledger from 0. A tail within the last entry starts
// at its exact batch index; a longer one at the first message of the entry
// as many entries back as messages are still missing: at or before the
// exact start, found without a read. When the ledger of the last message
// has fewer entries, the client protocol cannot tell where the ledgers
// before it end (their ids are not consecutive), and the scanner starts
// where cursor.All does. A start below the truncation point moves up to
// it: the first message kept is at or before the exact start, or fewer
// than n messages are kept and it delivers them all.
func tailStart(n int, last msgID, hasLast bool, trunc msgID, hasTrunc bool) start {
	all := start{earliest: true}
	if hasTrunc {
		all = start{id: trunc, inclusive: true}
	}
	if !hasLast {
		return all
	}
	inLast := int64(max(last.batch, 0)) + 1
	id := msgID{ledger: last.ledger, partition: last.partition}
	switch missing := int64(n) - inLast; {
	case missing <= 0:
		id.entry, id.batch = last.entry, int32(-missing)
	case missing <= last.entry:
		id.entry, id.batch = last.entry-missing, 0
	default:
		return all
	}
	if hasTrunc && id.compare(trunc) < 0 {
		return all
	}
	return start{id: id, inclusive: true}
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
	*lifecycle.Run
	w     *wal
	name  string
	start start
	queue int
	out   chan message.Immutable

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
			return errors.WithStack(fmt.Errorf("pulsar: scanner %q of channel %q: %w: %w", s.name, s.w.ch.Name, err, walimpls.ErrPositionGone))
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
	pace := backoff.Config{Initial: 10 * time.Millisecond, Max: time.Second, NoJitter: true}
	for attempt := 0; ; attempt++ {
		err := s.openReader()
		if err == nil || errors.Is(err, walimpls.ErrPositionGone) || s.Stopped() {
			return err
		}
		s.w.log.Debug("scanner reader", "scanner", s.name, "err", err)
		if pace.Wait(s.Context(), attempt) != nil { // stopping
			return nil
		}
	}
}

func (s *scanner) run() {
	err := s.consume()
	if s.r != nil {
		s.r.Close()
	}
	s.w.scanners.Remove(s)
	close(s.out)
	if err != nil && !s.Stopped() {
		s.w.log.Debug("scanner ended", "scanner", s.name, "err", err)
	}
	s.End(err)
}

// consume delivers messages until the scanner stops (nil) or fails.
func (s *scanner) consume() error {
	for {
		m, err := s.r.Next(s.Context())
		if s.Stopped() {
			return nil
		}
		if err != nil {
			s.w.log.Debug("reader failed; reopening", "scanner", s.name, "err", err)
			if err := s.reopen(); err != nil || s.Stopped() {
				return err
			}
			continue
		}
		id := fromPulsar(m.ID())
		if s.hasLast && id.compare(s.last) <= 0 {
			continue // delivered already (a reconnected inclusive reader)
		}
		// A truncation overtook the scanner: what it handed over already
		// (its read-ahead) stays delivered, nothing below the truncation
		// point follows. The broker may keep such entries until retention
		// runs; the recorded point decides.
		if trunc, ok := s.w.truncPoint(); ok && id.compare(trunc) < 0 {
			return errors.Wrapf(walimpls.ErrPositionGone, "pulsar: scanner %q of channel %q: %s is truncated (the channel starts at %s)", s.name, s.w.ch.Name, id, trunc)
		}
		if !s.expected(id) {
			if s.verifies++; s.verifies > maxVerifications {
				return errors.Newf("pulsar: scanner %q of channel %q: cannot read past %s without a gap", s.name, s.w.ch.Name, id)
			}
			s.w.log.Debug("gap in delivery; reopening the reader", "scanner", s.name, "got", id, "after", s.last)
			s.suspect, s.hasSuspect = id, true
			if err := s.reopen(); err != nil || s.Stopped() {
				return err
			}
			continue
		}
		s.hasSuspect, s.verifies = false, 0
		msg := message.NewImmutable(message.Restore(m.Payload(), m.Properties()), message.NewID(id))
		select {
		case s.out <- msg:
			s.last, s.hasLast = id, true
		case <-s.Stopping():
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
