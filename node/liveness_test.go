package node_test

import (
	"bufio"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
)

// A node publishes the TTL etcd granted its lease, and heartbeats on its
// liveness stream when asked: the interval (clamped) in the answer's
// header, then an empty line at that interval. Not asked, it answers as
// before: no header, nothing after its ID.
func TestLivenessHeartbeats(t *testing.T) {
	c := newTestCluster(t)
	n := c.startNode("n1")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool { _, ok := s.Nodes["n1"]; return ok })
	require.NoError(t, err)
	require.EqualValues(t, 2, s.Nodes["n1"].Value.LeaseTTL, "the granted TTL, published")

	stream := func(query string) (*http.Response, *bufio.Reader) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Addr()+cluster.LivenessPath+"?node=n1"+query, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		r := bufio.NewReader(resp.Body)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "n1\n", line)
		return resp, r
	}

	resp, r := stream("&" + cluster.LivenessHeartbeat + "=1ms")
	require.Equal(t, cluster.MinHeartbeat.String(), resp.Header.Get(cluster.LivenessHeartbeatHeader), "clamped")
	start := time.Now()
	for range 5 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "\n", line)
	}
	require.GreaterOrEqual(t, time.Since(start), 4*cluster.MinHeartbeat, "at the clamped interval, not faster")

	resp, _ = stream("&" + cluster.LivenessHeartbeat + "=soon")
	require.Empty(t, resp.Header.Get(cluster.LivenessHeartbeatHeader), "an interval it cannot read: no heartbeats")
	resp, _ = stream("")
	require.Empty(t, resp.Header.Get(cluster.LivenessHeartbeatHeader), "not asked: no heartbeats")
}
