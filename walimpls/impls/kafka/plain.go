package kafka

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/walimpls"
)

// plainWriter appends with an idempotent, non-transactional producer:
// franz-go batches concurrent appends itself. It cannot be fenced.
type plainWriter struct {
	w  *wal
	cl *kgo.Client
}

func newPlainWriter(w *wal) (*plainWriter, error) {
	cfg := &w.o.cfg
	opts := append(w.o.baseOpts(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(int32(w.limit)),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
	)
	opts = append(opts, cfg.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("kafka: client: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	return &plainWriter{w: w, cl: cl}, nil
}

// appendBatch produces recs in slice order and waits for all of them. The
// client answers a partition's records in the order they were produced, so
// on a failure the records acknowledged before the first failed one are a
// prefix known to be stored; their offsets are returned with the error.
// The error leaves the rest's outcome unknown: when a record batch fails,
// the client fails every record it buffers for the partition with the same
// error, including batches already on their way to the broker, which may
// store them.
func (pw *plainWriter) appendBatch(ctx context.Context, recs []*kgo.Record, sizes []int) ([]int64, error) {
	type result struct {
		i   int
		err error
	}
	res := make(chan result, len(recs)) // callbacks never block, even after we return
	for i, r := range recs {
		pw.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { res <- result{i, err} })
	}
	answered := make([]bool, len(recs))
	errs := make([]error, len(recs))
	var waitErr error
wait:
	for range recs {
		select {
		case r := <-res:
			answered[r.i], errs[r.i] = true, r.err
		case <-ctx.Done():
			waitErr = ctx.Err() // the rest may be in flight
			break wait
		}
	}
	var offs []int64
	for i, r := range recs {
		if !answered[i] || errs[i] != nil {
			break
		}
		offs = append(offs, r.Offset)
	}
	p := len(offs)
	switch {
	case p == len(recs):
		return offs, nil
	case waitErr != nil || !answered[p]:
		return offs, waitErr
	}
	return offs, pw.failed(ctx, errs, sizes, p)
}

// appendBatchAsync produces recs in slice order and answers done once the
// client answered every record, as appendBatch would have returned. The
// client calls the promises of a partition in order, one at a time.
func (pw *plainWriter) appendBatchAsync(ctx context.Context, recs []*kgo.Record, sizes []int, done func([]int64, error)) {
	errs := make([]error, len(recs))
	var left atomic.Int64
	left.Store(int64(len(recs)))
	for i, r := range recs {
		pw.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			errs[i] = err // published to the last promise by the decrement
			if left.Dec() > 0 {
				return
			}
			var offs []int64
			for i, r := range recs {
				if errs[i] != nil {
					break
				}
				offs = append(offs, r.Offset)
			}
			if p := len(offs); p < len(recs) {
				done(offs, pw.failed(ctx, errs, sizes, p))
				return
			}
			done(offs, nil)
		})
	}
}

// largestTooLarge returns the index of the largest record whose error is a
// broker size refusal, -1 when there is none. The client fails every
// record of a refused record batch, and every record buffered after it,
// with the same error: the largest is the likeliest culprit.
func largestTooLarge(errs []error, sizes []int) int {
	at := -1
	for i, err := range errs {
		if isTooLarge(err) && (at < 0 || sizes[i] > sizes[at]) {
			at = i
		}
	}
	return at
}

// failed classifies the failure of a batch whose message p is the first
// not acknowledged; errs holds every message's error (nil when not
// answered).
func (pw *plainWriter) failed(ctx context.Context, errs []error, sizes []int, p int) error {
	w := pw.w
	err, n := errs[p], len(errs)
	switch {
	case isTooLarge(err):
		// The record batch the broker refused may hold other messages
		// too, or be another one produced before it, and records after it
		// may be stored: the client fails every record it buffers with
		// the refused batch's error.
		i := p + largestTooLarge(errs[p:], sizes[p:])
		return walimpls.MarkOutcomeUnknown(errors.Wrapf(w.tooLarge(sizes[i], i, n),
			"the broker refused a record batch from message %d on as too large", p))
	case errors.Is(err, kgo.ErrClientClosed):
		return w.closedErr()
	case ctx.Err() != nil:
		return ctx.Err()
	}
	if n > 1 {
		return errors.Wrapf(err, "kafka: append to channel %q: message %d of %d", w.ch.Name, p, n)
	}
	return errors.Wrapf(err, "kafka: append to channel %q", w.ch.Name)
}

func (pw *plainWriter) close() { pw.cl.Close() }
