package pulsar

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func strconvI(v int64) string { return strconv.FormatInt(v, 10) }

// Take-over pacing: the first TakeOver call comes after
// Config.TakeOverGrace (an owner that already left grants access at once,
// and a live owner's meta watcher releases the topic within a round trip or
// two of the claim), later ones back off to takeOverMaxBackoff.
const (
	takeOverMaxBackoff = 2 * time.Second
	// fenceCheckTimeout bounds the meta-topic read that decides whether a
	// producer closed by the broker was fenced by a higher term.
	fenceCheckTimeout = 10 * time.Second
)

type appendReq struct {
	ctx  context.Context
	msg  *pulsar.ProducerMessage
	size int // Message.Size, for TooLargeError
	res  chan appendRes
}

type appendRes struct {
	id  msgID
	err error
}

// writer sends a ReadWrite WAL's appends. One goroutine (run) owns the
// producer: it alone sends, replaces and closes it (pulsar-client-go
// v0.19.0 closes a producer's channels under a concurrent SendAsync or
// Flush, which panics). run takes every append queued (up to
// MaxBatchMessages at once), hands them to the producer with SendAsync and
// answers each append when the producer's callback reports its receipt. A
// second goroutine (flusher) flushes the producer's batch whenever run has
// sent something since the last flush began, so that a lone append does not
// wait for the batching delay while run goes on sending; batches that fill
// up go out by themselves. Batching stays on in the client (see the package
// documentation).
type writer struct {
	w       *wal
	reqs    chan *appendReq
	results chan sendResult      // producer callbacks → run
	flushCh chan pulsar.Producer // run → flusher; one flush queued at most
	kick    chan struct{}        // fence → run: retire the producer
	stop    chan struct{}
	done    chan struct{}   // closed when run has returned
	flushed chan struct{}   // closed when flusher has returned
	ctx     context.Context // cancelled by close: aborts what run waits for
	cancel  context.CancelFunc
	// fenced is set once, to the error every later append returns;
	// fencedCh is closed when it is set.
	fenced   atomic.Pointer[error]
	fencedCh chan struct{}
	stopOnce sync.Once
	started  atomic.Bool // run was started
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
	// outstanding holds the appends handed to the producer and not
	// answered yet. Retiring a producer answers all of them: a message
	// still in the client's batch when the producer closes never gets a
	// callback.
	outstanding map[*appendReq]struct{}
}

type sendResult struct {
	req *appendReq
	gen uint64
	id  pulsar.MessageID
	err error
}

func newWriter(w *wal) *writer {
	n := w.o.cfg.MaxBatchMessages
	wr := &writer{
		w:    w,
		reqs: make(chan *appendReq, n),
		// Callbacks must never block the client: run answers every
		// reported send before it sends a group, so at most the pending
		// sends (MaxPendingMessages = n) and one group (n) report before
		// run reads again.
		results:     make(chan sendResult, 3*n),
		flushCh:     make(chan pulsar.Producer, 1),
		kick:        make(chan struct{}, 1),
		fencedCh:    make(chan struct{}),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		flushed:     make(chan struct{}),
		outstanding: map[*appendReq]struct{}{},
	}
	wr.ctx, wr.cancel = context.WithCancel(context.Background())
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
	wr.started.Store(true)
	go wr.run()
	go wr.flusher()
	return nil
}

// install makes p the producer, unless the writer was fenced meanwhile:
// then it closes p and reports false.
func (wr *writer) install(cl pulsar.Client, p pulsar.Producer) bool {
	wr.mu.Lock()
	if wr.fencedErr() == nil {
		wr.cl, wr.p = cl, p
		wr.mu.Unlock()
		return true
	}
	wr.mu.Unlock()
	p.Close()
	cl.Close()
	return false
}

// producer returns the current producer, nil when there is none.
func (wr *writer) producer() pulsar.Producer {
	wr.mu.RLock()
	defer wr.mu.RUnlock()
	return wr.p
}

// dropProducer closes the producer and its client; the next append
// acquires new ones (unless the writer is fenced). Called by run only, or
// by close when run never started.
func (wr *writer) dropProducer() {
	wr.mu.Lock()
	p, cl := wr.p, wr.cl
	wr.p, wr.cl = nil, nil
	wr.mu.Unlock()
	if p != nil {
		p.Close()
	}
	if cl != nil {
		cl.Close()
	}
}

// fence makes err the answer of every later append and has run close the
// producer, which releases the topic to the claimant. Safe from any
// goroutine.
func (wr *writer) fence(err error) {
	if wr.fenced.CompareAndSwap(nil, &err) {
		wr.w.log.Warn("fenced", "err", err)
		close(wr.fencedCh)
	}
	select {
	case wr.kick <- struct{}{}:
	default:
	}
}

