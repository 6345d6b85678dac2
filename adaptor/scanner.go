package adaptor

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/utility/reorder"
	"github.com/streamwal/streamwal/walimpls"
)

// Scanner modes, the "mode" label of streamwal_scanners.
const (
	modeCatchUp = "catchup"
	modeTailing = "tailing"
)

// tailCacheBatch bounds how many messages a tailing scanner copies per lock.
const tailCacheBatch = 64

// errStopped is what run's loops return once halt closed: the scanner was
// stopped, and its Run's reason says why it ended (nil after Close,
// ErrClosed when its WAL closed).
var errStopped = errors.New("scanner stopped")

// errUntil is what readLoop returns once it read ReadOption.Until and
// released everything: the scanner ends, with a nil Error, once its reader
// took what it released.
var errUntil = errors.New("scanner reached its end position")

// walView is what a scanner needs of its WAL, and all it may use: the
// WAL's other fields belong to the WAL's own goroutines and locks. Read
// builds one per scanner.
type walView struct {
	// read opens a backend scanner, to catch up.
	read  func(context.Context, walimpls.ReadOption) (*backendScan, error)
	cache *tailCache
	m     walMetrics
	// budget is Options.ScannerBufferBytes: the reorder buffer's, and four
	// times the backend's read-ahead.
	budget int
	// localRelease: the writer publishes local release points of its
	// term (term) in cache, which tailing scanners follow.
	localRelease bool
	term         int64
	// termBefore and truncatedBelow answer from what the WAL read of the
	// log and what it truncated (wal.termBefore, wal.truncatedBelow).
	termBefore     func(message.ID) int64
	truncatedBelow func(message.ID) bool
	// live is the WAL's set of running scanners: run leaves it as it ends.
	live  *lifecycle.Group[*scanner]
	hooks scanHooks
}

// scanner reads a channel's log from the backend (catch-up) or from the
// tail cache (tailing), and turns it into data messages in strictly
// increasing timetick order. Everything but the outbox is owned by run's
// goroutine; run starts, stops and waits for the sender goroutine that
// delivers what it releases (scansend.go). Its Run keeps the walimpls.Scanner
// contract: Close, Done and Error.
type scanner struct {
	*lifecycle.Run
	v    walView
	opt  ReadOption
	kind kindSet

	// out delivers one message per send (Read), batches a slice per send
	// (ReadBatches); the other is nil.
	out     chan message.Immutable
	batches chan []message.Immutable
	// halt closes when the scanner must end: stopped (Close, its WAL
	// closing), or run ending, which stops the sender. One channel, a
	// child of the Run's context, so that the per-message selects of run
	// and the sender lock two channels, not three.
	halt    <-chan struct{}
	endHalt context.CancelFunc

	// Source: a backend scanner while catching up, else the buffer cursor.
	backend *backendScan
	cursor  int64
	pending []message.Immutable // copied from the buffer; pending[pendAt:] not yet handled
	pendAt  int
	resume  cursor.Policy
	mode    string

	// box takes released messages to the sender goroutine (scansend.go).
	box *outbox

	buf     *reorder.Buffer[message.Immutable]
	join    *joiner
	started bool // the first message was handled
	// pastUntil: the start lies after ReadOption.Until; nothing to read.
	pastUntil bool
	maxTerm   int64  // highest term-begin seen (or known before the start)
	released  uint64 // highest watermark or local release applied
	emittedTT uint64 // highest watermark delivered (Filter.Kinds)
	delivered uint64 // timetick of the last data message delivered
	bufBytes  int    // what the buffer gauge was last told
	// released and resume are scratch slices reused at every watermark.
	releasedScratch []reorder.Item[message.Immutable]
	resumeScratch   []message.ID
	// termBegins waiting to be delivered: right before the first released
	// message of their term, so that nothing of a lower term follows them.
	termBegins []message.Immutable
}

var (
	_ walimpls.Scanner      = (*scanner)(nil)
	_ walimpls.BatchScanner = (*scanner)(nil)
)

func newScanner(ctx context.Context, v walView, opt ReadOption, batches bool) (*scanner, error) {
	kinds := opt.Filter.Kinds
	if len(kinds) == 0 {
		kinds = []message.Kind{message.KindData}
	}
	s := &scanner{
		v:    v,
		opt:  opt,
		buf:  reorder.New[message.Immutable](v.budget),
		join: newJoiner(),
	}
	for _, k := range kinds {
		s.kind = s.kind.with(k)
	}
	if batches {
		s.batches = make(chan []message.Immutable)
	} else {
		s.out = make(chan message.Immutable)
	}
	s.box = newOutbox(s.batches)
	s.pastUntil = startsPast(opt)
	if err := s.openSource(ctx); err != nil {
		return nil, err
	}
	s.Run = lifecycle.NewRun()
	halt, endHalt := context.WithCancel(s.Context())
	s.halt, s.endHalt = halt.Done(), endHalt
	return s, nil
}

