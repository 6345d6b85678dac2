//go:build !race

package pulsar

import (
	"testing"
	"time"

	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// This file runs without the race detector only (make test runs it in a
// second, plain go test): dropping every connection also reconnects the
// WAL's meta watcher, whose Reader.Next may have just dequeued its own
// claim, and pulsar-client-go v0.19.0 reads the reader's last dequeued
// message on reconnect without synchronizing with Next (see the package
// documentation). The race is the client's, and the detector reports it in
// about one run in eight; what this test checks - deduplication of
// batches resent after a dropped connection - is unaffected by it.

func TestFaultDroppedConnections(t *testing.T) {
	// A connection dropped after the broker stored a batch but before its
	// receipt arrived makes the client resend it: broker deduplication
	// (on in the namespace, as recommended in the package documentation)
	// keeps one copy and answers with the stored position.
	b, cfg := startBroker(t, pulsartest.Config{Deduplication: true})
	o := newOpener(t, cfg)
	w := open(t, o, "drops", 1, walimpls.ReadWrite)
	var acked map[string]message.ID
	during(t, 40*time.Millisecond, 3, b.DropAllConnections, func() {
		acked = appendConcurrently(t, w, 8, 30, "d")
	})
	checkExactlyOnce(t, w, acked)
}
