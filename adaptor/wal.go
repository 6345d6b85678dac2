package adaptor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/utility/serial"
	"github.com/streamwal/streamwal/walimpls"
)

type wal struct {
	impl    walimpls.WALImpl
	parseID func(string) (message.ID, error) // the backend's ID decoder
	ch      Channel
	opts    Options
	log     *slog.Logger
	m       walMetrics
	ticks   *timeticks // nil when read-only
	// prepPool recycles the batches of single appends (Append,
	// AppendAsync), which copy their result out before they return one.
	prepPool sync.Pool
	// async is the backend's asynchronous append, when it offers one and
	// appends need no confirmation; AppendAsync then needs no goroutine
	// per append.
	async walimpls.AsyncAppender
	// callbacks runs the completion of AppendAsync's appends and their
	// callbacks: an answer comes from a backend's goroutine (or a retrying
	// one), which must neither run a caller's code nor be held up by the
	// adaptor's own completion of the append; one goroutine for all
	// callbacks costs less than one per append, and keeps answer order.
	callbacks *serial.Queue
	partBytes int // 0: never split
	inflight  chan struct{}
	wab       *writeAheadBuffer

	// ctx ends when the WAL closes; background work and retries watch it.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // guards closed and wg.Add against Close
	closed   bool
	scanners lifecycle.Group[*scanner] // stopped by Close, with ErrClosed
	wg       sync.WaitGroup            // tail reader, watermark loop, async appends

	available   chan struct{}
	unavailable sync.Once
	reason      error // why available closed; written once, before the close

	beginID message.ID // this WAL's own term-begin; zero when read-only
	// truncated is the highest point this WAL truncated its log to, nil if
	// none: the write-ahead buffer serves no message before it.
	truncated atomic.Pointer[message.ID]
	// confirm is set on a backend that cannot fence: an append is
	// acknowledged only once the tail reader has read past it, and only if
	// no term-begin that fences this WAL comes before it in the log (readers
	// would drop it).
	confirm bool
	fencing bool // the backend fences (Capabilities.Fencing)
	// localRelease: tailing scanners follow the writer's local release
	// point, not only watermarks (timeticks.covered). Set before the tail
	// reader starts.
	localRelease bool
	// recoveredMessages is how many messages the open read before its
	// term-begin (tests check that it does not grow with the log).
	recoveredMessages int
	recoveredTT       uint64 // the highest timetick found there

	// learnedMu guards what reading the log taught the WAL (recovery, then
	// the tail reader).
	learnedMu  sync.Mutex
	termBegins []termBegin   // term-begins seen in the log, in log order
	tailPos    message.ID    // the last message the tail reader handled
	fencedAt   message.ID    // the term-begin that fenced this WAL, if one did
	tailEnded  bool          // the tail reader stopped for good
	tailMoved  chan struct{} // closed and replaced when the tail fields change

	watermarkMu   sync.Mutex // watermarks are written one at a time, in order
	lastWatermark message.ID // the last one written; guarded by watermarkMu
	dirty         atomic.Bool
	dirtyBytes    atomic.Int64 // appended and not yet covered by a written watermark
	kick          chan struct{}
	// watermarked is closed and replaced after each watermark, waking
	// appends held back by waitForWatermark.
	watermarkedMu sync.Mutex
	watermarked   chan struct{}

	// scanHooks go into the view of each scanner Read starts; zero
	// outside tests, which set them before their first Read.
	scanHooks scanHooks
}

var _ WAL = (*wal)(nil)

// Open opens a channel's WAL on a backend. Read-write (the default), it
// recovers the highest timetick and term from the end of the log, appends
// the term-begin message that fences lower terms in the log, writes a first
// watermark and starts the periodic ones. On a backend that fences, opening
// reads a bounded window from the end of the log (about two watermarks'
// worth of messages), whatever the log's length; on one that cannot fence
// it reads the whole kept log.
func Open(ctx context.Context, opener walimpls.Opener, ch Channel, opts Options) (WAL, error) {
	if opener == nil {
		return nil, errors.Wrap(ErrInvalidOptions, "nil opener")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	mode := walimpls.ReadWrite
	if opts.ReadOnly {
		mode = walimpls.ReadOnly
	}
	impl, err := opener.Open(ctx, walimpls.Channel{Name: ch.Name, Term: ch.Term, Mode: mode})
	if err != nil {
		return nil, errors.Wrapf(err, "adaptor: open %s at term %d", ch.Name, ch.Term)
	}
	caps := opener.Capabilities()
	wctx, cancel := context.WithCancel(context.Background())
	w := &wal{
		impl:      impl,
		parseID:   opener.UnmarshalID,
		ch:        ch,
		opts:      opts,
		log:       opts.Logger.With("channel", ch.Name, "term", ch.Term),
		m:         newWALMetrics(opts.Metrics, ch.Name),
		partBytes: partBytes(opts.PartBytes, caps.MaxMessageBytes),
		inflight:  make(chan struct{}, opts.MaxInflightAppends),
		wab:       newWriteAheadBuffer(opts.WriteAheadBufferBytes),
		ctx:       wctx,
		cancel:    cancel,
		available: make(chan struct{}),
		kick:      make(chan struct{}, 1),
		confirm:   !caps.Fencing && !opts.ReadOnly,
		fencing:   caps.Fencing,
		tailMoved: make(chan struct{}),
		callbacks: serial.New(),

		watermarked: make(chan struct{}),
	}
	if aa, ok := impl.(walimpls.AsyncAppender); ok && !w.confirm && !opts.ReadOnly {
		w.async = aa
	}
	if err := w.start(ctx); err != nil {
		w.cancel()
		w.wg.Wait()
		_ = impl.Close()
		w.m.forget()
		return nil, errors.Wrapf(err, "adaptor: open %s at term %d", ch.Name, ch.Term)
	}
	w.log.Info("wal opened", "read_only", opts.ReadOnly, "part_bytes", w.partBytes)
	return w, nil
}

// partBytes is the size parts are cut to: the configured one, capped by the
// backend's limit.
func partBytes(configured, backend int) int {
	switch {
	case configured > 0 && backend > 0:
		return min(configured, backend)
	case configured > 0:
		return configured
	}
	return backend
}

func (w *wal) start(ctx context.Context) error {
	if w.opts.ReadOnly {
		s, err := readBackend(w.impl)(ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: walimpls.DeliverLatest()})
		if err != nil {
			return err
		}
		w.startTail(s)
		return nil
	}
	// Read the log before writing anything: an open below a term already
	// in the log must leave no term-begin behind it (on a backend that
	// cannot fence, only this read refuses it). One scanner reads the log
	// up to its last message, then on past what this open appends, up to
	// its own term-begin.
	last, err := w.impl.Last(ctx)
	if err != nil {
		return errors.Wrap(err, "find the end of the log")
	}
	rec, r, err := w.recoverEnd(ctx, last)
	if err != nil {
		return errors.Wrap(err, "recover the log")
	}
	defer func() { _ = rec.Close() }()
	if r.maxTerm > w.ch.Term {
		w.fence(walimpls.MarkNotStored(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, CurrentTerm: r.maxTerm}))
		return w.reason
	}
	begin := message.Message{}.WithKind(message.KindTermBegin).WithTerm(w.ch.Term)
	beginID, err := w.appendRetry(ctx, begin)
	if err != nil {
		return errors.Wrap(err, "append term-begin")
	}
	w.beginID = beginID
	// What others appended between the end found above and this
	// term-begin: on a backend that fences, a higher term cannot have begun
	// there; on one that cannot, this open lost a race and is fenced.
	if err := w.recover(ctx, rec, &r, func(id message.ID) (bool, error) {
		c, err := id.Compare(beginID)
		return c >= 0, err
	}, false); err != nil {
		return errors.Wrap(err, "recover the log")
	}
	if r.maxTerm > w.ch.Term {
		w.fence(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, CurrentTerm: r.maxTerm})
		return w.reason
	}
	alloc := w.opts.Allocator
	if alloc == nil {
		clock := hlc.New(nil)
		clock.Observe(r.maxTT)
		alloc = clock
	}
	w.ticks = newTimeticks(alloc, r.maxTT)
	if w.fencing {
		// Where the backend fences, no other writer's message can come
		// between this writer's appends, and its scanners can be released
		// without waiting for a watermark in the log.
		w.ticks.trackReleases()
		w.localRelease = true
	}
	s, err := readBackend(w.impl)(ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: walimpls.DeliverStartFrom(beginID)})
	if err != nil {
		return errors.Wrap(err, "start tail reader")
	}
	w.wab.origin = beginID
	w.startTail(s)
	// A first watermark releases to scanners whatever the previous owner
	// left unreleased, even if this owner never appends.
	if err := w.writeWatermark(ctx); err != nil {
		return errors.Wrap(err, "first watermark")
	}
	w.wg.Add(1)
	go w.watermarkLoop()
	return nil
}

