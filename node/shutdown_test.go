package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// A graceful shutdown drains the appends in flight while more keep
// arriving, which it refuses: an arrival may find none in flight (the
// count at zero) while the drain waits, or right after the last one ended.
// The drain neither panics nor races (the race detector knows a
// sync.WaitGroup's rule that an Add from zero must come before its Wait),
// and the node stops.
func TestShutdownWhileAppendsArrive(t *testing.T) {
	c := newTestCluster(t)
	// Rounds: the race shows in about half of them.
	for round := range 5 {
		shutdownWhileAppendsArrive(t, c, fmt.Sprintf("n%d", round), fmt.Sprintf("ch%d", round))
	}
}

func shutdownWhileAppendsArrive(t *testing.T, c *testCluster, id, channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	mo, err := memory.New(ctx, memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	defer func() { _ = mo.Close() }()
	gate := &gatedOpener{Opener: mo, entered: make(chan struct{}, 1), release: make(chan struct{})}
	n, err := node.New(c.cli, gate, node.Config{ID: id, Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory"})
	require.NoError(t, err)
	waiting := make(chan struct{}, 1)
	n.SetWaitingForOpen(func(string) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	require.NoError(t, n.Start(ctx))
	c.assignNoWait(channel, id, 1)
	<-gate.entered

	// Appenders until the node is gone: the first wait for the open, the
	// later ones are refused (the node is shutting down) or find no node.
	api := apiClient(n)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = api.Append(actx, appendReq(channel, fmt.Sprintf("%d-%d", i, j), ""))
				acancel()
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	select {
	case <-waiting: // appends in flight, waiting for the open
	case <-ctx.Done():
		t.Fatal("no append waited for the open")
	}
	shut := make(chan error, 1)
	go func() { shut <- n.Shutdown(ctx) }()
	close(gate.release) // the open ends: the appends waiting for it drain
	require.NoError(t, <-shut)
}
