package walmanager_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walmanager/walmanagertest"
)

// memoryNodes is the takeover's backend factory for the memory backend: two
// openers (nodes) on one cluster.
func memoryNodes(t *testing.T) (a, b walimpls.Opener) {
	cluster := memory.NewCluster()
	var nodes [2]walimpls.Opener
	for i := range nodes {
		op, err := memory.New(context.Background(), memory.Config{Cluster: cluster})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, op.Close()) })
		nodes[i] = op
	}
	return nodes[0], nodes[1]
}

// TestTwoNodeTakeoverMemory runs the shared two-node takeover scenario on
// the reference backend; the other backends run it in their own packages,
// where their test clusters live.
func TestTwoNodeTakeoverMemory(t *testing.T) {
	a, b := memoryNodes(t)
	walmanagertest.RunTakeover(t, a, b, walmanagertest.TakeoverOptions{Backend: "memory"})
}