// recovered is what an open learns from the log before its term-begin.
type recovered struct {
	maxTT   uint64
	maxTerm int64
	read    int // messages read
}

// firstTailWindow is how many messages from the end an open reads first;
// each window that proves too short is followed by one tailWindowGrowth
// times longer.
const (
	firstTailWindow  = 64
	tailWindowGrowth = 8
)

// recoverEnd reads the log up to last (its last message when the open
// began) and returns the scanner positioned right after it, with the
// highest timetick and term found.
//
// On a backend that fences, only the end of the log is read: windows of
// growing length from the end (walimpls.DeliverTail) until one proves that
// nothing before it holds a higher timetick or term (see endWindow), so the
// cost of an open does not grow with the retained log. On a backend that
// cannot fence, a stale owner's messages may follow a newer term-begin
// anywhere, and only the whole log tells the highest term: it is read from
// the start.
func (w *wal) recoverEnd(ctx context.Context, last message.ID) (walimpls.Scanner, recovered, error) {
	readAhead := w.opts.ScannerBufferBytes / 4
	if !w.fencing {
		s, err := w.impl.Read(ctx, walimpls.ReadOption{Name: "recovery", DeliverPolicy: walimpls.DeliverAll(), ReadAheadBytes: readAhead})
		if err != nil {
			return nil, recovered{}, err
		}
		var r recovered
		if !last.IsZero() {
			err = w.recover(ctx, s, &r, func(id message.ID) (bool, error) {
				c, err := id.Compare(last)
				return c >= 0, err
			}, true)
		}
		if err != nil {
			_ = s.Close()
			return nil, recovered{}, err
		}
		w.recoveredMessages, w.recoveredTT = r.read, r.maxTT
		return s, r, nil
	}
	// The first window's scanner stays open: it ends at last, where the
	// open reads on. Longer windows read only what lies before the
	// previous one.
	s, err := w.impl.Read(ctx, walimpls.ReadOption{Name: "recovery", DeliverPolicy: walimpls.DeliverTail(firstTailWindow), ReadAheadBytes: readAhead})
	if err != nil {
		return nil, recovered{}, err
	}
	var entries []endEntry
	if !last.IsZero() {
		entries, err = readEntries(ctx, s, func(id message.ID) (bool, bool, error) {
			c, err := id.Compare(last)
			return c >= 0, true, err
		})
	}
	for n := firstTailWindow; err == nil; n *= tailWindowGrowth {
		win := summarize(entries)
		// A window shorter than n holds every kept message.
		if win.enough || len(entries) < n {
			// The term of the window's first message began before it.
			if !win.first.id.IsZero() {
				w.noteTermBegin(win.first.id, win.first.term)
			}
			for _, tb := range win.begins {
				w.noteTermBegin(tb.id, tb.term)
			}
			w.recoveredMessages, w.recoveredTT = len(entries), win.maxTT
			return s, recovered{maxTT: win.maxTT, maxTerm: win.maxTerm, read: len(entries)}, nil
		}
		var before []endEntry
		before, err = w.readBefore(ctx, n*tailWindowGrowth, entries[0].id)
		if err == nil && len(before) == 0 {
			n = len(entries) + 1 // nothing before: the whole log is read
		}
		entries = append(before, entries...)
	}
	_ = s.Close()
	return nil, recovered{}, err
}

// readBefore reads the messages of the last n that lie before end.
func (w *wal) readBefore(ctx context.Context, n int, end message.ID) ([]endEntry, error) {
	s, err := w.impl.Read(ctx, walimpls.ReadOption{Name: "recovery", DeliverPolicy: walimpls.DeliverTail(n), ReadAheadBytes: w.opts.ScannerBufferBytes / 4})
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	return readEntries(ctx, s, func(id message.ID) (bool, bool, error) {
		c, err := id.Compare(end)
		return c >= 0, c < 0, err
	})
}

