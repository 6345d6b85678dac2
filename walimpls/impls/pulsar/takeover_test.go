package pulsar

import (
	"testing"

	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/walmanager/walmanagertest"
)

// TestTwoNodeTakeover runs the shared two-node takeover scenario over the
// test broker: each node has its own clients; the new owner's claim makes
// the old owner release its exclusive producer.
func TestTwoNodeTakeover(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	walmanagertest.RunTakeover(t, a, b, walmanagertest.TakeoverOptions{Backend: "pulsar"})
}
