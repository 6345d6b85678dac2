package adaptor

// The watermark writer: a watermarker owns when and how a WAL's watermarks
// are written. It holds no goroutine while the channel is idle: the first
// append after a watermark arms a timer (Options.Clock's AfterFunc) for
// TimeTickInterval, and the timer's goroutine writes the watermark and
// ends, arming the timer again only if the channel was written meanwhile.
// An append that brings WatermarkBytes unreleased kicks a write at once.
// Sync and Tail write one in the caller's goroutine.

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// watermarker writes the watermarks of one read-write WAL.
type watermarker struct {
	w        *wal
	clock    clockwork.Clock
	interval time.Duration
	early    int64 // WatermarkBytes: a watermark is kicked at once beyond it

	// writeMu orders the writes: watermarks are written one at a time, in
	// the order of their timeticks.
	writeMu sync.Mutex
	last    message.ID // the last one written; guarded by writeMu

	dirty      atomic.Bool  // appended to since the last write began
	dirtyBytes atomic.Int64 // appended and not yet covered by a written watermark

	// mu guards the schedule and written.
	mu      sync.Mutex
	timer   clockwork.Timer // armed for the next periodic write; nil when none is
	running bool            // a scheduled write's goroutine is running
	again   bool            // kicked while running: it writes once more
	stopped bool
	// written is closed and replaced after each watermark, waking appends
	// held back by waitFor.
	written chan struct{}
	wg      sync.WaitGroup // a scheduled write's goroutine
}

func newWatermarker(w *wal, clock clockwork.Clock, interval time.Duration, early int) *watermarker {
	return &watermarker{w: w, clock: clock, interval: interval, early: int64(early), written: make(chan struct{})}
}

// noteWritten marks the channel written to, arms the periodic write, and
// kicks one at once once WatermarkBytes are unreleased.
func (k *watermarker) noteWritten(size int) {
	k.dirty.Store(true)
	if k.dirtyBytes.Add(int64(size)) >= k.early {
		k.kick()
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped && !k.running && k.timer == nil {
		k.timer = k.clock.AfterFunc(k.interval, k.fire)
	}
}

// kick writes a watermark as soon as possible: now, or right after the one
// being written.
func (k *watermarker) kick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.stopped:
	case k.running:
		k.again = true
	case k.timer != nil && !k.timer.Stop():
		// The timer fired: fire is about to run the write.
		k.again = true
	default:
		k.timer = nil
		k.startLocked()
	}
}

// fire is the periodic timer's function.
func (k *watermarker) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timer = nil
	if k.stopped || k.running {
		return
	}
	k.startLocked()
}

// startLocked starts a scheduled write's goroutine. Called with mu held
// and no write running.
func (k *watermarker) startLocked() {
	k.running, k.again = true, false
	k.wg.Add(1) // before stop's Wait: both under mu, stopped not yet set
	go k.run()
}

// run writes watermarks while kicked, then arms the timer again if the
// channel was written to meanwhile (or the write failed) and ends.
func (k *watermarker) run() {
	defer k.wg.Done()
	w := k.w
	for {
		// dirtyBytes as well: an append held back by waitFor must never
		// wait for a watermark this write decided to skip.
		if k.dirty.Swap(false) || k.dirtyBytes.Load() > 0 {
			if _, err := k.write(w.ctx); err != nil {
				k.dirty.Store(true)
				if w.ctx.Err() == nil && w.usable() == nil {
					w.log.Warn("watermark failed; retrying at the next tick", "error", err)
				}
			}
		}
		k.mu.Lock()
		if k.again && !k.stopped && w.ctx.Err() == nil {
			k.again = false
			k.mu.Unlock()
			continue
		}
		k.running = false
		if !k.stopped && w.ctx.Err() == nil && (k.dirty.Load() || k.dirtyBytes.Load() > 0) {
			k.timer = k.clock.AfterFunc(k.interval, k.fire)
		}
		k.mu.Unlock()
		return
	}
}

// stop ends the schedule and waits for a write in flight (the WAL's
// context, which ends first, cuts it short).
func (k *watermarker) stop() {
	k.mu.Lock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// waitFor holds an append back while twice WatermarkBytes were appended
// since the last watermark. The kick alone does not bound the gap: the
// write is one goroutine among many busy appenders and can be scheduled
// late, and every scanner must hold all the messages between two
// watermarks in its reorder buffer (a gap above ScannerBufferBytes fails
// each scanner of that log with ErrScannerBufferFull).
func (k *watermarker) waitFor(ctx context.Context) error {
	w := k.w
	limit := 2 * k.early
	for k.dirtyBytes.Load() >= limit {
		k.mu.Lock()
		wait := k.written
		k.mu.Unlock()
		// Look again after taking the channel, so a watermark in between
		// is not missed.
		if k.dirtyBytes.Load() < limit {
			return nil
		}
		k.kick()
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

// now writes a watermark in the caller's goroutine (Sync, Tail, Open).
func (k *watermarker) now(ctx context.Context) (cursor.Checkpoint, error) {
	k.dirty.Store(false)
	return k.write(ctx)
}

// write appends a timetick message W once every append with a timetick
// below W is acknowledged, and returns the checkpoint after it: its
// timetick, and the position of the watermark before it (every message
// with a higher timetick began after that one was stored, so it lies
// after it).
func (k *watermarker) write(ctx context.Context) (cursor.Checkpoint, error) {
	w := k.w
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	// What is counted before wm is allocated began before it, so wm covers
	// it. Appends counted later stay counted, even those below wm: an
	// over-count only brings the next watermark sooner, while an
	// under-count would let scanners' reorder buffers overflow.
	covered := k.dirtyBytes.Load()
	wm, err := w.ticks.watermark(ctx)
	if err != nil {
		return cursor.Checkpoint{}, err
	}
	msg := message.Message{}.WithKind(message.KindTimeTick).WithTerm(w.ch.Term).WithTimeTick(wm)
	id, err := w.appendRetry(ctx, msg)
	if err != nil {
		return cursor.Checkpoint{}, err
	}
	before := k.last
	if before.IsZero() {
		before = w.beginID
	}
	k.last = id
	if w.ticks.covered(wm, id) {
		w.offerRelease()
	}
	k.dirtyBytes.Sub(covered)
	w.m.watermarks.Inc()
	k.mu.Lock()
	close(k.written)
	k.written = make(chan struct{})
	k.mu.Unlock()
	return cursor.Checkpoint{Position: before, TimeTick: wm}, nil
}

// lastWritten is the position of the last watermark written.
func (k *watermarker) lastWritten() message.ID {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	return k.last
}

// Sync implements WAL.
func (w *wal) Sync(ctx context.Context) error {
	if w.opts.ReadOnly {
		return errors.Wrap(walimpls.ErrReadOnly, "adaptor: sync")
	}
	if err := w.usable(); err != nil {
		return err
	}
	_, err := w.marks.now(ctx)
	return err
}

// Tail implements WAL.
func (w *wal) Tail(ctx context.Context) (cursor.Checkpoint, error) {
	if w.opts.ReadOnly {
		return cursor.Checkpoint{}, errors.Wrap(walimpls.ErrReadOnly, "adaptor: tail: a read-only WAL writes no watermark")
	}
	if err := w.usable(); err != nil {
		return cursor.Checkpoint{}, err
	}
	return w.marks.now(ctx)
}