// acquire creates a dedicated client and a WaitForExclusive producer on the
// channel's topic, calling Config.TakeOver while the producer waits, and
// then checks that this WAL's claim still wins. With precheck it first
// makes sure the claim wins, so that a stale writer never takes the topic
// from the owner.
//
// An open that a claim beats never disturbs the topic: while the producer
// waits, the meta watcher fencing the writer (it saw a higher claim, or a
// later one of the same term) makes acquire give up at once, and every
// TakeOver call is preceded by a fold of the meta topic that must show this
// claim winning. Giving up returns at once; the opener withdraws the
// waiting producer (see Opener.withdraw), which leaves the producer that
// holds the topic alone.
func (wr *writer) acquire(ctx context.Context, precheck bool) (pulsar.Client, pulsar.Producer, error) {
	w, cfg := wr.w, &wr.w.o.cfg
	if err := wr.fencedErr(); err != nil {
		return nil, nil, err
	}
	if precheck {
		if err := wr.checkClaim(ctx); err != nil {
			return nil, nil, err
		}
	}
	cl, err := w.o.newClient()
	if err != nil {
		return nil, nil, err
	}
	sendTimeout := cfg.SendTimeout
	if sendTimeout < 0 {
		sendTimeout = -1
	}
	opts := pulsar.ProducerOptions{
		Topic:               w.topic,
		ProducerAccessMode:  pulsar.ProducerAccessModeWaitForExclusive,
		SendTimeout:         sendTimeout,
		BatchingMaxMessages: uint(cfg.MaxBatchMessages),
		MaxPendingMessages:  cfg.MaxBatchMessages,
	}
	res := make(chan creation, 1)
	started := time.Now()
	go func() {
		p, err := cl.CreateProducer(opts)
		res <- creation{p, err}
	}()
	// abandon returns at once; the opener withdraws the waiting producer
	// (see withdraw).
	abandon := func(cause error) (pulsar.Client, pulsar.Producer, error) {
		w.o.withdraw(w.topic, cl, res, started)
		return nil, nil, cause
	}
	deadline := time.NewTimer(cfg.TakeOverTimeout)
	defer deadline.Stop()
	backoff := cfg.TakeOverGrace
	tick := time.NewTimer(backoff)
	defer tick.Stop()
	var p pulsar.Producer
	for p == nil {
		select {
		case r := <-res:
			if r.err != nil {
				cl.Close()
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				if err := wr.fencedErr(); err != nil {
					return nil, nil, err
				}
				return nil, nil, errors.Wrapf(r.err, "pulsar: exclusive producer for channel %q", w.ch.Name)
			}
			p = r.p
		case <-wr.fencedCh:
			w.log.Info("a higher claim won while waiting for the topic; giving up", "topic", w.topic)
			return abandon(wr.fencedErr())
		case <-tick.C:
			if cfg.TakeOver != nil {
				if err := wr.takeOver(ctx); err != nil {
					return abandon(err)
				}
			}
			backoff = min(max(2*backoff, 2*time.Millisecond), takeOverMaxBackoff)
			tick.Reset(backoff)
		case <-ctx.Done():
			return abandon(ctx.Err())
		case <-deadline.C:
			return abandon(errors.Newf("pulsar: channel %q: no exclusive access to %s within %s", w.ch.Name, w.topic, cfg.TakeOverTimeout))
		}
	}
	if err := wr.checkClaim(ctx); err != nil {
		p.Close()
		cl.Close()
		return nil, nil, err
	}
	wr.acquired.Add(1)
	return cl, p, nil
}

