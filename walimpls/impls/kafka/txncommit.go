package kafka

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

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