// openSource picks where the scanner starts reading: the write-ahead
// buffer when it holds the start position, else the backend.
func (s *scanner) openSource(ctx context.Context) error {
	p := s.opt.DeliverPolicy.Log()
	// A start before a truncation this WAL applied goes to the backend,
	// which knows the exact truncation point: the tail cache still
	// holds the removed messages.
	if id, inclusive, ok := p.StartID(); ok && !s.v.truncatedBelow(id) {
		if i, found := s.v.cache.find(id); found {
			s.cursor = i
			if !inclusive {
				s.cursor++
			}
			s.resume = p
			s.setMode(modeTailing)
			return nil
		}
	}
	bs, err := s.v.read(ctx, walimpls.ReadOption{Name: s.opt.Name, DeliverPolicy: p, ReadAheadBytes: s.v.budget / 4})
	if err != nil {
		return err
	}
	s.backend = bs
	s.resume = p
	s.setMode(modeCatchUp)
	return nil
}

// startsPast reports whether opt starts after its Until: a sealed log
// holds nothing there.
func startsPast(opt ReadOption) bool {
	if opt.Until.IsZero() {
		return false
	}
	p := opt.DeliverPolicy.Log()
	if p.IsLatest() {
		return true
	}
	id, inclusive, ok := p.StartID()
	if !ok {
		return false
	}
	if inclusive {
		return opt.Until.LT(id)
	}
	return opt.Until.LTE(id)
}

// scanHooks let a test hold a scanner at a known point instead of hoping
// the scheduler takes it there. Each is nil outside tests.
type scanHooks struct {
	// stalled is called by run each time it is about to wait for the
	// reader to take what it released (waitRoom, and waitDelivered once
	// it failed), with where it stands: tailing or not, and the
	// tail cache index it reads next. It runs on run's goroutine
	// and must not block.
	stalled func(tailing bool, cursor int64)
}

func (s *scanner) setMode(mode string) {
	if s.mode == mode {
		return
	}
	if s.mode != "" {
		s.v.m.scanners(s.mode).Dec()
	}
	s.mode = mode
	if mode != "" {
		s.v.m.scanners(mode).Inc()
	}
}

// Chan implements walimpls.Scanner (Read); Close, Done and Error come with the Run.
func (s *scanner) Chan() <-chan message.Immutable { return s.out }

// Batches implements walimpls.BatchScanner (ReadBatches).
func (s *scanner) Batches() <-chan []message.Immutable { return s.batches }

// closeOut closes the channel the reader reads.
func (s *scanner) closeOut() {
	if s.batches != nil {
		close(s.batches)
		return
	}
	close(s.out)
}

// abort releases a scanner whose run never started.
func (s *scanner) abort() {
	if s.backend != nil {
		_ = s.backend.Close()
	}
	s.setMode("")
	s.endHalt()
	s.End(nil)
	s.closeOut()
}

// run is the scanner's goroutine. It ends the Run before it closes Chan,
// the other way round from the backends' scanners: Done closes before
// Chan, so that a reader that ranged over Chan finds Error already valid.
func (s *scanner) run() {
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		s.sendLoop()
	}()
	if err := s.readLoop(); errors.Is(err, errUntil) {
		s.waitDelivered()
	} else if !errors.Is(err, errStopped) {
		// The failure is why the scanner ends, even if it is stopped while
		// it still hands over what it released before failing.
		s.Fail(err)
		s.waitDelivered()
	}
	s.endHalt()
	<-senderDone
	if s.backend != nil {
		_ = s.backend.Close()
	}
	s.setMode("")
	s.v.m.scanBytes.Sub(float64(s.bufBytes))
	// Do not pin messages read but never delivered.
	clear(s.pending)
	s.box.clear()
	s.v.live.Remove(s)
	s.End(nil) // the failure, or the stop's reason
	s.closeOut()
}

