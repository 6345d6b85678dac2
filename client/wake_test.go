package client_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// A retry's pause ends as soon as the channel's assignment changes: with
// a backoff of an hour, an append whose owner's address refuses
// connections is stored on the new owner once the channel moves, well
// within the test's deadline.
func TestRetryWakesOnMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	startNode(t, cli, l.Root, memory.NewCluster(), "a")

	// "gone" is registered at an address nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = cli.Put(ctx, l.Node("gone"), string(cluster.Encode(cluster.NodeInfo{ID: "gone", Addr: addr})))
	require.NoError(t, err)
	assign(t, cli, l, "ch", "gone", 1)

	failed := make(chan struct{}, 1)
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, Logger: slog.New(attemptFailed(failed)),
		Retry: backoff.Config{Initial: time.Hour, Max: time.Hour, NoJitter: true}})
	require.NoError(t, err)
	defer c.Close()
	done := make(chan error, 1)
	var res client.Result
	go func() {
		var err error
		res, err = c.Append(ctx, "ch", client.Message{Payload: []byte("x")}, client.Options{})
		done <- err
	}()
	// The first attempt was refused: the client pauses for an hour, or is
	// about to. Move the channel.
	select {
	case <-failed:
	case <-ctx.Done():
		t.Fatal("no attempt failed")
	}
	assign(t, cli, l, "ch", "a", 2)
	require.NoError(t, <-done)
	require.Equal(t, "a", res.Node)
	require.EqualValues(t, 2, res.Term)
}

// attemptFailed is a log handler that signals each failed append attempt
// the client logs.
type attemptFailed chan struct{}

func (h attemptFailed) Enabled(context.Context, slog.Level) bool { return true }
func (h attemptFailed) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h attemptFailed) WithGroup(string) slog.Handler            { return h }

func (h attemptFailed) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "append attempt failed" {
		select {
		case h <- struct{}{}:
		default:
		}
	}
	return nil
}
