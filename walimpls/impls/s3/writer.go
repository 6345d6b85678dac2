package s3

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Request states: a queued request is taken by a flush, cancelled by its
// context, or closed by the writer's end; whoever moves it out of queued
// answers it.
const (
	reqQueued int32 = iota
	reqTaken
	reqGone
)

// request is one batch handed to the writer: its records, as the pieces
// the object's body is made of (see wal.encode).
type request struct {
	pieces [][]byte
	inline [2][]byte // pieces of a batch of one message
	bytes  int       // the records' bytes
	count  int
	size   int // bytes reserved in the budget
	queued time.Time
	done   func([]message.ID, error)
	state  atomic.Int32
	// stopCtx stops watching the caller's context.
	stopCtx func() bool
}

// flush is one object: the requests it holds, at a slot.
type flush struct {
	slot    uint64
	reqs    []*request
	body    objectBody
	nonce   nonce
	records int
	start   time.Time
	err     error // the PUT's outcome
}

// writer is the group-commit flusher of a ReadWrite WAL (see the package
// doc, "The writer"). One goroutine, run, owns the queue, the slots and the
// flushes; appends add requests to pending and wake it on notify, then
// wait for their answer. (A channel send per request was a rendezvous with
// run per message: the appenders then waited on the scheduler, not on the
// store, and the flushes in flight were half the window.)
type writer struct {
	o      *Opener
	w      *wal
	epoch  uint64
	window uint64

	pendMu sync.Mutex
	// pending are the requests handed over since run last took them;
	// stopping refuses more once run's shutdown took the last.
	pending  []*request
	stopping bool
	notify   chan struct{} // one token: pending has requests
	// pendingSince is when the first of pending was handed over: the
	// queued time of all of them.
	pendingSince time.Time

	results chan *flush // PUTs done; room for every flush in flight
	hints   chan struct{}
	kill    chan error // a fence learnt elsewhere (Delete)
	stop    chan struct{}
	stopped chan struct{}
	budget  *budget
	// sticky is the error every later append fails with, once the writer
	// failed or was fenced.
	sticky atomic.Pointer[error]

	putCtx    context.Context
	putCancel context.CancelFunc
	wg        sync.WaitGroup // PUTs and hints in flight

	// Owned by run.
	queue        []*request
	queuedBytes  int
	queuedRecs   int
	nextSlot     uint64
	ackNext      uint64
	inflight     map[uint64]*flush
	finished     map[uint64]*flush
	failed       error
	failedFenced bool
	timer        clockwork.Timer
	timerOn      bool
	hintBusy     bool
}

