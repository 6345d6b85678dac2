package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

// appender stores records in the log partition of a channel.
type appender interface {
	// appendBatch stores recs in slice order and returns their offsets.
	// sizes are the Message.Size of each record, for TooLargeError. On a
	// failure it returns the offsets of a prefix of recs known to be stored
	// (always none with transactions) with the error.
	appendBatch(ctx context.Context, recs []*kgo.Record, sizes []int) ([]int64, error)
	// appendBatchAsync is appendBatch answering through done, exactly once
	// (see walimpls.AsyncAppender), instead of waiting.
	appendBatchAsync(ctx context.Context, recs []*kgo.Record, sizes []int, done func([]int64, error))
	// close stops the appender and waits for it; pending appends fail.
	close()
}

// appendReq is one Append or AppendBatch queued for the transactional
// writer. It is never split: all of its records go into one transaction.
type appendReq struct {
	ctx   context.Context
	recs  []*kgo.Record
	sizes []int // Message.Size of each record, for TooLargeError
	bytes int   // the sum of sizes
	// answer is called exactly once with the outcome: it hands it to the
	// waiting caller (appendBatch) or to its callback (appendBatchAsync).
	answer func(appendRes)
}

type appendRes struct {
	offs []int64
	err  error
}

// txnWriter coalesces concurrent appends into transactions. One goroutine
// (run) owns the transactional client and everything below "owned by run".
type txnWriter struct {
	w *wal
	// box queues the appends for run, which answers every request it
	// takes before it returns.
	box *claimown.Mailbox[*appendReq, appendRes]
	ctx context.Context // box.Context(): cancelled by close, aborts the client calls in flight

	// endTxnWrites counts the EndTxn requests the client wrote (see
	// commitAttempt).
	endTxnWrites atomic.Int64

	// owned by run
	cl *kgo.Client
}

// countEndTxn is a franz-go hook that counts written EndTxn requests.
type countEndTxn struct{ n *atomic.Int64 }

func (h countEndTxn) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.EndTxn) && err == nil {
		h.n.Add(1)
	}
}

// newTxnWriter fences lower terms and starts the writer: it creates the
// transactional client, makes it initialise its producer id (which bumps the
// epoch of the transactional id and aborts any transaction of an older
// producer), and then checks that the caller's claim still wins.
func newTxnWriter(ctx context.Context, w *wal) (*txnWriter, error) {
	tw := &txnWriter{
		w:   w,
		box: claimown.NewMailbox[*appendReq, appendRes](w.o.cfg.MaxBatchRecords, w.closedErr),
	}
	// Requests the loop never took stored nothing.
	tw.box.SetOrphans(func(r *appendReq) { r.answer(appendRes{err: walimpls.MarkNotStored(w.closedErr())}) })
	tw.ctx = tw.box.Context()
	cl, err := tw.acquire(ctx, false)
	if err != nil {
		tw.box.Close()
		return nil, err
	}
	tw.cl = cl
	tw.box.Go(tw.run)
	return tw, nil
}