// readLoop reads and orders the log until the scanner stops (errStopped) or
// fails.
func (s *scanner) readLoop() error {
	if s.pastUntil {
		return errUntil
	}
	until := s.opt.Until
	var last message.ID
	for {
		if err := s.waitRoom(); err != nil {
			return err
		}
		m, err := s.next()
		if err != nil {
			return err
		}
		if !until.IsZero() && until.LT(m.ID()) {
			// Past the end: never handled.
			return s.releaseAll(last)
		}
		if !last.IsZero() && !last.LT(m.ID()) {
			// The source delivered a position again: a duplicate.
			s.v.m.dropped(dropDuplicate).Inc()
			continue
		}
		last = m.ID()
		e := parse(m)
		err = s.handle(&e)
		// Whatever this message released goes to the sender now.
		s.box.flush()
		if err != nil {
			return err
		}
		if !until.IsZero() && until.LTE(m.ID()) {
			return s.releaseAll(m.ID())
		}
	}
}

// releaseAll ends a scanner at ReadOption.Until: every message it holds is
// released, in timetick order (the log holds nothing more that a watermark
// would have to wait for), with last, the last position read, as the
// lowest resume position.
func (s *scanner) releaseAll(last message.ID) error {
	if last.IsZero() {
		last = s.opt.Until
	}
	s.release(math.MaxUint64, s.maxTerm, last)
	s.box.flush()
	return errUntil
}

// handle applies one log message to the scanner's state.
func (s *scanner) handle(e *logEntry) error {
	m, term, tt, hasTT := e.m, e.term, e.tt, e.hasTT
	if !s.started {
		s.started = true
		s.maxTerm = s.v.termBefore(m.ID())
	}
	switch e.kind {
	case message.KindTermBegin:
		if term < s.maxTerm {
			// A term-begin below one already seen: an open that lost to a
			// higher term on a backend that cannot fence. Terms never go
			// backwards for readers.
			s.v.m.dropped(dropStaleTerm).Inc()
			return nil
		}
		if term > s.maxTerm {
			s.maxTerm = term
			if n := s.join.dropUpTo(0, term); n > 0 {
				s.v.m.dropped(dropPartOrphan).Add(float64(n))
			}
		}
		if s.kind.has(message.KindTermBegin) {
			s.termBegins = append(s.termBegins, m)
		}
		return nil
	case message.KindTimeTick:
		if !hasTT || term < s.maxTerm {
			return nil
		}
		if tt > s.released {
			s.release(tt, term, m.ID())
		}
		// A local release may have gone past it already; it is delivered
		// all the same (once: a retried watermark is stored twice).
		if tt > s.emittedTT && s.kind.has(message.KindTimeTick) && s.passesTimeTick(tt) {
			s.emittedTT = tt
			s.emit(m, len(m.Payload())+64)
		}
		return nil
	case message.KindPart:
		if !s.admit(term, tt, hasTT) {
			return nil
		}
		joined, res := s.join.add(m)
		switch res {
		case partDuplicate:
			s.v.m.dropped(dropPartDuplicate).Inc()
		case partMalformed:
			s.v.m.dropped(dropPartOrphan).Inc()
		case partCompleted:
			return s.buffer(joined, tt, joined.Size())
		}
		return s.checkBudget()
	case message.KindData:
		if !s.admit(term, tt, hasTT) {
			return nil
		}
		return s.buffer(m, tt, e.size)
	default:
		// A kind this version does not know (a log written by a newer
		// streamwal, or by something else): never delivered as data.
		s.v.m.dropped(dropMalformed).Inc()
		return nil
	}
}

// release delivers, in timetick order, every buffered message up to tt: a
// watermark of term read at low, or a local release (localRelease).
func (s *scanner) release(tt uint64, term int64, low message.ID) {
	if n := s.join.dropUpTo(tt, s.maxTerm); n > 0 {
		s.v.m.dropped(dropPartOrphan).Add(float64(n))
	}
	released := s.buf.PopUpToAppend(s.releasedScratch[:0], tt)
	if pl := s.join.pendingLow(); !pl.IsZero() && pl.LT(low) {
		low = pl
	}
	resume := resumePositions(s.resumeScratch[:0], released, s.buf, low)
	for i, it := range released {
		// Parsing every released message's term was a sixth of a
		// catch-up scan's CPU; only a waiting term-begin needs it.
		if len(s.termBegins) > 0 {
			t, _ := it.Value.Term()
			s.flushTermBegins(t)
		}
		s.deliver(it.Value, it.TimeTick, it.Size, resume[i])
	}
	// The scratch slices are kept for the next release, cleared so that
	// they do not pin delivered messages.
	clear(released)
	s.releasedScratch, s.resumeScratch = released[:0], resume[:0]
	s.flushTermBegins(term)
	s.released = tt
	s.updateBytes(true)
}