// endEntry is what recovery keeps of a message: not its payload.
type endEntry struct {
	id      message.ID
	kind    message.Kind
	term    int64
	tt      uint64
	hasTerm bool
	hasTT   bool
}

// endedEarly is the error of a recovery read whose scanner s ended before
// the end it was looking for: the scanner's own error kept as the cause.
func endedEarly(s walimpls.Scanner) error {
	<-s.Done() // Error is valid once Done is closed
	if err := s.Error(); err != nil {
		return errors.Wrap(err, "log ended before its end was read")
	}
	return errors.New("log ended before its end was read")
}

// readEntries reads s until stop says a message is the last one to look at;
// include says whether that message is kept.
func readEntries(ctx context.Context, s walimpls.Scanner, stop func(message.ID) (stop, include bool, err error)) ([]endEntry, error) {
	var entries []endEntry
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return nil, endedEarly(s)
			}
			end, include, err := stop(m.ID())
			if err != nil {
				return nil, err
			}
			if include {
				e := endEntry{id: m.ID(), kind: m.Kind()}
				e.term, e.hasTerm = m.Term()
				e.tt, e.hasTT = m.TimeTick()
				entries = append(entries, e)
			}
			if end {
				return entries, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// endWindow is what an open learns from a suffix of the log, and whether
// that suffix is enough: whether every message before it has a lower
// timetick and a term no higher than the highest the window holds.
//
// On a backend that fences, the log is a sequence of owners' stretches,
// each starting with the owner's term-begin: once an open succeeds, no
// earlier writer stores anything, so everything before a term-begin was
// written by that owner's predecessors, and the owner, which read all of it
// when it opened, allocates every timetick above theirs. An owner's
// watermarks are written one at a time, each once the previous one's
// append returned, and one writer's appends are stored in the order they
// were made. Two proofs follow, either of which makes the window enough:
//
//   - a term-begin followed, before the next term-begin, by a message of
//     its term with a timetick: that timetick is above everything before
//     the term-begin;
//   - two watermarks of one term with no term-begin between them: the
//     second was allocated after the first was stored, so after every
//     message stored before the first, and its timetick is above all of
//     theirs.
//
// Terms only grow along the log on such a backend (a lower open is refused,
// and a fenced writer stores nothing after the fencing open), so no message
// before the window has a term above the window's.
type endWindow struct {
	maxTT   uint64
	maxTerm int64
	begins  []termBegin
	enough  bool
	first   termBegin // the first message with a term, unless a term-begin

	// The current stretch: its term-begin's term when it began inside the
	// window, and the term and count of its watermarks.
	begun       bool
	beginTerm   int64
	wmTerm      int64
	wmInStretch int
}

// summarize looks at entries in log order.
func summarize(entries []endEntry) endWindow {
	var e endWindow
	for _, m := range entries {
		e.add(m)
	}
	return e
}

func (e *endWindow) add(m endEntry) {
	if m.hasTT {
		e.maxTT = max(e.maxTT, m.tt)
	}
	if !m.hasTerm {
		return
	}
	e.maxTerm = max(e.maxTerm, m.term)
	if e.first.id.IsZero() && m.kind != message.KindTermBegin {
		e.first = termBegin{id: m.id, term: m.term}
	}
	if m.kind == message.KindTermBegin {
		e.begins = append(e.begins, termBegin{id: m.id, term: m.term})
		e.begun, e.beginTerm, e.wmInStretch = true, m.term, 0
		return
	}
	if !m.hasTT {
		return
	}
	if e.begun && m.term == e.beginTerm {
		e.enough = true
	}
	if m.kind == message.KindTimeTick {
		if e.wmInStretch > 0 && m.term == e.wmTerm {
			e.enough = true
		}
		e.wmTerm = m.term
		e.wmInStretch++
	}
}

// recover reads s until done says a message ID is the end, noting the
// highest timetick and term-begin term on the way. The end message itself
// is taken into account when inclusive.
func (w *wal) recover(ctx context.Context, s walimpls.Scanner, r *recovered, done func(message.ID) (bool, error), inclusive bool) error {
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return endedEarly(s)
			}
			end, err := done(m.ID())
			if err != nil {
				return err
			}
			if end && !inclusive {
				return nil
			}
			r.read++
			if tt, ok := m.TimeTick(); ok {
				r.maxTT = max(r.maxTT, tt)
			}
			if m.Kind() == message.KindTermBegin {
				if t, ok := m.Term(); ok {
					r.maxTerm = max(r.maxTerm, t)
					w.noteTermBegin(m.ID(), t)
				}
			}
			if end {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startTail runs the reader that feeds the write-ahead buffer.
func (w *wal) startTail(s *backendScan) {
	w.wg.Add(1)
	go w.tail(s)
}

// tailBatch bounds how many messages the tail reader takes from the backend
// before it pushes them to the write-ahead buffer under one lock.
const tailBatch = 64

// tail owns the tail reader: it copies the log into the write-ahead buffer
// and notices higher terms. When the backend scanner fails it reopens it
// after the last message it copied.
//
// It takes what the backend has ready without blocking and pushes it as a
// batch: one lock, one wake-up of tailing scanners and one gauge update per
// batch instead of per message, on the append path of every WAL. Where the
// backend offers batch scanners, the batch is the backend's slice: one
// hand-off per slice, not per message.
func (w *wal) tail(s *backendScan) {
	defer w.wg.Done()
	defer w.wab.close()
	defer w.tailMoves(func() { w.tailEnded = true })
	var last message.ID
	for attempt := 0; ; {
		batch, ok, stopped := s.receiveBatch(tailBatch, w.ctx.Done())
		if stopped {
			_ = s.Close()
			return
		}
		if ok {
			attempt = 0
			last = batch[len(batch)-1].ID()
			w.tailed(batch)
			clear(batch) // the buffer holds them now; do not pin them here
			continue
		}
		select { // Error is valid once Done is closed
		case <-s.Done():
		case <-w.ctx.Done():
		}
		err := s.Error()
		_ = s.Close()
		if w.ctx.Err() != nil {
			return
		}
		w.log.Warn("tail reader ended; restarting", "error", err, "after", last)
		if last.IsZero() || errors.Is(err, walimpls.ErrPositionGone) || errors.Is(err, walimpls.ErrClosed) {
			// Without a position to resume from, tailing scanners fall
			// back to reading the backend themselves.
			return
		}
		if w.opts.Retry.Wait(w.ctx, attempt) != nil {
			return
		}
		attempt++
		ns, rerr := readBackend(w.impl)(w.ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: walimpls.DeliverStartAfter(last)})
		if rerr != nil {
			w.log.Warn("tail reader restart failed", "error", rerr)
			return
		}
		s = ns
	}
}

// tailed handles a batch the tail reader read, in log order: term-begins
// are noted (and may fence this WAL) before the batch reaches the buffer, so
// a scanner that reads a message there already knows every term-begin
// before it.
func (w *wal) tailed(batch []message.Immutable) {
	for _, m := range batch {
		if m.Kind() != message.KindTermBegin {
			continue
		}
		t, _ := m.Term()
		w.noteTermBegin(m.ID(), t)
		if w.opts.ReadOnly {
			continue
		}
		// A higher term began, or a later open of this one (the same-term
		// rule: the later claim wins). A backend that fences has stopped
		// this writer already; on one that cannot, this is where it stops.
		if t > w.ch.Term || t == w.ch.Term && w.beginID.LT(m.ID()) {
			// Fenced first: an append that sees fencedAt reports the
			// fence's reason, which must be there to read.
			w.fence(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, CurrentTerm: t})
			w.tailMoves(func() {
				if w.fencedAt.IsZero() {
					w.fencedAt = m.ID()
				}
			})
		}
	}
	w.m.wabBytes.Set(float64(w.wab.push(batch...)))
	if w.confirm {
		w.tailMoves(func() { w.tailPos = batch[len(batch)-1].ID() })
	}
}