// takeOver calls Config.TakeOver if a fold of the meta topic shows this
// WAL's claim winning. It returns an error only to give up the
// acquisition: the FencedError of a claim that beats this one (the writer
// is then fenced), or the end of ctx. When the claims cannot be read, it
// skips this call rather than risk disturbing a winner.
func (wr *writer) takeOver(ctx context.Context) error {
	w := wr.w
	if err := wr.checkClaim(ctx); err != nil {
		var fe *walimpls.FencedError
		switch {
		case errors.As(err, &fe):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		w.log.Warn("cannot read the term claims; not taking the topic over this time", "topic", w.topic, "err", err)
		return nil
	}
	w.log.Info("taking the topic over", "topic", w.topic)
	if err := w.o.cfg.TakeOver(ctx, w.topic); err != nil {
		w.log.Warn("take-over hook failed", "topic", w.topic, "err", err)
	}
	return nil
}

// checkClaim folds the meta topic and fences the writer if another claim
// wins (see wal.checkWinner).
func (wr *writer) checkClaim(ctx context.Context) error {
	err := wr.w.checkWinner(ctx)
	var fe *walimpls.FencedError
	if errors.As(err, &fe) {
		wr.fence(err)
		return wr.fencedErr()
	}
	return err
}

func (wr *writer) fencedErr() error {
	if e := wr.fenced.Load(); e != nil {
		return *e
	}
	return nil
}

func (wr *writer) append(ctx context.Context, m message.Message) (msgID, error) {
	if err := wr.fencedErr(); err != nil {
		return msgID{}, walimpls.MarkNotStored(err)
	}
	req := &appendReq{
		ctx:  ctx,
		msg:  &pulsar.ProducerMessage{Payload: m.Payload(), Properties: m.Properties().All()},
		size: m.Size(),
		res:  make(chan appendRes, 1),
	}
	select {
	case wr.reqs <- req:
	case <-ctx.Done():
		return msgID{}, walimpls.MarkNotStored(ctx.Err()) // never queued
	case <-wr.done:
		return msgID{}, walimpls.MarkNotStored(wr.w.closedErr())
	}
	select {
	case res := <-req.res:
		return res.id, res.err
	case <-ctx.Done():
		return msgID{}, ctx.Err()
	case <-wr.done:
		select {
		case res := <-req.res:
			return res.id, res.err
		default:
			return msgID{}, wr.w.closedErr()
		}
	}
}

// close stops run and the flusher and waits for them; pending appends
// fail with ErrClosed.
func (wr *writer) close() {
	wr.stopOnce.Do(func() {
		close(wr.stop)
		wr.cancel()
	})
	if wr.started.Load() {
		<-wr.done
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
		case <-wr.stop:
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
	defer close(wr.done)
	defer wr.dropProducer()
	maxBatch := wr.w.o.cfg.MaxBatchMessages
	batch := make([]*appendReq, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-wr.stop:
			// Appends in flight learn ErrClosed from done.
			wr.failPending()
			return
		case <-wr.kick:
			if err := wr.fencedErr(); err != nil {
				wr.retire(err)
			}
			continue
		case res := <-wr.results:
			wr.answer(res)
			continue
		case r := <-wr.reqs:
			batch = append(batch, r)
		}
	drain:
		for {
			select {
			case res := <-wr.results:
				wr.answer(res)
			default:
				break drain
			}
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case r := <-wr.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		wr.send(batch)
	}
}

func (wr *writer) failPending() {
	err := walimpls.MarkNotStored(wr.w.closedErr())
	for {
		select {
		case r := <-wr.reqs:
			r.res <- appendRes{err: err}
		default:
			return
		}
	}
}

// send hands batch to the producer and asks the flusher for a flush; the
// callbacks report to run. Owned by run.
func (wr *writer) send(batch []*appendReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.res <- appendRes{err: walimpls.MarkNotStored(err)} // the caller is gone: never sent
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// Until SendAsync, nothing of live reached the broker.
	if err := wr.fencedErr(); err != nil {
		wr.retire(err)
		reply(live, walimpls.MarkNotStored(err))
		return
	}
	p := wr.producer()
	if p == nil {
		cl, np, err := wr.acquire(wr.ctx, true)
		if err != nil {
			if wr.ctx.Err() != nil {
				err = wr.w.closedErr()
			} else if errors.Is(err, walimpls.ErrFenced) {
				wr.fence(err)
			}
			reply(live, walimpls.MarkNotStored(err))
			return
		}
		if !wr.install(cl, np) {
			reply(live, walimpls.MarkNotStored(wr.fencedErr()))
			return
		}
		p = np
		wr.gen++
	}
	gen := wr.gen
	for _, r := range live {
		wr.outstanding[r] = struct{}{}
		p.SendAsync(wr.ctx, r.msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			wr.results <- sendResult{req: r, gen: gen, id: id, err: err}
		})
	}
	select {
	case wr.flushCh <- p:
	default: // a flush is queued already; it starts after these sends
	}
}

// answer replies to one append. Owned by run.
func (wr *writer) answer(res sendResult) {
	r := res.req
	if _, ok := wr.outstanding[r]; !ok {
		return // answered when its producer was retired
	}
	err := res.err
	if err != nil && isFencedErr(err) && wr.ctx.Err() == nil {
		wr.retire(wr.decideFenced(err))
		return
	}
	delete(wr.outstanding, r)
	switch {
	case err == nil:
		r.res <- appendRes{id: fromPulsar(res.id)}
	case isTooLarge(err):
		r.res <- appendRes{err: &walimpls.TooLargeError{Size: r.size, Limit: wr.w.declared}}
	case wr.ctx.Err() != nil:
		r.res <- appendRes{err: wr.w.closedErr()}
	default:
		r.res <- appendRes{err: errors.Wrapf(err, "pulsar: append to channel %q", wr.w.ch.Name)}
	}
}

// retire closes the producer and answers every outstanding append with
// err. Owned by run.
func (wr *writer) retire(err error) {
	wr.dropProducer()
	for r := range wr.outstanding {
		r.res <- appendRes{err: err}
	}
	clear(wr.outstanding)
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
	err := wr.checkClaim(ctx)
	var fe *walimpls.FencedError
	switch {
	case errors.As(err, &fe):
		return err
	case err != nil:
		return errors.Wrapf(cause, "pulsar: append to channel %q: producer closed by the broker (term check: %v)", w.ch.Name, err)
	}
	w.log.Warn("producer fenced by a concurrent open that lost the term claim; re-acquiring", "err", cause)
	return errors.Wrapf(cause, "pulsar: append to channel %q: producer fenced by a lower term, re-acquiring", w.ch.Name)
}

func reply(batch []*appendReq, err error) {
	for _, r := range batch {
		r.res <- appendRes{err: err}
	}
}
