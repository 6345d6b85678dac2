package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// The cluster mode against two nodes and a coordinator in this process, on
// one memory backend.
func TestRunOnCluster(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := etcdtest.Client(t, srv.Endpoints())
	root := etcdtest.Prefix(t) + "cluster/"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem := memory.NewCluster()
	for _, id := range []string{"b1", "b2"} {
		o, err := memory.New(context.Background(), memory.Config{Cluster: mem})
		require.NoError(t, err)
		n, err := node.New(cli, o, node.Config{ID: id, Root: root, SessionTTL: 2 * time.Second})
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		t.Cleanup(func() { require.NoError(t, n.Shutdown(context.Background())); _ = o.Close() })
	}
	co, err := coordinator.New(cli, coordinator.Config{ID: "c", Root: root, SessionTTL: 2 * time.Second,
		Channels: coordinator.StaticChannels("bench-0", "bench-1", "bench-2")})
	require.NoError(t, err)
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(cctx) }()
	defer func() { ccancel(); require.NoError(t, <-done) }()
	layout, err := cluster.NewLayout(root)
	require.NoError(t, err)
	v, err := cluster.Watch(ctx, cli, layout, nil)
	require.NoError(t, err)
	_, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Assignments) == 3 })
	v.Close()
	require.NoError(t, err)

	var out bytes.Buffer
	p := params{cluster: strings.Join(srv.Endpoints(), ","), root: root, channels: 2, appenders: 3, records: 60, size: 100}
	require.NoError(t, run(ctx, p, &out, io.Discard))
	require.Contains(t, out.String(), "2 channels × 3 appenders, 120 records of 100 B in all, cluster "+p.cluster+" (2 nodes), through the client")
	require.Contains(t, out.String(), "read back exactly once")
	require.Regexp(t, `append latency +p50 +p90 +p99 +p99.9 +max`, out.String())
	// A second run reads past the first's records.
	out.Reset()
	p.json = true
	require.NoError(t, run(ctx, p, &out, io.Discard))
	var s Summary
	require.NoError(t, json.Unmarshal(out.Bytes(), &s), out.String())
	require.Equal(t, "cluster", s.Backend)
	require.Equal(t, 2, s.Channels)
	require.EqualValues(t, 120, s.Appended)
	require.EqualValues(t, 120, s.Delivered)
	require.True(t, s.Verified)
}
