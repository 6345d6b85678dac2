package memory

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

var _ walimpls.AsyncAppender = (*wal)(nil)

// asyncReq is one batch handed to AppendBatchAsync.
type asyncReq struct {
	ctx  context.Context
	msgs []message.Message
	done func([]message.ID, error)
}

// asyncAppends queues the batches of AppendBatchAsync for one goroutine,
// started with the first and stopped by Close, that stores them one after
// the other with AppendBatch: in call order, as the contract asks.
type asyncAppends struct {
	queue   []asyncReq
	running bool          // the goroutine is running
	stopped chan struct{} // closed by the goroutine as it returns; nil until it starts
}

// AppendBatchAsync implements walimpls.AsyncAppender.
func (w *wal) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	if err := w.checkWrite(ctx, "append"); err != nil {
		done(nil, err)
		return
	}
	w.asyncMu.Lock()
	if w.closed.Load() {
		// Close may have stopped the goroutine already.
		w.asyncMu.Unlock()
		done(nil, walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "memory: append on %s", w.ch)))
		return
	}
	a := &w.async
	a.queue = append(a.queue, asyncReq{ctx: ctx, msgs: msgs, done: done})
	if !a.running {
		a.running = true
		if a.stopped == nil {
			a.stopped = make(chan struct{})
		}
		go w.runAsync()
	}
	w.asyncMu.Unlock()
}

// runAsync stores the queued batches in order until the queue is empty.
func (w *wal) runAsync() {
	for {
		w.asyncMu.Lock()
		a := &w.async
		if len(a.queue) == 0 {
			a.running = false
			close(a.stopped)
			a.stopped = nil
			w.asyncMu.Unlock()
			return
		}
		r := a.queue[0]
		a.queue[0] = asyncReq{}
		a.queue = a.queue[1:]
		w.asyncMu.Unlock()
		r.done(w.AppendBatch(r.ctx, r.msgs))
	}
}

// stopAsync waits for the batches in flight: once the WAL is closed,
// AppendBatch refuses each of them at once.
func (w *wal) stopAsync() {
	w.asyncMu.Lock()
	stopped := w.async.stopped
	w.asyncMu.Unlock()
	if stopped != nil {
		<-stopped
	}
}