// tailMoves applies a change to the tail reader's progress and wakes the
// appends waiting for it (confirmAck).
func (w *wal) tailMoves(change func()) {
	w.learnedMu.Lock()
	defer w.learnedMu.Unlock()
	change()
	close(w.tailMoved)
	w.tailMoved = make(chan struct{})
}

// confirmAck waits until the tail reader has read past id, an append's last
// record, and fails the append if a term-begin that fences this WAL came
// before it: on a backend that cannot fence, a stale writer's appends are
// stored, but no reader delivers them, so they must not be acknowledged.
func (w *wal) confirmAck(ctx context.Context, id message.ID) error {
	for {
		w.learnedMu.Lock()
		pos, at, ended, moved := w.tailPos, w.fencedAt, w.tailEnded, w.tailMoved
		w.learnedMu.Unlock()
		switch {
		case !at.IsZero() && at.LT(id):
			// Stored after the term-begin of the new owner: every reader
			// drops it. The WAL was fenced before fencedAt was set (tailed).
			return walimpls.MarkNotStored(errors.Wrapf(w.usable(), "adaptor: append to %s: stored at %s after the fencing term-begin at %s", w.ch.Name, id, at))
		case !pos.IsZero() && id.LTE(pos):
			return nil
		case ended:
			return walimpls.MarkOutcomeUnknown(errors.Wrapf(walimpls.ErrClosed, "adaptor: append to %s: stored at %s, the tail reader ended before confirming it", w.ch.Name, id))
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return walimpls.MarkOutcomeUnknown(errors.Wrapf(ctx.Err(), "adaptor: append to %s: stored at %s, not yet confirmed", w.ch.Name, id))
		}
	}
}

// termBegin is where a term began in the log.
type termBegin struct {
	id   message.ID
	term int64
}

// noteTermBegin records a term-begin read from the log (recovery and the tail
// reader see each in log order; a repeat is ignored).
func (w *wal) noteTermBegin(id message.ID, term int64) {
	w.learnedMu.Lock()
	defer w.learnedMu.Unlock()
	if n := len(w.termBegins); n > 0 && !w.termBegins[n-1].id.LT(id) {
		return
	}
	w.termBegins = append(w.termBegins, termBegin{id: id, term: term})
}

// termBefore returns the highest term that began before id in the log, as
// far as this WAL has read it: a scanner starting at id fences lower terms
// from its first message on.
func (w *wal) termBefore(id message.ID) int64 {
	w.learnedMu.Lock()
	defer w.learnedMu.Unlock()
	var t int64
	for _, tb := range w.termBegins {
		if !tb.id.LT(id) {
			break
		}
		t = max(t, tb.term)
	}
	return t
}

// ParseID implements WAL.
func (w *wal) ParseID(s string) (message.ID, error) { return w.parseID(s) }

// ParseCheckpoint implements WAL.
func (w *wal) ParseCheckpoint(s string) (Checkpoint, error) { return parseCheckpoint(s, w.parseID) }

// Err implements WAL.
func (w *wal) Err() error { return w.usable() }

// Truncate implements WAL.
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if w.opts.ReadOnly {
		return errors.Wrapf(walimpls.ErrReadOnly, "adaptor: truncate %s", w.ch.Name)
	}
	if err := w.usable(); err != nil {
		return err
	}
	err := w.impl.Truncate(ctx, upTo)
	if errors.Is(err, walimpls.ErrFenced) {
		w.fence(err)
	}
	if err != nil {
		return errors.Wrapf(err, "adaptor: truncate %s to %s", w.ch.Name, upTo)
	}
	w.noteTruncated(upTo)
	return nil
}

// noteTruncated records a truncation point this WAL applied: the
// write-ahead buffer still holds messages before it, which no scanner may
// be handed from now on (see truncatedBelow).
func (w *wal) noteTruncated(upTo message.ID) {
	for {
		cur := w.truncated.Load()
		if cur != nil && !cur.LT(upTo) {
			return
		}
		if w.truncated.CompareAndSwap(cur, &upTo) {
			return
		}
	}
}

// truncatedBelow reports whether id lies before a truncation this WAL
// applied.
func (w *wal) truncatedBelow(id message.ID) bool {
	t := w.truncated.Load()
	return t != nil && id.LT(*t)
}

