package adaptor

// Retries: a backend append retried on retryable errors with backoff
// (Options.Retry, on Options.Clock), keeping the records in order and
// telling a stored prefix, a certain refusal and an unknown outcome apart.

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

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
