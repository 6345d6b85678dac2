package pulsar

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

// answer records one message's result and answers its request once it
// is settled. Owned by run.
func (wr *writer) answer(res sendResult) {
	r := res.req
	if _, ok := wr.outstanding[r]; !ok || res.gen != wr.gen {
		return // answered when its producer was retired
	}
	err := res.err
	if err != nil && isFencedErr(err) && wr.ctx.Err() == nil {
		wr.retire(wr.decideFenced(err))
		return
	}
	wr.inflight--
	if err == nil {
		r.st.storedAt(res.idx, fromPulsar(res.id))
	} else {
		r.st.failedAt(res.idx, wr.sendErr(r, res.idx, err))
		if len(wr.queue) > 0 && wr.queue[0] == r {
			wr.stopHead(walimpls.MarkNotStored(errBatchCut)) // settles r if it can
			return
		}
	}
	wr.settle(r)
}

// sendErr maps the client's error for r.msgs[i].
func (wr *writer) sendErr(r *appendReq, i int, err error) error {
	which := ""
	if len(r.msgs) > 1 {
		which = fmt.Sprintf(": message %d of %d", i, len(r.msgs))
	}
	switch {
	case isTooLarge(err):
		// Refused inside SendAsync: nothing of r after it was handed over.
		return errors.Wrapf(&walimpls.TooLargeError{Size: r.sizes[i], Limit: wr.w.declared},
			"pulsar: append to channel %q%s", wr.w.ch.Name, which)
	case wr.ctx.Err() != nil:
		return wr.w.closedErr()
	default:
		return errors.Wrapf(err, "pulsar: append to channel %q%s", wr.w.ch.Name, which)
	}
}

// settle answers r if every message it handed over has its result and
// nothing more of it will be. Owned by run.
func (wr *writer) settle(r *appendReq) {
	if !r.st.settled() {
		return
	}
	delete(wr.outstanding, r)
	ids, err := r.st.outcome()
	r.answer(appendRes{ids: ids, err: err})
}

// retire closes the producer and answers every outstanding request: the
// results it still awaited fail with err. Owned by run.
func (wr *writer) retire(err error) {
	wr.dropProducer()
	if len(wr.queue) > 0 && wr.queue[0].st.sent > 0 {
		wr.popHead() // outstanding: answered below
	}
	for r := range wr.outstanding {
		r.st.abandon(err)
		wr.settle(r)
	}
	clear(wr.outstanding)
	wr.inflight = 0
}

// decideFenced is called when the broker fenced or the client closed the
// producer. The meta topic decides: if another claim wins, this writer is
// fenced for good and the returned FencedError is sticky. If this WAL's
// claim still wins, the producer was taken by a concurrent open of a lower
// term that lost its claim check and gives up: the producer is retired, the
// next append acquires a new one, and the appends it failed fail with a
// retryable error. Owned by run.
func (wr *writer) decideFenced(cause error) error {
	w := wr.w
	if err := wr.fencedErr(); err != nil {
		return err // the meta watcher saw the claim first
	}
	ctx, cancel := context.WithTimeout(wr.ctx, fenceCheckTimeout)
	defer cancel()
	check := wr.checkClaim(ctx)
	if errors.Is(check, context.DeadlineExceeded) && !errors.Is(check, walimpls.ErrFenced) && wr.ctx.Err() == nil {
		// The check's own bound ran out, not the writer: the append stays
		// retryable (a context's end is final to walimpls.IsRetryable,
		// which takes it for the caller's), so the deadline is told, not
		// kept as a cause.
		check = errors.Newf("the claim check took longer than %s: %s", fenceCheckTimeout, check.Error())
	}
	switch verdict, err := claimown.AfterFailedSend(cause, check); verdict {
	case claimown.Beaten:
		return err // checkClaim recorded the fence
	case claimown.CheckFailed:
		return errors.Wrapf(err, "pulsar: append to channel %q: producer closed by the broker", w.ch.Name)
	}
	w.log.Warn("producer fenced by a concurrent open that lost the term claim; re-acquiring", "err", cause)
	return errors.Wrapf(cause, "pulsar: append to channel %q: producer fenced by a lower term, re-acquiring", w.ch.Name)
}