func newWriter(o *Opener, w *wal, e epochEntry) *writer {
	buffered := o.m.buffered.WithLabelValues(w.ch.Name)
	wr := &writer{
		o: o, w: w, epoch: e.Epoch, window: e.window(),
		notify: make(chan struct{}, 1), results: make(chan *flush, e.window()), hints: make(chan struct{}, 1),
		kill: make(chan error, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		budget:   newBudget(o.cfg.MaxBufferedBytes, buffered.Set),
		inflight: map[uint64]*flush{}, finished: map[uint64]*flush{},
	}
	wr.putCtx, wr.putCancel = context.WithCancel(context.Background())
	w.hub.setOwn(e.Epoch)
	go wr.run()
	return wr
}

// failure returns the sticky error, nil while the writer works.
func (wr *writer) failure() error {
	if p := wr.sticky.Load(); p != nil {
		return *p
	}
	return nil
}

func (wr *writer) setSticky(err error) { wr.sticky.CompareAndSwap(nil, &err) }

// submit hands a batch over; done is called exactly once. It returns r
// once queued, nil when it was answered at once.
func (wr *writer) submit(ctx context.Context, r *request, done func([]message.ID, error)) *request {
	ch := wr.w.ch
	if err := wr.failure(); err != nil {
		done(nil, walimpls.MarkNotStored(err))
		return nil
	}
	if err := ctx.Err(); err != nil {
		done(nil, walimpls.MarkNotStored(errors.Wrapf(err, "s3: append to %s", ch)))
		return nil
	}
	reserved, err := wr.budget.acquire(ctx, wr.stop, r.bytes)
	if err != nil {
		if errors.Is(err, errStopped) {
			err = errors.Wrapf(walimpls.ErrClosed, "s3: append to %s", ch)
		} else {
			err = errors.Wrapf(err, "s3: append to %s: waiting for room in the buffer", ch)
		}
		done(nil, walimpls.MarkNotStored(err))
		return nil
	}
	r.size, r.done = reserved, done
	r.stopCtx = noWatch
	if ctx.Done() != nil { // a context that can end: watched while queued
		r.stopCtx = context.AfterFunc(ctx, func() { wr.cancel(r, ctx.Err()) })
	}
	wr.pendMu.Lock()
	if wr.stopping {
		wr.pendMu.Unlock()
		wr.answerUnsent(r, errors.Wrapf(walimpls.ErrClosed, "s3: append to %s", ch))
		return nil
	}
	// One reading of the clock per batch handed over (it was a twentieth
	// of the writer's CPU read per append): a later request of the batch
	// counts its wait from the first's, so its flush is due no later.
	if len(wr.pending) == 0 {
		wr.pendingSince = wr.o.clock.Now()
	}
	r.queued = wr.pendingSince
	wr.pending = append(wr.pending, r)
	wr.pendMu.Unlock()
	select {
	case wr.notify <- struct{}{}:
	default: // run is woken already
	}
	return r
}

// takePending moves the requests handed over into the queue; stopping
// refuses any after it (shutdown).
func (wr *writer) takePending(stopping bool) {
	wr.pendMu.Lock()
	rs := wr.pending
	wr.pending = nil
	wr.stopping = wr.stopping || stopping
	wr.pendMu.Unlock()
	for _, r := range rs {
		wr.queue = append(wr.queue, r)
		wr.queuedBytes += r.bytes
		wr.queuedRecs += r.count
	}
}

// cancel answers r with its context's error when it is still queued, and
// reports whether it did.
func (wr *writer) cancel(r *request, cause error) bool {
	if r == nil || !r.state.CompareAndSwap(reqQueued, reqGone) {
		return false
	}
	wr.budget.release(r.size)
	r.done(nil, walimpls.MarkNotStored(errors.Wrapf(cause, "s3: append to %s", wr.w.ch)))
	return true
}

// answerUnsent answers a request that was never sent with err (marked not
// stored), when it is still queued.
func (wr *writer) answerUnsent(r *request, err error) {
	if !r.state.CompareAndSwap(reqQueued, reqGone) {
		return
	}
	r.stopCtx()
	wr.budget.release(r.size)
	r.done(nil, walimpls.MarkNotStored(err))
}

// close stops the writer: queued appends fail with ErrClosed, flushes in
// flight are cut short and answered with what became of them.
func (wr *writer) close() {
	select {
	case <-wr.stop:
	default:
		close(wr.stop)
	}
	<-wr.stopped
}

// fence fails the writer with err (a Delete of its channel by its Opener).
func (wr *writer) fence(err error) {
	wr.setSticky(err)
	select {
	case wr.kill <- err:
	default:
	}
}

func (wr *writer) run() {
	defer close(wr.stopped)
	for {
		wr.startFlushes()
		var timerC <-chan time.Time
		if wr.timerOn {
			timerC = wr.timer.Chan()
		}
		select {
		case <-wr.notify:
			wr.takePending(false)
			if wr.failed != nil {
				wr.failQueued()
			}
		case f := <-wr.results:
			delete(wr.inflight, f.slot)
			wr.finished[f.slot] = f
			wr.acknowledge(false)
		case <-timerC:
			wr.timerOn = false
		case <-wr.hints:
			wr.hintBusy = false
		case err := <-wr.kill:
			// Flushes in flight may have landed before the fence: their
			// outcome stays unknown (fenced false).
			wr.fail(err, false)
		case <-wr.stop:
			wr.shutdown()
			return
		}
	}
}

// startFlushes starts the flushes that are due while the window has room,
// and arms the timer for the next one.
func (wr *writer) startFlushes() {
	cfg := &wr.o.cfg
	for wr.failed == nil && wr.nextSlot < wr.ackNext+wr.window && len(wr.inflight) < wr.o.cfg.MaxInflight {
		wr.dropCancelled()
		if len(wr.queue) == 0 {
			break
		}
		due := wr.queuedBytes >= cfg.FlushBytes || wr.queuedRecs >= cfg.FlushRecords ||
			wr.o.clock.Since(wr.queue[0].queued) >= cfg.FlushInterval
		if !due {
			// A timer armed earlier fires no later than this one would:
			// when it fires early, the loop comes back here.
			if !wr.timerOn {
				wait := cfg.FlushInterval - wr.o.clock.Since(wr.queue[0].queued)
				if wr.timer == nil {
					wr.timer = wr.o.clock.NewTimer(wait)
				} else {
					wr.timer.Reset(wait)
				}
				wr.timerOn = true
			}
			return
		}
		wr.startFlush()
	}
}

// dropCancelled takes the requests their callers cancelled off the head
// of the queue.
func (wr *writer) dropCancelled() {
	for len(wr.queue) > 0 && wr.queue[0].state.Load() == reqGone {
		r := wr.queue[0]
		wr.queue[0] = nil
		wr.queue = wr.queue[1:]
		wr.queuedBytes -= r.bytes
		wr.queuedRecs -= r.count
	}
}

// startFlush takes queued requests (whole, up to FlushBytes and
// FlushRecords, at least one) into an object at the next slot and PUTs it.
func (wr *writer) startFlush() {
	cfg := &wr.o.cfg
	f := &flush{slot: wr.nextSlot, start: wr.o.clock.Now()}
	_, _ = rand.Read(f.nonce[:])
	bytes := 0
	n := 0
	for n < len(wr.queue) {
		r := wr.queue[n]
		if len(f.reqs) > 0 && (bytes+r.bytes > cfg.FlushBytes || f.records+r.count > cfg.FlushRecords) {
			break
		}
		n++
		wr.queuedBytes -= r.bytes
		wr.queuedRecs -= r.count
		if !r.state.CompareAndSwap(reqQueued, reqTaken) {
			continue // cancelled
		}
		r.stopCtx()
		f.reqs = append(f.reqs, r)
		bytes += r.bytes
		f.records += r.count
	}
	clear(wr.queue[:n])
	wr.queue = wr.queue[n:]
	if len(f.reqs) == 0 {
		return
	}
	npieces := 0
	for _, r := range f.reqs {
		npieces += len(r.pieces)
	}
	pieces := make([][]byte, 0, npieces)
	for _, r := range f.reqs {
		pieces = append(pieces, r.pieces...)
	}
	f.body = newDataBody(objectHeader{kind: kindData, epoch: wr.epoch, term: wr.w.ch.Term, slot: f.slot,
		count: uint32(f.records), nonce: f.nonce}, pieces)
	wr.nextSlot++
	wr.inflight[f.slot] = f
	wr.wg.Add(1)
	go wr.put(f)
}

// put runs one flush's PUT; its outcome goes back to run.
func (wr *writer) put(f *flush) {
	defer wr.wg.Done()
	o := wr.o
	key := o.keys.slot(wr.w.ch.Name, wr.epoch, f.slot)
	meta := map[string]string{metaKind: "data", metaTerm: strconv.FormatInt(wr.w.ch.Term, 10),
		metaCount: strconv.Itoa(f.records), metaNonce: f.nonce.String()}
	body := f.body.reader(&o.bodyBufs)
	_, err := o.st.putBody(wr.putCtx, reqPut, key, body, int64(f.body.size), meta, putCond{createOnly: true})
	// The appenders may reuse their payloads once answered: no read of
	// them after this (see bodyReader).
	body.end()
	if errors.Is(err, errPrecondition) {
		err = wr.resolve412(key, f)
	} else if err != nil {
		err = errors.Wrapf(err, "s3: append to %s: put %s", wr.w.ch, key)
	}
	f.err = err
	wr.results <- f
}

// The failures of a PUT that met another's object. errSlotTaken: the slot
// holds another's object, so the flush is stored nowhere. errFencedAt:
// that object is a fence, so no reader ever reads this epoch at or after
// it (the epoch's end lies before it): no later flush is stored either.
var (
	errSlotTaken = errors.New("slot taken")
	errFencedAt  = errors.New("slot fenced")
)

// resolve412 decides what a 412 on a flush's create-only PUT means: its
// own earlier try landed (the same nonce: success), or the slot is
// another's (fenced).
func (wr *writer) resolve412(key string, f *flush) error {
	o := wr.o
	meta, err := o.st.head(wr.putCtx, key)
	if err != nil {
		return errors.Wrapf(err, "s3: append to %s: put %s: 412, and its HEAD failed", wr.w.ch, key)
	}
	info := parseSlotMeta(meta)
	if info.state == slotData && info.nonce == f.nonce.String() {
		o.m.preconditions.WithLabelValues("own_retry").Inc()
		o.log.Debug("a retried PUT met its own earlier try", "channel", wr.w.ch.Name, "term", wr.w.ch.Term, "epoch", wr.epoch, "slot", f.slot)
		return nil
	}
	o.m.preconditions.WithLabelValues("fenced").Inc()
	what, mark := "a fence", errFencedAt
	if info.state != slotFence {
		what, mark = "another writer's object", errSlotTaken
	}
	o.log.Info("fenced", "channel", wr.w.ch.Name, "term", wr.w.ch.Term, "epoch", wr.epoch, "slot", f.slot,
		"by", what, "fenceTerm", info.term, "deleted", info.deleted)
	return walimpls.MarkNotStored(fmt.Errorf("s3: append to %s: %s holds %s: %w: %w", wr.w.ch, key, what,
		fencedError(wr.w.ch, info.term, info.deleted), mark))
}

// acknowledge answers the finished flushes in slot order (see the package
// doc, "ordered acknowledgements"); closing answers what a Close cut short.
func (wr *writer) acknowledge(closing bool) {
	for {
		f, ok := wr.finished[wr.ackNext]
		if !ok {
			return
		}
		delete(wr.finished, wr.ackNext)
		wr.ackNext++
		switch {
		case wr.failed != nil:
			wr.answerFlush(f, wr.laterError(f))
		case f.err != nil:
			err := f.err
			if closing && wr.putCtx.Err() != nil && !errors.Is(err, errSlotTaken) && !errors.Is(err, errFencedAt) {
				err = fmt.Errorf("s3: append to %s: %w: %w", wr.w.ch, walimpls.ErrClosed, err)
			}
			// A slot taken by another's object stores this flush nowhere
			// (resolve412 marked it so); behind a fence, no later one.
			wr.fail(err, errors.Is(err, errFencedAt))
			wr.answerFlush(f, err)
		default:
			wr.ack(f)
		}
	}
}

// laterError is the error of a flush after a failed one.
func (wr *writer) laterError(f *flush) error {
	err := fmt.Errorf("s3: append to %s: slot %d follows a failed flush: %w", wr.w.ch, f.slot, wr.failed)
	if wr.failedFenced {
		// A fence or another's object precedes it: no reader ever
		// delivers it.
		return walimpls.MarkNotStored(err)
	}
	// It may have landed, and be read: whatever marks the first failure
	// carries, this one's outcome is unknown.
	return walimpls.MarkOutcomeUnknown(err)
}

// fail makes the writer sticky-failed with err; fenced says that the slot
// it failed at is another's. Queued requests fail, never sent.
func (wr *writer) fail(err error, fenced bool) {
	if wr.failed != nil {
		return
	}
	wr.failed, wr.failedFenced = err, fenced
	wr.setSticky(err)
	wr.w.hub.dropOwn(wr.epoch)
	if !fenced && !errors.Is(err, walimpls.ErrFenced) && !errors.Is(err, walimpls.ErrClosed) {
		wr.o.log.Warn("append failed: the WAL is done", "channel", wr.w.ch.Name, "term", wr.w.ch.Term, "epoch", wr.epoch, "err", err)
	}
	wr.failQueued()
}

func (wr *writer) failQueued() {
	for _, r := range wr.queue {
		wr.answerUnsent(r, wr.failed)
	}
	clear(wr.queue)
	wr.queue, wr.queuedBytes, wr.queuedRecs = wr.queue[:0], 0, 0
}

// answerFlush fails every request of f with err.
func (wr *writer) answerFlush(f *flush, err error) {
	for _, r := range f.reqs {
		wr.budget.release(r.size)
		r.done(nil, err)
	}
}

// ack acknowledges a flush whose PUT succeeded and whose predecessors were
// acknowledged: its appends get their IDs, the Opener's scanners its
// messages, and now and then the epoch a hint.
func (wr *writer) ack(f *flush) {
	o := wr.o
	o.m.flushed(f.body.size, f.records, f.start)
	// Decoding a flush costs as much as encoding it: done only for live
	// scanners, on the writer's goroutine, which acknowledges nothing
	// meanwhile.
	var obj *object
	if wr.w.hub.hasReaders() {
		obj, _ = decodeObject("", f.body.bytes(), wr.epoch, f.slot)
	}
	wr.w.hub.publish(wr.epoch, f.slot, obj)
	// The flush's room in the budget goes back at once: one wake-up of the
	// appenders waiting for it, not one per request.
	room := 0
	for _, r := range f.reqs {
		room += r.size
	}
	wr.budget.release(room)
	// One slice of IDs for the flush, each request answered with its part
	// (capped: an append to one never runs into the next).
	all := make([]message.ID, f.records)
	for i := range all {
		all[i] = pos{epoch: wr.epoch, slot: f.slot, index: uint32(i)}.id()
	}
	for _, r := range f.reqs {
		r.done(all[:r.count:r.count], nil)
		all = all[r.count:]
	}
	wr.w.acked.Store(f.slot + 1)
	if he := uint64(o.cfg.HintEvery); (f.slot+1)%he == 0 && !wr.hintBusy && wr.putCtx.Err() == nil {
		wr.hintBusy = true
		wr.wg.Add(1)
		go wr.hint(f.slot)
	}
}

// hint writes the epoch's hint: slot was acknowledged.
func (wr *writer) hint(slot uint64) {
	defer wr.wg.Done()
	key := wr.o.keys.hint(wr.w.ch.Name, wr.epoch)
	if _, err := wr.o.st.put(wr.putCtx, reqPut, key, []byte(strconv.FormatUint(slot, 10)), nil, putCond{}); err != nil {
		wr.o.log.Debug("hint not written", "channel", wr.w.ch.Name, "epoch", wr.epoch, "err", err)
	}
	wr.hints <- struct{}{}
}

// shutdown ends run: queued requests fail with ErrClosed, the PUTs in
// flight are cut short and each flush is answered with what became of it.
func (wr *writer) shutdown() {
	closed := errors.Wrapf(walimpls.ErrClosed, "s3: append to %s", wr.w.ch)
	wr.setSticky(walimpls.MarkNotStored(closed))
	defer wr.w.hub.dropOwn(wr.epoch)
	wr.takePending(true)
	for _, r := range wr.queue {
		wr.answerUnsent(r, closed)
	}
	clear(wr.queue)
	wr.queue = nil
	wr.putCancel()
	wr.wg.Wait()
	for len(wr.inflight) > 0 {
		f := <-wr.results
		delete(wr.inflight, f.slot)
		wr.finished[f.slot] = f
	}
	wr.acknowledge(true)
	if wr.timer != nil {
		wr.timer.Stop()
	}
	// Appends that raced the stop hold no budget: acquire refuses after
	// stop.
}

// errStopped is the budget's refusal once the writer stopped.
var errStopped = errors.New("writer stopped")

// noWatch is stopCtx of a request whose context never ends.
func noWatch() bool { return true }