func (tw *txnWriter) newClient() (*kgo.Client, error) {
	w := tw.w
	cfg := &w.o.cfg
	opts := append(w.o.txnOpts(w.ch.Name),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(int32(w.limit)),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
		kgo.WithHooks(countEndTxn{&tw.endTxnWrites}),
	)
	opts = append(opts, cfg.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("kafka: client: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	return cl, nil
}

// txnOpts are the options of every client that initialises the producer id
// of channel name's transactional id: a writer's, and the one Delete fences
// the writers with.
func (o *Opener) txnOpts(name string) []kgo.Opt {
	return append(o.baseOpts(),
		kgo.TransactionalID(o.cfg.transactionalID(name)),
		kgo.TransactionTimeout(o.cfg.TransactionTimeout),
		kgo.MaxVersions(pre890p2Versions()),
	)
}

// pre890p2Versions caps a transactional client's request versions below
// KIP-890 part 2 (Produce v12, EndTxn v5, TxnOffsetCommit v5), so that
// franz-go adds the partition to the transaction with AddPartitionsToTxn
// before it produces.
//
// Why: on the part-2 path franz-go v1.22.3 marks a partition as added to
// the transaction only when a produce response arrives, and EndTransaction
// decides from that mark whether anything was produced. We saw it miss the
// mark of a produce that had succeeded (the first transaction of a fresh
// client, under load): it then logged "no produce succeeded in this
// transaction", ended the transaction with an abort, and returned nil to
// TryCommit. The WAL acknowledged a record that read_committed readers never
// see. On the old path the mark is set before the request is sent, so a
// commit is never silently turned into an abort. The cost is one
// AddPartitionsToTxn round trip per transaction (see the package doc).
func pre890p2Versions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	return v
}

// acquire returns a transactional client whose producer id is initialised
// after this WAL's claim was written, or a FencedError when another claim
// wins (claimown.Acquire). With precheck it first makes sure this WAL's
// claim wins, so that a stale writer does not fence the owner.
func (tw *txnWriter) acquire(ctx context.Context, precheck bool) (*kgo.Client, error) {
	w := tw.w
	steps := claimown.Steps[*kgo.Client]{
		Take: func(ctx context.Context) (*kgo.Client, error) {
			cl, err := tw.newClient()
			if err != nil {
				return nil, err
			}
			if _, _, err := cl.ProducerID(ctx); err != nil {
				cl.Close()
				return nil, errors.Wrapf(err, "kafka: init producer id of channel %q", w.ch.Name)
			}
			return cl, nil
		},
		Check:   w.checkWinner,
		Release: (*kgo.Client).Close,
	}
	if precheck {
		steps.Precheck = w.checkWinner // never fence the winner of the claims
	}
	return claimown.Acquire(ctx, steps)
}

// appendBatch queues recs as one request and waits for its transaction.
// The WAL has checked the fence, the sizes and ctx.
func (tw *txnWriter) appendBatch(ctx context.Context, recs []*kgo.Record, sizes []int) ([]int64, error) {
	res := make(chan appendRes, 1)
	req := newAppendReq(ctx, recs, sizes, func(r appendRes) { res <- r })
	r, err := tw.box.Submit(ctx, req, res)
	if err != nil {
		return nil, err
	}
	return r.offs, r.err
}

// appendBatchAsync queues recs as one request, whose transaction answers
// done. The WAL has checked the fence, the sizes and ctx.
func (tw *txnWriter) appendBatchAsync(ctx context.Context, recs []*kgo.Record, sizes []int, done func([]int64, error)) {
	req := newAppendReq(ctx, recs, sizes, func(r appendRes) { done(r.offs, r.err) })
	if err := tw.box.Post(ctx, req); err != nil {
		done(nil, err)
	}
}

func newAppendReq(ctx context.Context, recs []*kgo.Record, sizes []int, answer func(appendRes)) *appendReq {
	req := &appendReq{ctx: ctx, recs: recs, sizes: sizes, answer: answer}
	for _, n := range sizes {
		req.bytes += n
	}
	return req
}

func (tw *txnWriter) close() { tw.box.Close() }

// run takes the queued requests whole and in order into transactions: a
// transaction holds requests while their records and bytes stay within
// MaxBatchRecords and MaxBatchBytes; a request that would exceed them is
// held for the next one, and a request that exceeds them alone gets a
// transaction of its own. No request is ever split.
func (tw *txnWriter) run() {
	defer func() {
		if tw.cl != nil {
			tw.cl.Close()
		}
	}()
	maxRecords, maxBytes := tw.w.o.cfg.MaxBatchRecords, tw.w.o.cfg.MaxBatchBytes
	var (
		group []*appendReq
		held  *appendReq // taken, but left for the next transaction
	)
	for {
		group = group[:0]
		if held == nil {
			select {
			case <-tw.box.Stopping():
				tw.failPending(nil)
				return
			case r := <-tw.box.Requests():
				held = r
			}
		} else {
			select {
			case <-tw.box.Stopping():
				tw.failPending(held)
				return
			default:
			}
		}
		group = append(group, held)
		records, bytes := len(held.recs), held.bytes
		held = nil
	gather:
		for records < maxRecords && bytes < maxBytes {
			select {
			case r := <-tw.box.Requests():
				if records+len(r.recs) > maxRecords || bytes+r.bytes > maxBytes {
					held = r
					break gather
				}
				group = append(group, r)
				records += len(r.recs)
				bytes += r.bytes
			default:
				break gather
			}
		}
		tw.commit(group)
	}
}

// failPending answers held and every queued request: the WAL closed before
// any of their records was produced. Owned by run.
func (tw *txnWriter) failPending(held *appendReq) {
	err := walimpls.MarkNotStored(tw.w.closedErr())
	if held != nil {
		held.answer(appendRes{err: err})
	}
	tw.box.Drain(func(r *appendReq) { r.answer(appendRes{err: err}) })
}

func reply(group []*appendReq, err error) {
	for _, r := range group {
		r.answer(appendRes{err: err})
	}
}

// commit writes group as one transaction. Owned by run.
func (tw *txnWriter) commit(group []*appendReq) {
	live := group[:0:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.answer(appendRes{err: walimpls.MarkNotStored(err)}) // the caller is gone: never sent
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	tw.commitAttempt(live, 0)
}

// dropClient closes the client; the next batch acquires a new one. Owned
// by run.
func (tw *txnWriter) dropClient() {
	if tw.cl != nil {
		tw.cl.Close()
		tw.cl = nil
	}
}
