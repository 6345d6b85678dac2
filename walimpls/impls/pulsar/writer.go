package pulsar

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

func strconvI(v int64) string { return strconv.FormatInt(v, 10) }

// fenceCheckTimeout bounds the meta-topic read that decides whether a
// producer closed by the broker was fenced by a higher term.
const fenceCheckTimeout = 10 * time.Second

// errBatchCut is why the messages of a batch after a failed one are not
// handed over; the batch reports the earlier failure instead.
var errBatchCut = errors.New("pulsar: an earlier message of the batch failed")

// appendReq is one AppendBatch queued for run (an Append is a batch of
// one).
type appendReq struct {
	ctx   context.Context
	msgs  []*pulsar.ProducerMessage
	sizes []int // Message.Size of each, for TooLargeError
	// answer is called exactly once with the outcome: it hands it to the
	// waiting caller (append) or to its callback (appendAsync).
	answer func(appendRes)
	// failed is set by the callback of a message of msgs that failed,
	// which the client may call inside SendAsync (a message it refuses
	// at once): run hands nothing more of msgs over once it sees it.
	failed atomic.Bool

	st batch // owned by run, from the moment run takes the request
}

type appendRes struct {
	ids []msgID // the stored prefix
	err error
}

// writer sends a ReadWrite WAL's appends. One goroutine (run) owns the
// producer: it alone sends, replaces and closes it (pulsar-client-go
// v0.19.0 closes a producer's channels under a concurrent SendAsync or
// Flush, which panics). run queues the appends and batches it is given,
// hands their messages to the producer with SendAsync in queue order (a
// batch's consecutively, in slice order), never more than MaxBatchMessages
// in flight, and answers each batch when the producer's callbacks have
// reported every message it handed over (see batch). A second goroutine
// (flusher) flushes the producer's batch whenever run has sent something
// since the last flush began, so that a lone append does not wait for the
// batching delay while run goes on sending; batches that fill up go out by
// themselves. Batching stays on in the client (see the package
// documentation).
type writer struct {
	w *wal
	// box queues the appends for run, which answers every request it
	// took when it stops: those in flight with ErrClosed, the others as
	// not stored.
	box     *claimown.Mailbox[*appendReq, appendRes]
	results chan sendResult      // producer callbacks → run
	flushCh chan pulsar.Producer // run → flusher; one flush queued at most
	kick    chan struct{}        // fence → run: retire the producer
	flushed chan struct{}        // closed when flusher has returned
	ctx     context.Context      // box.Context(): cancelled by close, aborts what run waits for
	// fence is set once, to the error every later append returns; only
	// a deletion replaces it (fenceDeleted).
	fence *claimown.Fence
	// acquired counts the producers acquired: 1 after Open, one more per
	// re-acquisition (see decideFenced). Read by tests.
	acquired atomic.Int64

	// mu guards the producer and its client. run replaces and closes them
	// under the write lock; the flusher flushes under the read lock, so a
	// producer is never closed in the middle of a flush.
	mu sync.RWMutex
	cl pulsar.Client
	p  pulsar.Producer

	// owned by run (set by start before run begins)
	gen uint64 // generation of the producer, one per acquisition
	// window bounds the messages in flight: the producer's
	// MaxPendingMessages, so that SendAsync never waits for room while
	// run is the one that must read the results that make room.
	window int
	// queue holds the requests taken from reqs whose messages are not all
	// handed over yet, in order; only the first may be partly handed over.
	// unsent counts their messages still to hand over.
	queue  []*appendReq
	unsent int
	// outstanding holds the requests with messages handed to the
	// producer and not answered yet; inflight counts those messages
	// without a result. Retiring a producer answers all of them: a
	// message still in the client's batch when the producer closes never
	// gets a callback.
	outstanding map[*appendReq]struct{}
	inflight    int
}

type sendResult struct {
	req *appendReq
	idx int // index of the message in req.msgs
	gen uint64
	id  pulsar.MessageID
	err error
}

func newWriter(w *wal) *writer {
	n := w.o.cfg.MaxBatchMessages
	wr := &writer{
		w:   w,
		box: claimown.NewMailbox[*appendReq, appendRes](n, w.closedErr),
		// Callbacks must never block the client (nor run, which closes
		// producers, and a closing producer reports what it holds): a
		// producer reports at most the window (n) of messages in flight,
		// and run drains the results of a retired producer before it
		// fills the window of the next one.
		results:     make(chan sendResult, 3*n),
		window:      n,
		flushCh:     make(chan pulsar.Producer, 1),
		kick:        make(chan struct{}, 1),
		flushed:     make(chan struct{}),
		fence:       claimown.NewFence(),
		outstanding: map[*appendReq]struct{}{},
	}
	wr.ctx = wr.box.Context()
	// Requests run never took stored nothing.
	wr.box.SetOrphans(func(r *appendReq) { r.answer(appendRes{err: walimpls.MarkNotStored(w.closedErr())}) })
	return wr
}