// localRelease applies the writer's local release point (see
// timeticks.covered) once the scanner has read the tail cache up
// to where it was published: no watermark in the log needed. It applies
// only while the scanner has seen no term above the writer's.
func (s *scanner) localRelease() {
	if !s.v.localRelease || !s.started || s.maxTerm > s.v.term {
		return
	}
	tt, index, at := s.v.cache.releasePoint()
	if tt <= s.released || s.cursor <= index {
		return
	}
	s.release(tt, s.v.term, at)
	s.box.flush()
}

// flushTermBegins delivers the waiting term-begins of terms up to term.
func (s *scanner) flushTermBegins(term int64) {
	for len(s.termBegins) > 0 {
		if t, _ := s.termBegins[0].Term(); t > term {
			return
		}
		s.emit(s.termBegins[0], len(s.termBegins[0].Payload())+64)
		s.termBegins = s.termBegins[1:]
	}
}

// admit applies the log-level fence and drops messages that arrive after a
// watermark already covered them (unacknowledged retries).
func (s *scanner) admit(term int64, tt uint64, hasTT bool) bool {
	if term < s.maxTerm {
		s.v.m.dropped(dropStaleTerm).Inc()
		return false
	}
	if !hasTT || tt <= s.released {
		s.v.m.dropped(dropLate).Inc()
		return false
	}
	return true
}

// buffer holds a data message (of size m.Size()) until a watermark releases
// it. Duplicates by ID never reach it: the reader drops any message whose ID
// does not follow the previous one's.
func (s *scanner) buffer(m message.Immutable, tt uint64, size int) error {
	if _, err := s.buf.Push(reorder.Item[message.Immutable]{TimeTick: tt, Size: size + 64, Value: m}); err != nil {
		return errors.WithStack(fmt.Errorf("%w: %w", err, ErrScannerBufferFull))
	}
	return s.checkBudget()
}

func (s *scanner) checkBudget() error {
	s.updateBytes(false)
	if total := s.buf.Bytes() + s.join.bytes; total > s.v.budget && s.buf.Len()+len(s.join.partials) > 1 {
		return errors.Wrapf(ErrScannerBufferFull, "%d bytes held, budget %d", total, s.v.budget)
	}
	return nil
}

// gaugeStep is how far the buffer may drift from what its gauge was told
// before the gauge is updated between watermarks: an atomic update per
// buffered message is shared by every scanner of the process.
const gaugeStep = 256 << 10

// updateBytes tells the buffer gauge what the buffer holds: always when
// forced (at each watermark), else once it drifted by gaugeStep.
func (s *scanner) updateBytes(force bool) {
	b := s.buf.Bytes() + s.join.bytes
	if d := b - s.bufBytes; d != 0 && (force || d >= gaugeStep || d <= -gaugeStep) {
		s.v.m.scanBytes.Add(float64(d))
		s.bufBytes = b
	}
}

// deliver emits a released data message (counted as size bytes) if it
// passes the filter. A second message with an already delivered timetick is
// a duplicate from a retry.
func (s *scanner) deliver(m message.Immutable, tt uint64, size int, resume message.ID) {
	if tt <= s.delivered {
		s.v.m.dropped(dropDuplicate).Inc()
		return
	}
	s.delivered = tt
	if !s.kind.has(message.KindData) || !s.passesTimeTick(tt) {
		return
	}
	if vcs := s.opt.Filter.VChannels; len(vcs) > 0 && !slices.Contains(vcs, m.VChannel()) {
		return
	}
	s.emit(m.WithLastConfirmed(resume), size)
}

// resumePositions returns, for each released message, the position from
// which a new scanner finds every message with a higher timetick: the
// lowest ID among the messages released after it, those still buffered,
// the parts of messages still being joined and the watermark that released
// them (low is the lower of the last two).
// The positions are appended to dst.
func resumePositions(dst []message.ID, released []reorder.Item[message.Immutable], rest *reorder.Buffer[message.Immutable], low message.ID) []message.ID {
	rest.Each(func(it reorder.Item[message.Immutable]) {
		if it.Value.ID().LT(low) {
			low = it.Value.ID()
		}
	})
	out := slices.Grow(dst[:0], len(released))[:len(released)]
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
	if !s.opt.DeliverPolicy.Admits(tt) {
		return false
	}
	return true
}

// kindSet is a set of message kinds: a bit per kind, looked up per message
// instead of a map.
type kindSet uint32

func (k kindSet) with(kind message.Kind) kindSet {
	if kind >= 32 {
		return k
	}
	return k | 1<<kind
}

func (k kindSet) has(kind message.Kind) bool { return kind < 32 && k&(1<<kind) != 0 }
