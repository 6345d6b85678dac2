package pulsar

import (
	"context"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/utility/backoff"
)

// Take-over pacing: the first TakeOver call comes after
// Config.TakeOverGrace (an owner that already left grants access at once,
// and a live owner's meta watcher releases the topic within a round trip or
// two of the claim), later ones back off to takeOverMaxBackoff.
const takeOverMaxBackoff = 2 * time.Second

// exclusiveReq is one WaitForExclusive acquisition of a channel's topic:
// a writer's (Open, or an append after its producer was dropped) or a
// Delete's.
type exclusiveReq struct {
	topic string
	// what names the acquisition in errors: `channel "x"`.
	what string
	// opts are the producer's options; Topic and ProducerAccessMode are
	// set by acquireExclusive.
	opts pulsar.ProducerOptions
	// giveUp, once closed, ends the wait at once; a nil channel never
	// closes.
	giveUp <-chan struct{}
	// takeOver runs, when Config.TakeOver is set, each time access was
	// not granted in time (see acquireExclusive). It calls Config.TakeOver
	// or decides not to; an error gives the acquisition up.
	takeOver func(ctx context.Context) error
}

// errGaveUp is what acquireExclusive returns when giveUp closed; the
// caller knows why.
var errGaveUp = errors.New("pulsar: exclusive producer given up")

// acquireExclusive creates a dedicated client and a WaitForExclusive
// producer on r.topic (see Fencing, step 3). While the producer waits, it
// runs r.takeOver, first after Config.TakeOverGrace and then with a
// backoff from twice that (at least 2ms) doubling to takeOverMaxBackoff,
// until access is granted or Config.TakeOverTimeout passed; tookOver
// reports whether r.takeOver ran. Giving up (ctx done, r.giveUp closed,
// r.takeOver's error, no access in time) returns at once: the opener
// withdraws the waiting producer (see withdraw), which leaves the
// producer holding the topic alone. A creation the client fails closes
// the client and returns the client's error.
func (o *Opener) acquireExclusive(ctx context.Context, r exclusiveReq) (pulsar.Client, pulsar.Producer, bool, error) {
	cfg := &o.cfg
	cl, err := o.newClient()
	if err != nil {
		return nil, nil, false, err
	}
	opts := r.opts
	opts.Topic, opts.ProducerAccessMode = r.topic, pulsar.ProducerAccessModeWaitForExclusive
	res := make(chan creation, 1)
	started := time.Now()
	tookOver := false
	go func() {
		p, err := cl.CreateProducer(opts)
		res <- creation{p, err}
	}()
	abandon := func(cause error) (pulsar.Client, pulsar.Producer, bool, error) {
		o.withdraw(r.topic, cl, res, started)
		return nil, nil, tookOver, cause
	}
	deadline := time.NewTimer(cfg.TakeOverTimeout)
	defer deadline.Stop()
	pace := backoff.Config{
		Initial:  min(max(2*cfg.TakeOverGrace, 2*time.Millisecond), takeOverMaxBackoff),
		Max:      takeOverMaxBackoff,
		NoJitter: true,
	}
	ticks := 0
	tick := time.NewTimer(cfg.TakeOverGrace)
	defer tick.Stop()
	for {
		select {
		case c := <-res:
			if c.err != nil {
				cl.Close()
				return nil, nil, tookOver, errors.Wrapf(c.err, "pulsar: exclusive producer for %s", r.what)
			}
			return cl, c.p, tookOver, nil
		case <-r.giveUp:
			return abandon(errGaveUp)
		case <-tick.C:
			if cfg.TakeOver != nil {
				tookOver = true
				if err := r.takeOver(ctx); err != nil {
					return abandon(err)
				}
			}
			tick.Reset(pace.Delay(ticks))
			ticks++
		case <-ctx.Done():
			return abandon(ctx.Err())
		case <-deadline.C:
			return abandon(errors.Newf("pulsar: %s: no exclusive access to %s within %s", r.what, r.topic, cfg.TakeOverTimeout))
		}
	}
}
