package pulsar

import (
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// closeQuiesce is the least age of a producer creation that Opener.Close
// withdraws by closing its client; see withdraw.
const closeQuiesce = time.Second

// creation is the outcome of a CreateProducer call.
type creation struct {
	p   pulsar.Producer
	err error
}

// creationBound bounds how long pulsar-client-go v0.19.0 takes from
// CreateProducer to having sent its PRODUCER request: the partitioned
// metadata and the lookup each retry until OperationTimeout (with a
// connection established within ConnectionTimeout per attempt), and the
// broker's connection takes up to ConnectionTimeout more.
func (c *Config) creationBound() time.Duration {
	return 2*(c.OperationTimeout+c.ConnectionTimeout) + c.ConnectionTimeout
}

// withdraw disposes of a WaitForExclusive producer creation that acquire
// gave up on (fenced by a higher claim, its context done, no access in
// time): the producer is closed if it was created, and a producer still
// waiting for the topic is withdrawn by closing its client, which fails
// the pending PRODUCER request and makes the broker drop the waiter. The
// work runs on a goroutine of the opener, so that acquire returns at once.
//
// The client may only be closed once the creation has sent its PRODUCER
// request: pulsar-client-go v0.19.0 opens a fresh connection for a lookup
// that runs after the client closed, and a producer creation on it can
// then never be cancelled (it waits for the topic for ever, and would be
// granted it). So withdraw waits for the creation to end by itself (it
// ends when the producer is granted, and the granted producer is closed at
// once), and closes the client when the creation is older than
// Config.creationBound, or at Opener.Close once it is older than
// closeQuiesce. Until then a withdrawn producer may still wait at the
// broker; it sends nothing and holds nothing, and if the broker grants it
// the topic, withdraw releases it within a round trip.
func (o *Opener) withdraw(topic string, cl pulsar.Client, res <-chan creation, started time.Time) {
	if !o.goBackground(func() { o.reap(topic, cl, res, started) }) {
		o.reap(topic, cl, res, started) // the opener is closing
	}
}

// reap is withdraw's work.
func (o *Opener) reap(topic string, cl pulsar.Client, res <-chan creation, started time.Time) {
	dispose := func(r creation) {
		if r.err == nil {
			r.p.Close()
		}
		cl.Close()
	}
	settled := time.NewTimer(time.Until(started.Add(o.cfg.creationBound())))
	defer settled.Stop()
	select {
	case r := <-res:
		dispose(r)
		return
	case <-settled.C:
	case <-o.closing:
		quiesced := time.NewTimer(time.Until(started.Add(closeQuiesce)))
		defer quiesced.Stop()
		select {
		case r := <-res:
			dispose(r)
			return
		case <-quiesced.C:
		}
	}
	cl.Close() // fails the pending PRODUCER request
	ended := time.NewTimer(o.cfg.OperationTimeout)
	defer ended.Stop()
	select {
	case r := <-res:
		dispose(r)
	case <-ended.C:
		o.log.Warn("a withdrawn exclusive producer creation did not end; pulsar-client-go cannot cancel it", "topic", topic)
	}
}
