package adaptor

// The WAL itself: opening (recovery, the term-begin, the first watermark),
// closing, reading, truncating and its lifetime. Its one mutex guards only
// whether it is closed and whether its tail reader was started.

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/utility/serial"
	"github.com/streamwal/streamwal/walimpls"
)

// wal is the WAL Open returns. Its state is split by job, each part owning
// its own (see the package documentation, "Inside a WAL"): what it was
// opened with is fixed; the timeticks in flight, the tail cache, what
// the log taught it (tailLog) and its watermarks (watermarker) each guard
// themselves; mu guards only its lifetime.
type wal struct {
	// Fixed once Open returns.
	impl      walimpls.WALImpl
	parseID   func(string) (message.ID, error) // the backend's ID decoder
	ch        Channel
	opts      Options
	log       *slog.Logger
	m         walMetrics
	partBytes int // 0: never split
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
	// async is the backend's asynchronous append, when it offers one and
	// appends need no confirmation; AppendAsync then needs no goroutine
	// per append.
	async   walimpls.AsyncAppender
	beginID message.ID // this WAL's own term-begin; zero when read-only
	// recoveredMessages is how many messages the open read before its
	// term-begin (tests check that it does not grow with the log).
	recoveredMessages int
	recoveredTT       uint64 // the highest timetick found there
	// scanHooks go into the view of each scanner Read starts; zero
	// outside tests, which set them before their first Read.
	scanHooks scanHooks
	// opened is when the open passed its milestones (OpenTimes).
	opened OpenTimes

	// The parts, each guarding its own state.
	ticks   *timeticks   // timeticks in flight and the release point; nil when read-only
	cache   *tailCache   // recent messages, for tailing scanners
	learned *tailLog     // what recovery and the tail reader read
	marks   *watermarker // the watermarks; nil when read-only
	// callbacks runs the completion of AppendAsync's appends and their
	// callbacks: an answer comes from a backend's goroutine (or a retrying
	// one), which must neither run a caller's code nor be held up by the
	// adaptor's own completion of the append; one goroutine for all
	// callbacks costs less than one per append, and keeps answer order.
	callbacks *serial.Queue
	inflight  chan struct{} // one token per append in flight
	// prepPool recycles the batches of single appends (Append,
	// AppendAsync), which copy their result out before they return one.
	prepPool sync.Pool
	// truncated is the highest point this WAL truncated its log to, nil if
	// none: the tail cache serves no message before it.
	truncated atomic.Pointer[message.ID]
	// firstAcked is set by the first acknowledged append, which calls
	// Options.OnFirstAppend.
	firstAcked atomic.Bool
	scanners   lifecycle.Group[*scanner] // stopped by Close, with ErrClosed

	// Lifetime. ctx ends when the WAL closes; background work and retries
	// watch it.
	ctx         context.Context
	cancel      context.CancelFunc
	mu          sync.Mutex // guards closed and tailing, and wg.Add against Close
	closed      bool
	tailing     bool           // the tail reader was started
	wg          sync.WaitGroup // the tail reader, and appends and callbacks in flight
	available   chan struct{}  // closed once the WAL can no longer append
	unavailable sync.Once
	reason      error // why available closed; written once, before the close
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
	fenced := time.Now()
	caps := opener.Capabilities()
	wctx, cancel := context.WithCancel(context.Background())
	w := &wal{
		impl:      impl,
		parseID:   opener.UnmarshalID,
		ch:        ch,
		opts:      opts,
		log:       opts.Logger.With("channel", ch.Name, "term", ch.Term),
		m:         newWALMetrics(opts.Metrics, cmp.Or(opts.MetricsChannel, ch.Name)),
		partBytes: partBytes(opts.PartBytes, caps.MaxMessageBytes),
		inflight:  make(chan struct{}, opts.MaxInflightAppends),
		cache:     newTailCache(opts.TailCacheBytes),
		ctx:       wctx,
		cancel:    cancel,
		available: make(chan struct{}),
		confirm:   !caps.Fencing && !opts.ReadOnly,
		fencing:   caps.Fencing,
		learned:   newTailLog(),
		callbacks: serial.New(),
	}
	if aa, ok := impl.(walimpls.AsyncAppender); ok && !w.confirm && !opts.ReadOnly {
		w.async = aa
	}
	if err := w.start(ctx); err != nil {
		w.cancel()
		if w.marks != nil {
			w.marks.stop()
		}
		w.wg.Wait()
		_ = impl.Close()
		w.m.forget()
		return nil, errors.Wrapf(err, "adaptor: open %s at term %d", ch.Name, ch.Term)
	}
	// Debug: the manager above, when there is one, logs the open with its
	// timing at Info, and one line per event is enough.
	w.log.Debug("wal opened", "read_only", opts.ReadOnly, "part_bytes", w.partBytes)
	w.opened = OpenTimes{Fenced: fenced, Ready: time.Now()}
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
		if w.fencing {
			return nil // the tail reader starts with the first scanner (ensureTail)
		}
		// On a backend that cannot fence, a stale writer's message may
		// follow a higher term-begin anywhere: the tail reader notes every
		// term-begin from the open on, so that scanners starting later
		// know them (termBefore).
		s, err := readBackend(w.impl)(ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: cursor.Latest()})
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
	rec, r, err := recoverEnd(ctx, w.impl, w.fencing, w.opts.ScannerBufferBytes/4, last)
	if err != nil {
		return errors.Wrap(err, "recover the log")
	}
	w.recoveredMessages, w.recoveredTT = r.read, r.maxTT
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
	if err := recoverTo(ctx, rec, &r, func(id message.ID) (bool, error) {
		c, err := id.Compare(beginID)
		return c >= 0, err
	}, false); err != nil {
		return errors.Wrap(err, "recover the log")
	}
	for _, tb := range r.begins {
		w.learned.noteTermBegin(tb.id, tb.term)
	}
	if r.maxTerm > w.ch.Term {
		w.fence(&walimpls.FencedError{Channel: w.ch.Name, Term: w.ch.Term, CurrentTerm: r.maxTerm})
		return w.reason
	}
	// The floor: every timetick in the log, and Options.TimeTickFloor
	// (what came before this log, in an earlier segment of a chain).
	floor := max(r.maxTT, w.opts.TimeTickFloor)
	alloc := w.opts.Allocator
	if alloc == nil {
		clock := hlc.New(nil)
		clock.Observe(floor)
		alloc = clock
	}
	w.ticks = newTimeticks(alloc, floor)
	if w.fencing {
		// Where the backend fences, no other writer's message can come
		// between this writer's appends, and its scanners can be released
		// without waiting for a watermark in the log.
		w.ticks.trackReleases()
		w.localRelease = true
	}
	if w.confirm {
		// Appends are confirmed by the tail reader: it reads on from the
		// term-begin at once. Where the backend fences, it starts with the
		// first scanner (ensureTail): a WAL nobody reads reads nothing back.
		s, err := readBackend(w.impl)(ctx, walimpls.ReadOption{Name: "wal-tail", DeliverPolicy: cursor.StartFrom(beginID)})
		if err != nil {
			return errors.Wrap(err, "start tail reader")
		}
		w.cache.startsAt(beginID, true)
		w.startTail(s)
	}
	// A first watermark releases to scanners whatever the previous owner
	// left unreleased, even if this owner never appends.
	w.marks = newWatermarker(w, w.opts.Clock, w.opts.TimeTickInterval, w.opts.WatermarkBytes)
	if _, err := w.marks.now(ctx); err != nil {
		return errors.Wrap(err, "first watermark")
	}
	return nil
}