// start acquires the producer and starts run and the flusher.
func (wr *writer) start(ctx context.Context) error {
	cl, p, err := wr.acquire(ctx, false)
	if err != nil {
		return err
	}
	if !wr.install(cl, p) {
		return wr.fencedErr()
	}
	wr.gen = 1
	wr.box.Go(wr.run)
	go wr.flusher()
	return nil
}

// append queues a batch for run and waits for its outcome: the ids of
// the stored prefix and, unless that is all of msgs, the error.
func (wr *writer) append(ctx context.Context, msgs []message.Message) ([]msgID, error) {
	if err := wr.fencedErr(); err != nil {
		return nil, walimpls.MarkNotStored(err)
	}
	res := make(chan appendRes, 1)
	req := newAppendReq(ctx, msgs, func(r appendRes) { res <- r })
	r, err := wr.box.Submit(ctx, req, res)
	if err != nil {
		return nil, err
	}
	return r.ids, r.err
}

// appendAsync queues a batch for run, which answers done with what append
// would have returned.
func (wr *writer) appendAsync(ctx context.Context, msgs []message.Message, done func([]msgID, error)) {
	if err := wr.fencedErr(); err != nil {
		done(nil, walimpls.MarkNotStored(err))
		return
	}
	req := newAppendReq(ctx, msgs, func(r appendRes) { done(r.ids, r.err) })
	if err := wr.box.Post(ctx, req); err != nil {
		done(nil, err)
	}
}

func newAppendReq(ctx context.Context, msgs []message.Message, answer func(appendRes)) *appendReq {
	req := &appendReq{
		ctx:    ctx,
		msgs:   make([]*pulsar.ProducerMessage, len(msgs)),
		sizes:  make([]int, len(msgs)),
		answer: answer,
	}
	for i, m := range msgs {
		req.msgs[i] = &pulsar.ProducerMessage{Payload: m.Payload(), Properties: m.Properties().All()}
		req.sizes[i] = m.Size()
	}
	return req
}

// close stops run and the flusher and waits for them; pending appends
// fail with ErrClosed.
func (wr *writer) close() {
	wr.box.Close()
	if wr.box.Started() {
		<-wr.flushed
	} else {
		wr.dropProducer()
	}
}

func (wr *writer) flusher() {
	defer close(wr.flushed)
	timeout := wr.w.o.cfg.OperationTimeout
	for {
		select {
		case <-wr.box.Stopping():
			return
		case p := <-wr.flushCh:
			wr.mu.RLock()
			if wr.p == p { // not retired meanwhile
				ctx, cancel := context.WithTimeout(wr.ctx, timeout)
				if err := p.FlushWithCtx(ctx); err != nil && wr.ctx.Err() == nil {
					wr.w.log.Debug("flush failed", "err", err)
				}
				cancel()
			}
			wr.mu.RUnlock()
		}
	}
}

func (wr *writer) run() {
	defer wr.dropProducer()
	for {
		var reqs <-chan *appendReq
		if wr.unsent < wr.window {
			reqs = wr.box.Requests()
		}
		select {
		case <-wr.box.Stopping():
			// Every request taken is answered: those in flight with
			// ErrClosed (their outcome unknown), the others as not
			// stored.
			wr.retire(wr.w.closedErr())
			wr.failPending()
			return
		case <-wr.kick:
			if err := wr.fencedErr(); err != nil {
				wr.retire(err)
			}
		case res := <-wr.results:
			wr.answer(res)
		case r := <-reqs:
			wr.take(r)
		}
		wr.gather()
		wr.pump()
	}
}

// take queues r. Owned by run.
func (wr *writer) take(r *appendReq) {
	r.st = newBatch(len(r.msgs))
	wr.queue = append(wr.queue, r)
	wr.unsent += len(r.msgs)
}

// gather takes the results reported and the requests queued meanwhile,
// without waiting. Owned by run.
func (wr *writer) gather() {
	for {
		select {
		case res := <-wr.results:
			wr.answer(res)
			continue
		default:
		}
		if wr.unsent >= wr.window {
			return
		}
		select {
		case r := <-wr.box.Requests():
			wr.take(r)
		default:
			return
		}
	}
}

