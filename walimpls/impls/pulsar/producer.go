package pulsar

import (
	"context"
	"fmt"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

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

// setFence makes err the answer of every later append and has run close the
// producer, which releases the topic to the claimant. Safe from any
// goroutine.
func (wr *writer) setFence(err error) {
	if _, first := wr.fence.Set(err); first {
		wr.w.log.Warn("fenced", "err", err)
	}
	wr.kickRun()
}

// fenceDeleted is fence for a deletion of the channel: err, a FencedError
// with Deleted set, replaces the error of an earlier fence, so that every
// later append says the channel was deleted. Safe from any goroutine.
func (wr *writer) fenceDeleted(err error) {
	prev, replaced := wr.fence.Replace(err, func(cur error) bool {
		fe := (*walimpls.FencedError)(nil)
		return errors.As(cur, &fe) && fe.Deleted
	})
	if !replaced {
		return
	}
	if prev == nil {
		wr.w.log.Warn("fenced", "err", err)
	}
	wr.kickRun()
}

// kickRun has run retire the producer of a fenced writer.
func (wr *writer) kickRun() {
	select {
	case wr.kick <- struct{}{}:
	default:
	}
}

// acquire creates a dedicated client and a WaitForExclusive producer on the
// channel's topic, calling Config.TakeOver while the producer waits (see
// acquireExclusive), and then checks that this WAL's claim still wins
// (claimown.Acquire). With precheck it first makes sure the claim wins, so
// that a stale writer never takes the topic from the owner.
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
	sendTimeout := cfg.SendTimeout
	if sendTimeout < 0 {
		sendTimeout = -1
	}
	// An exclusive producer and its dedicated client.
	type exclusive struct {
		cl pulsar.Client
		p  pulsar.Producer
	}
	steps := claimown.Steps[exclusive]{
		Take: func(ctx context.Context) (exclusive, error) {
			cl, p, _, err := w.o.acquireExclusive(ctx, exclusiveReq{
				topic: w.topic,
				what:  fmt.Sprintf("channel %q", w.ch.Name),
				opts: pulsar.ProducerOptions{
					SendTimeout:         sendTimeout,
					BatchingMaxMessages: uint(cfg.MaxBatchMessages),
					MaxPendingMessages:  cfg.MaxBatchMessages,
				},
				giveUp:   wr.fence.Fenced(),
				takeOver: wr.takeOver,
			})
			switch {
			case err == nil:
				return exclusive{cl, p}, nil
			case ctx.Err() != nil:
				return exclusive{}, ctx.Err()
			}
			if ferr := wr.fencedErr(); ferr != nil {
				if errors.Is(err, errGaveUp) {
					w.log.Info("a higher claim won while waiting for the topic; giving up", "topic", w.topic)
				}
				return exclusive{}, ferr
			}
			return exclusive{}, err
		},
		Check: wr.checkClaim,
		Release: func(e exclusive) {
			e.p.Close()
			e.cl.Close()
		},
	}
	if precheck {
		steps.Precheck = wr.checkClaim
	}
	e, err := claimown.Acquire(ctx, steps)
	if err != nil {
		return nil, nil, err
	}
	wr.acquired.Add(1)
	return e.cl, e.p, nil
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
	switch {
	case errors.As(err, &fe) && fe.Deleted:
		wr.fenceDeleted(err)
		return wr.fencedErr()
	case fe != nil:
		wr.setFence(err)
		return wr.fencedErr()
	}
	return err
}

func (wr *writer) fencedErr() error { return wr.fence.Err() }
