package local

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walmanager/walmanagertest"
)

// TestTwoNodeTakeover runs the shared two-node takeover scenario on one
// store: each node is an Opener over the same journal, as two processes of
// one host cannot hold the directory lock together. Fencing is the persisted
// term checked on every append batch.
func TestTwoNodeTakeover(t *testing.T) {
	s, err := New(context.Background(), Config{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	a, b := s.NewOpener(), s.NewOpener()
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	})
	walmanagertest.RunTakeover(t, a, b, walmanagertest.TakeoverOptions{Backend: "local"})
}