func (w *wal) Channel() Channel               { return w.ch }
func (w *wal) Available() <-chan struct{}     { return w.available }
func (w *wal) Sync(ctx context.Context) error { return w.sync(ctx) }
func (w *wal) sync(ctx context.Context) error {
	if w.opts.ReadOnly {
		return errors.Wrap(walimpls.ErrReadOnly, "adaptor: sync")
	}
	if err := w.usable(); err != nil {
		return err
	}
	w.dirty.Store(false)
	return w.writeWatermark(ctx)
}

// usable returns why the WAL cannot append, if it cannot.
func (w *wal) usable() error {
	select {
	case <-w.available:
		return w.reason
	default:
		return nil
	}
}

// fence makes the WAL unavailable for good.
func (w *wal) fence(cause error) {
	w.wab.stopReleases()
	w.unavailable.Do(func() {
		w.reason = cause
		close(w.available)
		if errors.Is(cause, walimpls.ErrFenced) {
			w.m.fenced.Inc()
			w.log.Warn("wal fenced; appends fail from now on", "cause", cause)
		}
	})
}

// acquire takes an in-flight slot, waiting while all are taken. Its
// refusals store nothing.
func (w *wal) acquire(ctx context.Context) error {
	if w.opts.ReadOnly {
		return errors.Wrapf(walimpls.ErrReadOnly, "adaptor: append to %s", w.ch.Name)
	}
	if err := w.usable(); err != nil {
		return walimpls.MarkNotStored(err)
	}
	select {
	case w.inflight <- struct{}{}:
		return nil
	case <-ctx.Done():
		return walimpls.MarkNotStored(errors.Wrapf(ctx.Err(), "adaptor: append to %s: waiting for an in-flight slot", w.ch.Name))
	case <-w.available:
		return walimpls.MarkNotStored(w.reason)
	}
}

func (w *wal) releaseSlot() { <-w.inflight }

func (w *wal) Append(ctx context.Context, m message.Message) (AppendResult, error) {
	start := time.Now()
	if err := w.acquire(ctx); err != nil {
		return AppendResult{}, err
	}
	defer w.releaseSlot()
	size := m.Size()
	p, err := w.prepare(ctx, []message.Message{m})
	var r AppendResult
	if err == nil {
		var res []AppendResult
		res, err = w.store(ctx, p)
		if err == nil {
			r = res[0]
		}
		w.putPrepared(p) // after res[0] was copied: res points into it
	}
	w.m.observe(start, size, err)
	if err != nil {
		return AppendResult{}, err
	}
	return r, nil
}

// AppendAsync takes the message's timetick before it returns, in the
// caller's goroutine: one caller's async appends are delivered in call
// order, whatever order the backend acknowledges them in. A backend that
// appends asynchronously (walimpls.AsyncAppender) gets the batch without a
// goroutine in between; callbacks run on the WAL's callback goroutine.
func (w *wal) AppendAsync(ctx context.Context, m message.Message, cb func(AppendResult, error)) {
	if cb == nil {
		cb = func(AppendResult, error) {}
	}
	start := time.Now()
	size := m.Size()
	err := w.acquire(ctx)
	var p *prepared
	if err == nil {
		if p, err = w.prepare(ctx, []message.Message{m}); err != nil {
			w.releaseSlot()
		}
	}
	w.mu.Lock()
	if err == nil && w.closed {
		p.end(w)
		w.releaseSlot()
		err = walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "adaptor: append to %s", w.ch.Name))
	}
	if err != nil {
		if w.closed {
			// Close may be waiting for wg already: answer here.
			w.mu.Unlock()
			cb(AppendResult{}, err)
			return
		}
		w.wg.Add(1)
		w.mu.Unlock()
		w.callbacks.Post(func() {
			defer w.wg.Done()
			cb(AppendResult{}, err)
		})
		return
	}
	w.wg.Add(1) // done once cb has run
	w.mu.Unlock()
	actx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(w.ctx, cancel)
	answer := func(res []AppendResult, err error) {
		stop()
		cancel()
		if err != nil && ctx.Err() == nil && w.ctx.Err() != nil {
			// Ended by the WAL's Close: ErrClosed, keeping the cause and
			// its outcome mark.
			err = &closedError{cause: err}
		}
		w.releaseSlot()
		w.m.observe(start, size, err)
		var r AppendResult
		if err == nil {
			r = res[0]
		}
		w.putPrepared(p) // after res[0] was copied: res points into it
		w.callbacks.Post(func() {
			defer w.wg.Done()
			cb(r, err)
		})
	}
	if w.async == nil {
		go func() { answer(w.store(actx, p)) }()
		return
	}
	w.storeAsync(actx, p, answer)
}

// storeAsync is store through the backend's asynchronous append: answer
// is called once, on the callback goroutine when the backend's first
// attempt stored the batch (the backend's own goroutine only queues its
// answer there), from a goroutine of its own when it failed (retries wait
// out their backoff), or before storeAsync returns when the WAL refuses
// at once.
func (w *wal) storeAsync(ctx context.Context, p *prepared, answer func([]AppendResult, error)) {
	if w.usable() != nil {
		answer(w.storeFrom(ctx, p, nil)) // refused before any attempt
		return
	}
	w.async.AppendBatchAsync(ctx, p.records, func(ids []message.ID, err error) {
		first := &appendOutcome{ids: ids, err: err}
		if err != nil {
			go func() { answer(w.storeFrom(ctx, p, first)) }()
			return
		}
		w.callbacks.Post(func() { answer(w.storeFrom(ctx, p, first)) })
	})
}

// AppendBatch stamps msgs with increasing timeticks in slice order and
// stores them, parts of split messages included, as one backend batch: they
// are stored and delivered in slice order, and all or nothing on a backend
// that declares Capabilities.AtomicBatch. On another backend a failure may
// leave a stored prefix, whose results are returned with the error.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]AppendResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	start := time.Now()
	if err := w.acquire(ctx); err != nil {
		return nil, err
	}
	defer w.releaseSlot()
	p, err := w.prepare(ctx, msgs)
	var res []AppendResult
	if err == nil {
		res, err = w.store(ctx, p)
	}
	size := 0
	for _, m := range msgs {
		size += m.Size()
	}
	w.m.observe(start, size, err)
	return res, err
}

