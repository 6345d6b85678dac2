package pulsar

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19.0 starts this goroutine per producer when
		// SendTimeout > 0 (the backend's default, 30 s), and it notices
		// that its producer closed only on its next timer tick, up to
		// SendTimeout after Close. It holds no broker resource.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
		// A producer the client closes itself after ProducerFenced
		// (doClose) never cancels its context, and a later Close returns
		// early, so its reconnect goroutine stays for good. The fencing
		// tests fence producers on purpose. Only this inner goroutine is
		// ignored: an unclosed producer still shows up through
		// runEventsLoop itself.
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).runEventsLoop.func1"),
		// After each successful SUBSCRIBE the client hands "connected" to
		// the consumer's dispatcher over an unbuffered channel; a reader
		// closed while a reconnect races it (take-overs and dropped
		// connections make readers reconnect) leaves it blocked for good.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).grabConn.func1"),
	)
}
