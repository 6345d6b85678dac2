package memory

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

var _ walimpls.AsyncAppender = (*wal)(nil)

// AppendBatchAsync implements walimpls.AsyncAppender: the batch queues
// for the WAL's run queue, which stores the batches one after the other
// with AppendBatch: in call order, as the contract asks.
func (w *wal) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	if err := w.checkWrite(ctx, "append"); err != nil {
		done(nil, err)
		return
	}
	w.asyncMu.Lock()
	if w.asyncClosed {
		w.asyncMu.Unlock()
		done(nil, walimpls.MarkNotStored(errors.Wrapf(walimpls.ErrClosed, "memory: append on %s", w.ch)))
		return
	}
	w.appends.Post(func() { done(w.AppendBatch(ctx, msgs)) })
	w.asyncMu.Unlock()
}

// stopAsync closes the queue once the batches in it are stored, which
// the closed WAL's AppendBatch refuses at once; no batch queues after it.
func (w *wal) stopAsync() {
	w.asyncMu.Lock()
	w.asyncClosed = true
	w.asyncMu.Unlock()
	w.appends.Close()
}