// ParseID implements WAL.
func (w *wal) ParseID(s string) (message.ID, error) { return w.parseID(s) }

// ParseCheckpoint implements WAL.
func (w *wal) ParseCheckpoint(s string) (cursor.Checkpoint, error) {
	return cursor.ParseCheckpoint(s, w.parseID)
}

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
// tail cache still holds messages before it, which no scanner may
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

func (w *wal) Channel() Channel           { return w.ch }
func (w *wal) Available() <-chan struct{} { return w.available }

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
	w.cache.stopReleases()
	w.unavailable.Do(func() {
		w.reason = cause
		close(w.available)
		if errors.Is(cause, walimpls.ErrFenced) {
			w.m.fenced.Inc()
			w.log.Warn("wal fenced; appends fail from now on", "cause", cause)
		}
	})
}

func (w *wal) Read(ctx context.Context, opt ReadOption) (walimpls.Scanner, error) {
	return w.read(ctx, opt, false)
}

func (w *wal) ReadBatches(ctx context.Context, opt ReadOption) (walimpls.BatchScanner, error) {
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
	if _, tail := opt.DeliverPolicy.Tail(); tail {
		// A tail counts a backend's log entries, which are not the
		// adaptor's messages (parts, watermarks).
		return nil, errors.Wrapf(ErrInvalidOptions, "adaptor: read %s: %s is a backend's start", w.ch.Name, opt.DeliverPolicy)
	}
	if err := w.ensureTail(ctx); err != nil {
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
		cache:          w.cache,
		m:              w.m,
		budget:         w.opts.ScannerBufferBytes,
		localRelease:   w.localRelease,
		term:           w.ch.Term,
		termBefore:     w.learned.termBefore,
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
	// tail cache close and reads the backend again on its way out.
	w.scanners.StopAll(errors.Wrap(walimpls.ErrClosed, "wal closed"))
	w.cancel()
	if w.marks != nil {
		w.marks.stop()
	}
	w.wg.Wait()
	w.callbacks.Close()
	err := w.impl.Close()
	w.m.forget()
	w.log.Debug("wal closed")
	return err
}
