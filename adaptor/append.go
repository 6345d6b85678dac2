package adaptor

// The writer: an append takes an in-flight token, waits while too much is
// unreleased (watermarker.waitFor), takes its timeticks (timeticks), is
// stamped and split (prepare), stored with retries (retry.go), confirmed
// where the backend cannot fence (tail.go), and ends its timeticks with its
// outcome (finish), which may move the local release point. Append and
// AppendBatch run in the caller's goroutine; AppendAsync hands the batch to
// an asynchronous backend, or to a goroutine of its own, and answers on the
// callback goroutine. The writer holds no lock of its own.

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

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
	w.acked()
	return r, nil
}

// acked notes an acknowledged append: the first calls
// Options.OnFirstAppend.
func (w *wal) acked() {
	if w.opts.OnFirstAppend != nil && !w.firstAcked.Load() && w.firstAcked.CompareAndSwap(false, true) {
		w.opts.OnFirstAppend(time.Since(w.opened.Ready))
	}
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
			if err == nil {
				w.acked()
			}
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
	if len(res) > 0 {
		w.acked()
	}
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
	w.cache.offerRelease(tt, need)
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
	if err := w.marks.waitFor(ctx); err != nil {
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
	w.marks.noteWritten(p.bytes)
	return res, nil
}

// firstCopies points each result at the copy readers deliver. After an
// attempt of unknown outcome, the retry that succeeded may have stored a
// second copy: readers deliver the first (same timetick, lower ID, since
// one writer's appends are stored in order) and drop the other. It is
// found in the tail cache once the tail reader has read last, the
// retry's last record; when the buffer no longer holds that stretch of the
// log (or ctx ends first) the results keep the retry's IDs.
func (w *wal) firstCopies(ctx context.Context, last message.ID, res []AppendResult) {
	for {
		_, found, behind, closed := w.cache.locate(last)
		if found {
			break
		}
		if closed || !behind {
			return
		}
		wait := w.cache.waitChanged()
		if _, found, behind, _ := w.cache.locate(last); found || !behind {
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
		if id, ok := w.cache.firstWithTimeTick(res[i].ID, res[i].TimeTick); ok {
			res[i].ID = id
		}
	}
}