// failPending answers every request nothing of which was handed over.
// Owned by run, when it stops.
func (wr *writer) failPending() {
	err := walimpls.MarkNotStored(wr.w.closedErr())
	for _, r := range wr.queue {
		if r.st.sent == 0 {
			r.answer(appendRes{err: err})
		}
	}
	wr.queue, wr.unsent = nil, 0
	wr.box.Drain(func(r *appendReq) { r.answer(appendRes{err: err}) })
}

// pump hands queued messages to the producer, in queue order, while
// fewer than window messages are in flight, and asks the flusher for a
// flush. A request whose message failed (run learns it from the callback,
// which the client may run inside SendAsync) or whose caller is gone gets
// nothing more handed over. Owned by run.
func (wr *writer) pump() {
	if len(wr.queue) == 0 || wr.inflight >= wr.window {
		return
	}
	// Only the first request may be partly handed over; until a
	// request's first SendAsync, nothing of it reached the broker.
	if err := wr.fencedErr(); err != nil {
		wr.retire(err)
		wr.refuseQueued(walimpls.MarkNotStored(err))
		return
	}
	p := wr.producer()
	if p == nil {
		if wr.dropGone(); len(wr.queue) == 0 {
			return // nobody waits: no producer needed
		}
		cl, np, err := wr.acquire(wr.ctx, true)
		if err != nil {
			if wr.ctx.Err() != nil {
				err = wr.w.closedErr()
			} else if errors.Is(err, walimpls.ErrFenced) {
				wr.setFence(err)
			}
			wr.refuseQueued(walimpls.MarkNotStored(err))
			return
		}
		if !wr.install(cl, np) {
			wr.refuseQueued(walimpls.MarkNotStored(wr.fencedErr()))
			return
		}
		p = np
		wr.gen++
	}
	gen, handed := wr.gen, false
	for len(wr.queue) > 0 && wr.inflight < wr.window {
		r := wr.queue[0]
		if err := r.ctx.Err(); err != nil {
			if r.st.sent == 0 {
				wr.popHead()
				r.answer(appendRes{err: walimpls.MarkNotStored(err)}) // the caller is gone: never sent
			} else {
				wr.stopHead(walimpls.MarkNotStored(err))
			}
			continue
		}
		if r.failed.Load() {
			wr.stopHead(walimpls.MarkNotStored(errBatchCut))
			continue
		}
		i := r.st.sent
		r.st.handed()
		wr.inflight++
		wr.unsent--
		wr.outstanding[r] = struct{}{}
		handed = true
		p.SendAsync(wr.ctx, r.msgs[i], func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				r.failed.Store(true)
			}
			wr.results <- sendResult{req: r, idx: i, gen: gen, id: id, err: err}
		})
		if r.failed.Load() {
			// Refused at once, or an earlier message failed: nothing more
			// of r goes out, and run reads the failure before it sends on.
			wr.stopHead(walimpls.MarkNotStored(errBatchCut))
			break
		}
		if r.st.sent == len(r.msgs) {
			wr.popHead()
		}
	}
	if handed {
		select {
		case wr.flushCh <- p:
		default: // a flush is queued already; it starts after these sends
		}
	}
}

// dropGone answers the queued requests whose caller is gone and nothing
// of which was handed over. Owned by run.
func (wr *writer) dropGone() {
	kept := wr.queue[:0]
	for _, r := range wr.queue {
		if err := r.ctx.Err(); err != nil && r.st.sent == 0 {
			wr.unsent -= r.st.unsent()
			r.answer(appendRes{err: walimpls.MarkNotStored(err)}) // never sent
			continue
		}
		kept = append(kept, r)
	}
	clear(wr.queue[len(kept):])
	wr.queue = kept
}

// popHead removes the first queued request. Owned by run.
func (wr *writer) popHead() {
	r := wr.queue[0]
	wr.queue[0] = nil
	wr.queue = wr.queue[1:]
	wr.unsent -= r.st.unsent()
}

// stopHead hands nothing more of the first queued request over, for the
// reason err, and answers it if nothing of it is in flight. Owned by run.
func (wr *writer) stopHead(err error) {
	r := wr.queue[0]
	wr.popHead()
	r.st.stop(err)
	wr.settle(r)
}

// refuseQueued answers every queued request, nothing of which was handed
// over, with err. Owned by run.
func (wr *writer) refuseQueued(err error) {
	for _, r := range wr.queue {
		if r.st.sent > 0 {
			panic("pulsar: writer: a request partly handed over to a retired producer is still queued")
		}
		r.answer(appendRes{err: err})
	}
	clear(wr.queue)
	wr.queue, wr.unsent = wr.queue[:0], 0
}
