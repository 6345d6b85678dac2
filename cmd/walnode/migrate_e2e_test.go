package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

// chains is the cluster's chain store, as the nodes keep it.
func (c *e2eCluster) chains() *chain.Store {
	kv, err := etcdstore.New(c.ecli, etcdstore.Options{Prefix: strings.TrimSuffix(c.root, "/") + "-meta/"})
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = kv.Close() })
	return chain.NewStore(kv, chain.Options{})
}

// migrate asks the coordinator to move ch to the backend entry to.
func (c *e2eCluster) migrate(ctx context.Context, ch, to string) {
	layout, err := cluster.NewLayout(c.root)
	require.NoError(c.t, err)
	_, err = coordinator.RequestMigrate(ctx, c.ecli, layout, ch, to, "e2e")
	require.NoError(c.t, err)
}

// waitMigrated waits until ch's chain ends on to with nothing pending and
// its assignment is confirmed at the new segment's term.
func (c *e2eCluster) waitMigrated(ctx context.Context, chains *chain.Store, ch, to string) chain.Chain {
	t := c.t
	for {
		cur, err := chains.Get(ctx, ch)
		if err == nil && cur.Pending == nil && cur.Last().Backend.Name == to {
			_, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
				a := s.Assignments[ch].Value
				return a.Term >= cur.Last().FirstTerm && a.State == cluster.Assigned
			})
			require.NoError(t, err)
			return cur
		}
		// The chain is in etcd, which the view does not follow: wait for
		// the next change of the cluster (an assignment, an open report),
		// which every step of a migration makes, or a short tick.
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, _ = c.view.WaitFor(wctx, func(cluster.Snapshot) bool { return false })
		cancel()
		require.NoErrorf(t, ctx.Err(), "%s never migrated to %s (last read: %+v, %v)", ch, to, cur, err)
	}
}

// TestMigrationCrashes kills the one walnode of a cluster (its own
// -crash-after, a SIGKILL) right after each step of a migration of a
// channel that an appender keeps writing to through the client: after the
// fence, after the seal, after the new segment's open. The restarted node
// finishes the migration; every acknowledged append is read back exactly
// once and in order across the segments, and no segment took an append
// after its seal (a migration back and forth: local → kafka → local →
// kafka).
func TestMigrationCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs walnode processes")
	}
	c := newE2ECluster(t, 1, time.Second)
	base := slices.Clone(c.nodes["n1"].args)
	c.waitAssigned(6)
	chains := c.chains()
	const ch = "pch-0"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var acked []string
	appendSome := func(tag string, n int) { acked = append(acked, c.appendTagged(ctx, ch, tag, n)...) }
	appendSome("start", 10)
	to := "local" // -kafka makes kafka the default: channels begin there
	for _, step := range []string{"fenced", "sealed", "opened"} {
		// Restart the node armed to die after step.
		c.stop("n1", syscall.SIGTERM)
		c.nodes["n1"].args = append(slices.Clone(base), "-crash-after", step)
		c.start("n1")
		c.waitAssigned(6)
		appendSome("before-"+step, 10)
		c.migrate(ctx, ch, to)
		select {
		case <-c.nodes["n1"].done:
		case <-ctx.Done():
			require.FailNowf(t, "the node did not crash", "after %s", step)
		}
		c.nodes["n1"].cmd = nil
		c.nodes["n1"].args = slices.Clone(base)
		c.start("n1")
		cur := c.waitMigrated(ctx, chains, ch, to)
		require.NoError(t, cur.Validate())
		t.Logf("crash after %s: the restart finished the migration to %s (segment %d, term %d)", step, to, cur.Last().Index, cur.Last().FirstTerm)
		appendSome("after-"+step, 10)
		to = map[string]string{"local": "kafka", "kafka": "local"}[to]
	}
	got := c.readAll(ch, acked)
	require.Equal(t, acked, got, "every acknowledged append once, in order, across the segments")
	cur, err := chains.Get(ctx, ch)
	require.NoError(t, err)
	require.Len(t, cur.Segments, 4)
}

// TestMigrationZombie: the owner of a channel is stopped (SIGSTOP) with an
// appender sending straight to it; its lease expires and the channel moves,
// then migrates to another backend (sealed on Kafka, the zombie's); the
// stopped owner is continued. None of its appends after the stop is
// acknowledged, and none is delivered.
func TestMigrationZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("runs walnode processes")
	}
	c := newE2ECluster(t, 2, time.Second)
	snap := c.waitAssigned(6)
	var ch, victim string
	var term int64
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range snap.Assignments {
			if !yield(k) {
				return
			}
		}
	}) {
		ch, victim, term = name, snap.Assignments[name].Value.Node, snap.Assignments[name].Value.Term
		break
	}
	addr := snap.Nodes[victim].Value.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw := streamwalv1connect.NewWALServiceClient(http.DefaultClient, "http://"+addr)
	var acked []string
	for i := range 5 {
		p := fmt.Sprintf("before-%d", i)
		_, err := raw.Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: ch, Message: &streamwalv1.Message{Payload: []byte(p)}}))
		require.NoError(t, err)
		acked = append(acked, p)
	}

	// The zombie's appends, sent while it is stopped and after: each
	// waits in its kernel, then meets a fenced WAL or a lost channel.
	proc := c.nodes[victim].cmd.Process
	require.NoError(t, proc.Signal(syscall.SIGSTOP))
	zombie := make(chan error, 5)
	for i := range 5 {
		go func() {
			zctx, zcancel := context.WithTimeout(ctx, 20*time.Second)
			defer zcancel()
			_, err := raw.Append(zctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: ch,
				Message: &streamwalv1.Message{Payload: []byte(fmt.Sprintf("zombie-%d", i))}}))
			zombie <- err
		}()
	}
	_, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		a, ok := s.Assignments[ch]
		return ok && a.Value.Node != victim && a.Value.Term > term && a.Value.State == cluster.Assigned
	})
	require.NoError(t, err, "the stopped owner's channel never moved")
	chains := c.chains()
	c.migrate(ctx, ch, "local")
	cur := c.waitMigrated(ctx, chains, ch, "local")
	require.Equal(t, "kafka", cur.Segments[0].Backend.Name)
	_, err = c.cli.Append(ctx, ch, client.Message{Payload: []byte("after")}, client.Options{})
	require.NoError(t, err)
	acked = append(acked, "after")
	require.NoError(t, proc.Signal(syscall.SIGCONT))
	for range 5 {
		require.Error(t, <-zombie, "the zombie acknowledged an append")
	}
	for i := 0; i < 3; i++ {
		_, err := raw.Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: ch,
			Message: &streamwalv1.Message{Payload: []byte(fmt.Sprintf("late-%d", i))}}))
		require.Error(t, err, "the old owner acknowledged a late append")
	}
	_, err = c.cli.Append(ctx, ch, client.Message{Payload: []byte("marker")}, client.Options{})
	require.NoError(t, err)
	acked = append(acked, "marker")
	require.Equal(t, acked, c.readAll(ch, acked), "nothing the zombie sent is delivered")
}
