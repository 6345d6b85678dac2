package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
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

// maxTxnRetries bounds how often one group is written again after its
// transaction failed before the commit (see commitAttempt).
const maxTxnRetries = 2

// sendStage says how far a failed group got, for how its appends are
// answered.
type sendStage int

const (
	// sentNothing: no record of the group reached the broker, in this
	// attempt or an earlier one. Its appends certainly stored nothing.
	sentNothing sendStage = iota
	// sentRecords: records may have reached the broker (in this attempt or
	// an aborted earlier one), but no commit was sent.
	sentRecords
	// sentCommit: the commit was sent; the outcome is unknown.
	sentCommit
)

// commitAttempt writes the records of live, request after request and each
// request's records in slice order, as one transaction: they all commit or
// none does, and every request is answered alike. Owned by run.
func (tw *txnWriter) commitAttempt(live []*appendReq, attempt int) {
	unsent := sentNothing
	if attempt > 0 {
		unsent = sentRecords // an earlier attempt produced (and aborted)
	}
	if err := tw.w.fencedErr(); err != nil {
		tw.dropClient() // a Truncate found the fence
		tw.fail(live, err, unsent, nil)
		return
	}
	if tw.cl == nil {
		cl, err := tw.acquire(tw.ctx, true)
		if err != nil {
			tw.fail(live, err, unsent, nil)
			return
		}
		tw.cl = cl
	}
	if err := tw.cl.BeginTransaction(); err != nil {
		tw.dropClient()
		tw.fail(live, err, unsent, nil)
		return
	}
	// One goroutine produces every record, in order: the client keeps the
	// partition's records in the order they were produced.
	n := 0
	for _, r := range live {
		n += len(r.recs)
	}
	errs := make([]error, n)
	perReq := make([][]error, len(live))
	var wg sync.WaitGroup
	wg.Add(n)
	next := 0
	for k, r := range live {
		perReq[k] = errs[next : next+len(r.recs)]
		for _, rec := range r.recs {
			i := next
			next++
			tw.cl.Produce(tw.ctx, rec, func(_ *kgo.Record, err error) {
				errs[i] = err
				wg.Done()
			})
		}
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	stage := sentRecords
	if first == nil {
		stage = sentCommit
		if first = tw.commitOpenTxn(); first == nil {
			for _, r := range live {
				offs := make([]int64, len(r.recs))
				for i, rec := range r.recs {
					offs[i] = rec.Offset
				}
				r.answer(appendRes{offs: offs})
			}
			return
		}
	}
	if stage == sentRecords && attempt < maxTxnRetries && producerStateLost(first) && tw.abortForRetry() {
		// The transaction never committed and is aborted: read_committed
		// readers never see its records, so writing the group again on a
		// fresh producer cannot duplicate anything.
		tw.w.log.Debug("transaction aborted after a producer-state error; writing the group again", "err", first)
		tw.commitAttempt(live, attempt+1)
		return
	}
	tw.fail(live, first, stage, perReq)
}

// commitOpenTxn commits the open transaction, whose records were all produced.
//
// franz-go v1.22.3 sometimes returns nil from EndTransaction(TryCommit)
// without writing any EndTxn request (seen on the first transaction of a
// fresh client, under load): its record of which partitions joined the
// transaction goes wrong. The records then sit in a transaction the broker aborts when
// it times out, after the WAL acknowledged them, and read_committed readers
// stall behind it until then. The hook counts the EndTxn requests the
// client writes; when the commit wrote none, commitOpenTxn sends the EndTxn
// itself and replaces the client. Owned by run.
func (tw *txnWriter) commitOpenTxn() error {
	before := tw.endTxnWrites.Load()
	if err := tw.cl.EndTransaction(tw.ctx, kgo.TryCommit); err != nil {
		return err
	}
	if tw.endTxnWrites.Load() != before {
		return nil
	}
	tw.w.log.Warn("the Kafka client skipped a commit; sending EndTxn itself and replacing the client")
	tw.w.o.m.commitRepairs.Inc()
	// The client's view of which partitions are in a transaction is wrong
	// now, and a later transaction would inherit it (a produce without
	// AddPartitionsToTxn); the next batch acquires a new client.
	defer tw.dropClient()
	id, epoch, err := tw.cl.ProducerID(tw.ctx)
	if err != nil {
		return errors.Wrap(err, "kafka: commit skipped by the client: producer id")
	}
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = tw.w.o.cfg.transactionalID(tw.w.ch.Name)
	req.ProducerID, req.ProducerEpoch, req.Commit = id, epoch, true
	resp, err := req.RequestWith(tw.ctx, tw.cl)
	if err != nil {
		return errors.Wrap(err, "kafka: commit skipped by the client: EndTxn")
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return errors.Wrap(err, "kafka: commit skipped by the client: EndTxn")
	}
	return nil
}

// producerStateLost reports produce errors after which the broker no longer
// accepts the producer's sequence (kfake and brokers answer them when a
// transaction's first batch races the previous transaction's end): the
// transaction is lost, the producer is not fenced.
func producerStateLost(err error) bool {
	return errors.Is(err, kerr.OutOfOrderSequenceNumber) || errors.Is(err, kerr.UnknownProducerID)
}

// abortForRetry aborts the open transaction and drops the client, if this
// writer's claim still wins; it reports whether the batch may be written
// again. Owned by run.
func (tw *txnWriter) abortForRetry() bool {
	w := tw.w
	if tw.ctx.Err() != nil || tw.cl == nil {
		return false
	}
	if err := w.checkWinner(tw.ctx); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(tw.ctx, w.o.cfg.RequestTimeout)
	err := tw.cl.EndTransaction(ctx, kgo.TryAbort)
	cancel()
	tw.dropClient()
	return err == nil
}

// fail answers every request of a failed group and drops the client. The
// claims decide first (claimown.AfterFailedSend): a writer whose claim no
// longer wins is fenced for good and leaves the transaction alone (the
// winner's producer initialisation aborted it); when the claims cannot be
// read, the group fails with the cause and the check's error. A winner
// aborts the transaction, so that readers are not held up until it times
// out, and drops the client:
// franz-go may have re-initialised the producer id while failing or
// aborting, and only a producer acquired after a claim check may append.
// The next group acquires a new one.
//
// A fencing error for a writer whose claim still wins comes from a
// concurrent open of a lower term that lost its claim check and gives up:
// the group fails with a retryable error and the writer goes on.
//
// A group of which nothing reached the broker (stage sentNothing) is
// answered with errors marked walimpls.MarkNotStored; every other failure
// leaves the outcome unknown, except a broker size refusal: the
// transaction never committed, so a request with a record the client
// failed as too large gets a TooLargeError naming the largest (see
// largestTooLarge), and the others a retryable error. errs holds each
// request's produce errors, nil when nothing was produced.
func (tw *txnWriter) fail(group []*appendReq, cause error, stage sendStage, errs [][]error) {
	w := tw.w
	answer := func(err error) error {
		if stage == sentNothing {
			return walimpls.MarkNotStored(err)
		}
		return err
	}
	if tw.ctx.Err() != nil {
		tw.dropClient()
		reply(group, answer(w.closedErr()))
		return
	}
	if err := w.fencedErr(); err != nil {
		// Fenced for good already (a Truncate's claim check, a Delete
		// through this opener): that is the answer, whatever the cause.
		tw.dropClient()
		reply(group, answer(err))
		return
	}
	if errors.Is(cause, walimpls.ErrFenced) {
		reply(group, answer(tw.setFenced(cause)))
		return
	}
	switch verdict, err := claimown.AfterFailedSend(cause, w.checkWinner(tw.ctx)); verdict {
	case claimown.Beaten:
		reply(group, answer(tw.setFenced(err)))
		return
	case claimown.CheckFailed:
		tw.dropClient()
		reply(group, answer(errors.Wrapf(err, "kafka: append to channel %q", w.ch.Name)))
		return
	}
	if tw.cl != nil && !isFenced(cause) {
		ctx, cancel := context.WithTimeout(tw.ctx, w.o.cfg.RequestTimeout)
		_ = tw.cl.EndTransaction(ctx, kgo.TryAbort)
		cancel()
	}
	tw.dropClient()
	switch {
	case isTooLarge(cause) && errs != nil:
		for k, r := range group {
			if i := largestTooLarge(errs[k], r.sizes); i >= 0 {
				r.answer(appendRes{err: w.tooLarge(r.sizes[i], i, len(r.recs))})
				continue
			}
			r.answer(appendRes{err: errors.Wrapf(cause, "kafka: append to channel %q: transaction aborted: another append in it was too large for the broker", w.ch.Name)})
		}
	case isFenced(cause):
		w.log.Warn("producer fenced by a concurrent open that lost the term claim; re-acquiring", "err", cause)
		reply(group, answer(errors.Wrapf(cause, "kafka: append to channel %q: producer fenced by a lower term, re-acquired", w.ch.Name)))
	case stage == sentCommit:
		reply(group, errors.Wrapf(cause, "kafka: append to channel %q: commit outcome unknown", w.ch.Name))
	default:
		reply(group, answer(errors.Wrapf(cause, "kafka: append to channel %q", w.ch.Name)))
	}
}

// setFenced records the WAL's fence and drops the client; it returns the
// recorded fence. Owned by run.
func (tw *txnWriter) setFenced(err error) error {
	err = tw.w.setFenced(err)
	tw.dropClient()
	return err
}

// dropClient closes the client; the next batch acquires a new one. Owned
// by run.
func (tw *txnWriter) dropClient() {
	if tw.cl != nil {
		tw.cl.Close()
		tw.cl = nil
	}
}

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
