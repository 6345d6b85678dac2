package kafka

import (
	"testing"

	"github.com/streamwal/streamwal/walmanager/walmanagertest"
)

// TestTwoNodeTakeover runs the shared two-node takeover scenario over a kfake
// broker: each node has its own franz-go clients, and the new owner's
// transactional producer fences the old one's.
func TestTwoNodeTakeover(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			logPartitionDump(t, cfg, a.cfg.topicName("takeover"), 0)
		}
	})
	walmanagertest.RunTakeover(t, a, b, walmanagertest.TakeoverOptions{Backend: "kafka"})
}