// prepared is a batch of appends with their timeticks taken: each message
// stamped (and split into parts when above the part size), in order, as one
// backend batch.
type prepared struct {
	ticks   []uint64          // each message's timetick, increasing
	records []message.Message // what the backend stores, in order
	first   []int             // index in records of each message's first record
	bytes   int               // the stamped messages' total size
	// reusable: every backend call that took the records has returned
	// having stored them, so no backend still holds them (store sets it).
	// An attempt of unknown outcome may still be sending them: a backend
	// may keep them past its call then, as the tests' faulty backend does.
	reusable bool
	// one backs the slices of a single unsplit message (Append,
	// AppendAsync): the batch is one allocation, not one per slice.
	one struct {
		tick   [1]uint64
		record [1]message.Message
		first  [1]int
		result [1]AppendResult
	}
}

// putPrepared gives a single append's batch back for the next one, once
// nothing points into it any more: its results were copied out, and no
// backend holds its records (reusable).
func (w *wal) putPrepared(p *prepared) {
	if !p.reusable {
		return
	}
	*p = prepared{}
	w.prepPool.Put(p)
}

// finishInline is how many messages finish and end track in arrays on the
// stack rather than in allocated slices.
const finishInline = 8

// end ends the timeticks of a batch that was not handed to the backend.
func (p *prepared) end(w *wal) {
	var buf [finishInline]flightState
	outcome := buf[:0]
	for range p.ticks {
		outcome = append(outcome, notStoredFlight)
	}
	if w.ticks.finish(p.ticks, outcome, nil) {
		w.offerRelease()
	}
}

// finish ends the batch's timeticks with each message's outcome: stored
// whole (ids covers its last record), certainly not stored, or unknown.
func (p *prepared) finish(w *wal, ids []message.ID, err error) {
	var obuf [finishInline]flightState
	var lbuf [finishInline]message.ID
	outcome, last := obuf[:0], lbuf[:0]
	if n := len(p.ticks); n > finishInline {
		outcome, last = make([]flightState, 0, n), make([]message.ID, 0, n)
	}
	outcome, last = outcome[:len(p.ticks)], last[:len(p.ticks)]
	notStored := err != nil && walimpls.NotStored(err)
	for i := range p.first {
		end := len(p.records) // one past the message's last record
		if i+1 < len(p.first) {
			end = p.first[i+1]
		}
		switch {
		case end <= len(ids):
			outcome[i], last[i] = ackedFlight, ids[end-1]
		case notStored:
			outcome[i] = notStoredFlight
		default:
			outcome[i] = unknownFlight
		}
	}
	if w.ticks.finish(p.ticks, outcome, last) {
		w.offerRelease()
	}
}

// offerRelease hands the writer's local release point to the write-ahead
// buffer, which publishes it to tailing scanners (timeticks.covered).
func (w *wal) offerRelease() {
	tt, need := w.ticks.releasePoint()
	w.wab.offerRelease(tt, need)
}

// prepare checks msgs, waits while too much is unreleased, takes their
// timeticks in slice order and stamps and splits them. Its refusals store
// nothing; once it succeeded, store must follow.
func (w *wal) prepare(ctx context.Context, msgs []message.Message) (*prepared, error) {
	for i, m := range msgs {
		if size := m.Size(); size > w.opts.MaxMessageBytes {
			return nil, errors.Wrapf(&walimpls.TooLargeError{Size: size, Limit: w.opts.MaxMessageBytes, What: "the WAL's MaxMessageBytes"},
				"adaptor: append to %s: message %d", w.ch.Name, i)
		}
	}
	if err := w.waitForWatermark(ctx); err != nil {
		return nil, walimpls.MarkNotStored(err)
	}
	p, _ := w.prepPool.Get().(*prepared)
	if p == nil {
		p = &prepared{}
	}
	if len(msgs) == 1 {
		p.ticks, p.first, p.records = p.one.tick[:], p.one.first[:], p.one.record[:0]
	} else {
		p.ticks, p.first = make([]uint64, len(msgs)), make([]int, len(msgs))
	}
	if err := w.ticks.beginN(ctx, p.ticks); err != nil {
		return nil, walimpls.MarkNotStored(err)
	}
	for i, m := range msgs {
		msg := m.Stamp(message.KindData, w.ch.Term, p.ticks[i])
		msgSize := msg.Size()
		p.bytes += msgSize
		p.first[i] = len(p.records)
		if w.partBytes > 0 && msgSize > w.partBytes {
			parts, err := splitMessage(msg, w.partBytes) // copies the properties
			if err != nil {
				p.end(w)
				return nil, errors.Wrapf(err, "adaptor: append to %s: message %d", w.ch.Name, i)
			}
			p.records = append(p.records, parts...)
			continue
		}
		p.records = append(p.records, msg)
	}
	return p, nil
}

// store appends a prepared batch with retries, confirms it where the
// backend cannot fence, and ends its timeticks. On failure, the results of
// the messages known stored whole (a prefix, on a backend without atomic
// batches) come with the error.
func (w *wal) store(ctx context.Context, p *prepared) ([]AppendResult, error) {
	return w.storeFrom(ctx, p, nil)
}

// storeFrom is store going on from a first attempt already made (nil: none
// made yet).
func (w *wal) storeFrom(ctx context.Context, p *prepared, first *appendOutcome) ([]AppendResult, error) {
	ids, retried, err := w.retryAppend(ctx, p.records, first)
	defer func() { p.finish(w, ids, err) }()
	if err == nil && !retried {
		p.reusable = true
	}
	if err == nil && w.confirm {
		if err = w.confirmAck(ctx, ids[len(ids)-1]); err != nil {
			ids = nil // stored, but no reader delivers them
		}
	}
	res := p.one.result[:0]
	if len(p.first) > 1 {
		res = make([]AppendResult, 0, len(p.first))
	}
	for i, f := range p.first {
		end := len(p.records) // one past the message's last record
		if i+1 < len(p.first) {
			end = p.first[i+1]
		}
		if end > len(ids) {
			break // not stored whole: a message whose last part was not stored is never delivered
		}
		res = append(res, AppendResult{ID: ids[f], TimeTick: p.ticks[i]})
	}
	if err != nil {
		return res, err
	}
	if retried {
		w.firstCopies(ctx, ids[len(ids)-1], res)
	}
	w.noteWritten(p.bytes)
	return res, nil
}

