package node_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls"
)

// gatedOpener holds every open until release is closed, saying on entered
// that one began.
type gatedOpener struct {
	walimpls.Opener
	entered chan struct{}
	release chan struct{}
}

func (g *gatedOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Opener.Open(ctx, ch)
}

// An append that reaches the node while it opens the channel at its
// assigned term waits for the open and is stored, instead of being
// refused and sent back to wait for the Opened report: a moved channel's
// first append is served the moment its WAL is ready.
func TestAppendWaitsForOpen(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	gate := &gatedOpener{entered: make(chan struct{}, 1), release: make(chan struct{})}
	waiting := make(chan string, 1)
	n1 := c.startNodeWith("n1", nodeSetup{
		wrap: func(o walimpls.Opener) walimpls.Opener { gate.Opener = o; return gate },
		setup: func(n *node.Node) {
			n.SetWaitingForOpen(func(ch string) {
				select {
				case waiting <- ch:
				default:
				}
			})
		},
	})

	a := cluster.Assignment{Channel: "orders", Node: "n1", Term: 3, State: cluster.Assigning}
	_, err := c.cli.Put(ctx, c.layout.Assignment("orders"), string(cluster.Encode(a)))
	require.NoError(t, err)
	select {
	case <-gate.entered:
	case <-ctx.Done():
		t.Fatal("the node never began to open the channel")
	}

	type result struct {
		term int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		res, err := apiClient(n1).Append(ctx, appendReq("orders", "first", "k1"))
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{term: res.Msg.GetTerm()}
	}()
	select {
	case ch := <-waiting:
		require.Equal(t, "orders", ch)
	case r := <-done:
		t.Fatalf("the append was answered while the channel was still opening: term %d, %v (code %s)", r.term, r.err, connect.CodeOf(r.err))
	}
	close(gate.release)
	r := <-done
	require.NoError(t, r.err)
	require.EqualValues(t, 3, r.term)
}