// firstCopies points each result at the copy readers deliver. After an
// attempt of unknown outcome, the retry that succeeded may have stored a
// second copy: readers deliver the first (same timetick, lower ID, since
// one writer's appends are stored in order) and drop the other. It is
// found in the write-ahead buffer once the tail reader has read last, the
// retry's last record; when the buffer no longer holds that stretch of the
// log (or ctx ends first) the results keep the retry's IDs.
func (w *wal) firstCopies(ctx context.Context, last message.ID, res []AppendResult) {
	for {
		_, found, behind, closed := w.wab.locate(last)
		if found {
			break
		}
		if closed || !behind {
			return
		}
		wait := w.wab.waitChanged()
		if _, found, behind, _ := w.wab.locate(last); found || !behind {
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return
		case <-w.ctx.Done():
			return
		}
	}
	for i := range res {
		if id, ok := w.wab.firstWithTimeTick(res[i].ID, res[i].TimeTick); ok {
			res[i].ID = id
		}
	}
}

// appendRetry appends one record (a term-begin, a watermark) with retries.
func (w *wal) appendRetry(ctx context.Context, m message.Message) (message.ID, error) {
	ids, _, err := w.appendBatchRetry(ctx, []message.Message{m})
	if err != nil {
		return message.ID{}, err
	}
	return ids[0], nil
}

// appendBatchRetry appends records to the backend as one batch, retrying
// retryable errors with capped exponential backoff until ctx ends or the
// WAL closes; after a failure that stored a prefix (a backend without
// atomic batches) it goes on with the rest, so the records stay in order.
// ErrFenced makes the WAL unavailable. Its error is NotStored only when no
// attempt may have stored what was not reported stored; the IDs of the
// stored prefix come with it.
func (w *wal) appendBatchRetry(ctx context.Context, records []message.Message) (ids []message.ID, retriedUnknown bool, err error) {
	return w.retryAppend(ctx, records, nil)
}

// appendOutcome is what one backend append of a batch returned.
type appendOutcome struct {
	ids []message.ID
	err error
}

// retryAppend is appendBatchRetry going on from a first attempt already
// made (nil: none made yet).
func (w *wal) retryAppend(ctx context.Context, records []message.Message, first *appendOutcome) (ids []message.ID, retriedUnknown bool, err error) {
	unknown := false // an attempt failed with an unknown outcome
	outcome := func(err error) error {
		if unknown {
			return walimpls.MarkOutcomeUnknown(err)
		}
		return walimpls.MarkNotStored(err)
	}
	for attempt := 0; ; attempt++ {
		var (
			got []message.ID
			err error
		)
		if attempt == 0 && first != nil {
			got, err = first.ids, first.err
		} else {
			if err := w.usable(); err != nil {
				return ids, unknown, outcome(err)
			}
			got, err = w.impl.AppendBatch(ctx, records[len(ids):])
		}
		if len(got) > len(records)-len(ids) {
			got = got[:len(records)-len(ids)]
		}
		if ids == nil && err == nil {
			ids = got // all at once, the common case: no copy
		} else {
			ids = append(ids, got...)
		}
		if err == nil {
			if len(ids) != len(records) {
				return ids, unknown, errors.AssertionFailedf("adaptor: the backend stored %d of %d records without an error", len(ids), len(records))
			}
			return ids, unknown, nil
		}
		if !walimpls.NotStored(err) {
			unknown = true
		}
		if errors.Is(err, walimpls.ErrFenced) {
			w.fence(err)
			return ids, unknown, outcome(errors.Wrapf(err, "adaptor: append to %s", w.ch.Name))
		}
		if !walimpls.IsRetryable(err) {
			return ids, unknown, outcome(errors.Wrapf(err, "adaptor: append to %s", w.ch.Name))
		}
		w.m.retries.Inc()
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(w.ctx, cancel)
		werr := w.opts.Retry.Wait(wctx, attempt)
		stop()
		cancel()
		if werr != nil {
			if ctx.Err() == nil {
				werr = walimpls.ErrClosed
			}
			// fmt.Errorf keeps both causes for errors.Is (cockroachdb's
			// Wrapf takes one %w): why the retries stopped, and the last
			// attempt's error.
			return ids, unknown, outcome(fmt.Errorf("adaptor: append to %s after %d attempts: %w (last attempt: %w)",
				w.ch.Name, attempt+1, werr, err))
		}
	}
}

// noteWritten marks the channel busy and asks for a watermark early once
// enough bytes are unreleased.
func (w *wal) noteWritten(size int) {
	w.dirty.Store(true)
	if w.dirtyBytes.Add(int64(size)) >= int64(w.opts.WatermarkBytes) {
		w.kickWatermark()
	}
}

func (w *wal) kickWatermark() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// waitForWatermark holds an append back while twice WatermarkBytes were
// appended since the last watermark. The kick alone does not bound the
// gap: the watermark goroutine is one among many busy appenders and can be
// scheduled late, and every scanner must hold all the messages between two
// watermarks in its reorder buffer (a gap above ScannerBufferBytes fails
// each scanner of that log with ErrScannerBufferFull).
func (w *wal) waitForWatermark(ctx context.Context) error {
	limit := 2 * int64(w.opts.WatermarkBytes)
	for w.dirtyBytes.Load() >= limit {
		w.watermarkedMu.Lock()
		wait := w.watermarked
		w.watermarkedMu.Unlock()
		// Look again after taking the channel, so a watermark in between
		// is not missed.
		if w.dirtyBytes.Load() < limit {
			return nil
		}
		w.kickWatermark()
		select {
		case <-wait:
		case <-ctx.Done():
			return errors.Wrapf(ctx.Err(), "adaptor: append to %s: waiting for a watermark", w.ch.Name)
		case <-w.available:
			return w.reason
		}
	}
	return nil
}

// watermarkLoop appends a watermark every interval unless the channel was
// idle, and sooner when kicked.
func (w *wal) watermarkLoop() {
	defer w.wg.Done()
	t := time.NewTicker(w.opts.TimeTickInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		// dirtyBytes as well: an append held back by waitForWatermark
		// must never wait for a watermark this loop decided to skip.
		if !w.dirty.Swap(false) && w.dirtyBytes.Load() == 0 {
			continue
		}
		if err := w.writeWatermark(w.ctx); err != nil {
			w.dirty.Store(true)
			if w.ctx.Err() == nil && w.usable() == nil {
				w.log.Warn("watermark failed; retrying at the next tick", "error", err)
			}
		}
	}
}

// writeWatermark appends a timetick message W once every append with a
// timetick below W is acknowledged.
func (w *wal) writeWatermark(ctx context.Context) error {
	_, err := w.watermarkNow(ctx)
	return err
}

// watermarkNow writes a watermark and returns the checkpoint after it: its
// timetick, and the position of the watermark before it (every message
// with a higher timetick began after that one was stored, so it lies after
// it).
func (w *wal) watermarkNow(ctx context.Context) (Checkpoint, error) {
	w.watermarkMu.Lock()
	defer w.watermarkMu.Unlock()
	// What is counted before wm is allocated began before it, so wm covers
	// it. Appends counted later stay counted, even those below wm: an
	// over-count only brings the next watermark sooner, while an
	// under-count would let scanners' reorder buffers overflow.
	covered := w.dirtyBytes.Load()
	wm, err := w.ticks.watermark(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	msg := message.Message{}.WithKind(message.KindTimeTick).WithTerm(w.ch.Term).WithTimeTick(wm)
	id, err := w.appendRetry(ctx, msg)
	if err != nil {
		return Checkpoint{}, err
	}
	before := w.lastWatermark
	if before.IsZero() {
		before = w.beginID
	}
	w.lastWatermark = id
	if w.ticks.covered(wm, id) {
		w.offerRelease()
	}
	w.dirtyBytes.Sub(covered)
	w.m.watermarks.Inc()
	w.watermarkedMu.Lock()
	close(w.watermarked)
	w.watermarked = make(chan struct{})
	w.watermarkedMu.Unlock()
	return Checkpoint{Position: before, TimeTick: wm}, nil
}

// Tail implements WAL.
func (w *wal) Tail(ctx context.Context) (Checkpoint, error) {
	if w.opts.ReadOnly {
		return Checkpoint{}, errors.Wrap(walimpls.ErrReadOnly, "adaptor: tail: a read-only WAL writes no watermark")
	}
	if err := w.usable(); err != nil {
		return Checkpoint{}, err
	}
	w.dirty.Store(false)
	return w.watermarkNow(ctx)
}

func (w *wal) Read(ctx context.Context, opt ReadOption) (Scanner, error) {
	return w.read(ctx, opt, false)
}

func (w *wal) ReadBatches(ctx context.Context, opt ReadOption) (BatchScanner, error) {
	return w.read(ctx, opt, true)
}

func (w *wal) read(ctx context.Context, opt ReadOption, batches bool) (*scanner, error) {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return nil, errors.Wrapf(walimpls.ErrClosed, "adaptor: read %s", w.ch.Name)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "adaptor: read %s", w.ch.Name)
	}
	s, err := newScanner(ctx, w.scanView(), opt, batches)
	if err != nil {
		return nil, errors.Wrapf(err, "adaptor: read %s", w.ch.Name)
	}
	if !w.scanners.Add(s) {
		s.abort()
		return nil, errors.Wrapf(walimpls.ErrClosed, "adaptor: read %s", w.ch.Name)
	}
	go s.run()
	return s, nil
}

// scanView is the part of the WAL a scanner sees. localRelease is final
// once Open returned.
func (w *wal) scanView() walView {
	return walView{
		read:           readBackend(w.impl),
		wab:            w.wab,
		m:              w.m,
		budget:         w.opts.ScannerBufferBytes,
		localRelease:   w.localRelease,
		term:           w.ch.Term,
		termBefore:     w.termBefore,
		truncatedBelow: w.truncatedBelow,
		live:           &w.scanners,
		hooks:          w.scanHooks,
	}
}

func (w *wal) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()

	w.fence(errors.Wrapf(walimpls.ErrClosed, "adaptor: %s", w.ch.Name))
	// The scanners stop before the tail reader, so that none sees the
	// write-ahead buffer close and reads the backend again on its way out.
	w.scanners.StopAll(errors.Wrap(walimpls.ErrClosed, "wal closed"))
	w.cancel()
	w.wg.Wait()
	w.callbacks.Close()
	err := w.impl.Close()
	w.m.forget()
	w.log.Info("wal closed")
	return err
}

// walMetrics are one channel's series.
type walMetrics struct {
	parent      *Metrics
	channel     string
	appendsOK   prometheus.Counter
	appendBytes prometheus.Counter
	latencyOK   prometheus.Observer
	latencyErr  prometheus.Observer
	retries     prometheus.Counter
	fenced      prometheus.Counter
	watermarks  prometheus.Counter
	wabBytes    prometheus.Gauge
	scanBytes   prometheus.Gauge
	fallbacks   prometheus.Counter
}

func newWALMetrics(m *Metrics, channel string) walMetrics {
	if m == nil {
		// Unregistered metrics: recorded nowhere, but no nil checks anywhere.
		m, _ = NewMetrics(prometheus.NewRegistry())
	}
	return walMetrics{
		parent:      m,
		channel:     channel,
		appendsOK:   m.appends.WithLabelValues(channel),
		appendBytes: m.appendBytes.WithLabelValues(channel),
		latencyOK:   m.appendLatency.WithLabelValues(channel, "ok"),
		latencyErr:  m.appendLatency.WithLabelValues(channel, "error"),
		retries:     m.retries.WithLabelValues(channel),
		fenced:      m.fenced.WithLabelValues(channel),
		watermarks:  m.watermarks.WithLabelValues(channel),
		wabBytes:    m.wabBytes.WithLabelValues(channel),
		scanBytes:   m.reorderBytes.WithLabelValues(channel),
		fallbacks:   m.fallbacks.WithLabelValues(channel),
	}
}

func (m walMetrics) observe(start time.Time, size int, err error) {
	if err != nil {
		m.latencyErr.Observe(time.Since(start).Seconds())
		return
	}
	m.appendsOK.Inc()
	m.appendBytes.Add(float64(size))
	m.latencyOK.Observe(time.Since(start).Seconds())
}

func (m walMetrics) scanners(mode string) prometheus.Gauge {
	return m.parent.scanners.WithLabelValues(m.channel, mode)
}

func (m walMetrics) dropped(reason string) prometheus.Counter {
	return m.parent.dropped.WithLabelValues(m.channel, reason)
}

func (m walMetrics) forget() { m.parent.forget(m.channel) }
