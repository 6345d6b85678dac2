package cluster_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdtest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(etcdtest.Main(m, srv))
}

func TestViewFollowsTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	_, err = cluster.NewLayout("no-slash")
	require.Error(t, err)

	_, err = cli.Put(ctx, l.Node("n1"), string(cluster.Encode(cluster.NodeInfo{ID: "n1", Addr: "127.0.0.1:1"})))
	require.NoError(t, err)
	v, err := cluster.Watch(ctx, cli, l, nil)
	require.NoError(t, err)
	defer v.Close()
	s, _ := v.Snapshot()
	require.Contains(t, s.Nodes, "n1", "the first list")

	lease, err := cli.Grant(ctx, 60)
	require.NoError(t, err)
	_, err = cli.Put(ctx, l.Node("n2"), string(cluster.Encode(cluster.NodeInfo{ID: "n2", Addr: "127.0.0.1:2"})), clientv3.WithLease(lease.ID))
	require.NoError(t, err)
	a := cluster.Assignment{Channel: "ch", Node: "n2", Term: 3, State: cluster.Assigning}
	_, err = cli.Put(ctx, l.Assignment("ch"), string(cluster.Encode(a)))
	require.NoError(t, err)
	s, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 && len(s.Assignments) == 1 })
	require.NoError(t, err)
	got, node, ok := s.Owner("ch")
	require.True(t, ok)
	require.Equal(t, a, got)
	require.Equal(t, "127.0.0.1:2", node.Addr)
	require.EqualValues(t, lease.ID, s.Nodes["n2"].Lease)

	// A corrupt value is left out, not fatal.
	_, err = cli.Put(ctx, l.Assignment("bad"), "not json")
	require.NoError(t, err)
	_, err = cli.Put(ctx, l.Opened("ch"), string(cluster.Encode(cluster.Opened{Channel: "ch", Node: "n2", Term: 3})))
	require.NoError(t, err)
	s, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Opened) == 1 })
	require.NoError(t, err)
	require.NotContains(t, s.Assignments, "bad")

	// The lease goes: the node goes.
	_, err = cli.Revoke(ctx, lease.ID)
	require.NoError(t, err)
	s, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	require.NoError(t, err)
	_, _, ok = s.Owner("ch")
	require.False(t, ok, "an assignment to a node that is gone has no owner")

	// Compacted under the watch: the view lists again and catches up.
	v.Close()
	v, err = cluster.Watch(ctx, cli, l, nil)
	require.NoError(t, err)
	defer v.Close()
	for i := range 20 {
		_, err := cli.Put(ctx, l.Drain(fmt.Sprintf("d%d", i)), string(cluster.Encode(cluster.DrainRequest{})))
		require.NoError(t, err)
	}
	resp, err := cli.Get(ctx, "x")
	require.NoError(t, err)
	_, err = cli.Compact(ctx, resp.Header.Revision)
	require.NoError(t, err)
	_, err = cli.Put(ctx, l.Move("ch"), string(cluster.Encode(cluster.MoveRequest{To: "n1"})))
	require.NoError(t, err)
	s, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Drains) == 20 && len(s.Moves) == 1 })
	require.NoError(t, err)
	require.Equal(t, "n1", s.Moves["ch"].Value.To)

	// Migrate requests are followed like moves, and go when deleted.
	req := cluster.MigrateRequest{To: "kafka", By: "walctl@test", At: time.Unix(1700000000, 0).UTC()}
	put, err := cli.Put(ctx, l.Migrate("ch"), string(cluster.Encode(req)))
	require.NoError(t, err)
	s, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Migrations) == 1 })
	require.NoError(t, err)
	require.Equal(t, req, s.Migrations["ch"].Value)
	require.Equal(t, put.Header.Revision, s.Migrations["ch"].Revision)
	require.Equal(t, "n1", s.Moves["ch"].Value.To, "a migrate request is not a move")
	_, err = cli.Delete(ctx, l.Migrate("ch"))
	require.NoError(t, err)
	_, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Migrations) == 0 })
	require.NoError(t, err)
}

func TestDecode(t *testing.T) {
	_, err := cluster.Decode[cluster.Assignment]("k", []byte(`{"v":2,"value":{}}`))
	require.ErrorIs(t, err, cluster.ErrCorrupt)
	require.Contains(t, err.Error(), "format version 2")
	_, err = cluster.Decode[cluster.Assignment]("k", []byte(`{`))
	require.ErrorIs(t, err, cluster.ErrCorrupt)
	a := cluster.Assignment{Channel: "c", Node: "n", Term: 9, State: cluster.Assigned, Previous: []cluster.Owner{{Node: "m", Term: 8}}}
	back, err := cluster.Decode[cluster.Assignment]("k", cluster.Encode(a))
	require.NoError(t, err)
	require.Equal(t, a, back)
	require.Error(t, cluster.ValidateNodeID("a b"))

	r := cluster.MoveRefusal{Request: 7, Reason: "why", Kind: cluster.RefusedMigrate}
	backR, err := cluster.Decode[cluster.MoveRefusal]("k", cluster.Encode(r))
	require.NoError(t, err)
	require.Equal(t, r, backR)
	old, err := cluster.Decode[cluster.MoveRefusal]("k", []byte(`{"v":1,"value":{"request":3,"reason":"x"}}`))
	require.NoError(t, err)
	require.Equal(t, cluster.MoveRefusal{Request: 3, Reason: "x"}, old, "a move's refusal has no kind")
	require.Equal(t, "/r/requests/migrate/ch", cluster.Layout{Root: "/r/"}.Migrate("ch"))
}

func TestLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t))
	require.NoError(t, err)
	a := cluster.Assignment{Channel: "ch", Node: "n1", Term: 2, State: cluster.Assigned}
	put, err := cli.Put(ctx, l.Assignment("ch"), string(cluster.Encode(a)))
	require.NoError(t, err)
	_, err = cli.Put(ctx, l.Assignment("bad"), "not json")
	require.NoError(t, err)
	s, err := cluster.Load(ctx, cli, l, nil)
	require.NoError(t, err)
	require.Equal(t, a, s.Assignments["ch"].Value)
	require.Equal(t, put.Header.Revision, s.Assignments["ch"].Revision)
	require.NotContains(t, s.Assignments, "bad", "a corrupt value is left out")
	require.GreaterOrEqual(t, s.Revision, put.Header.Revision)
	require.Empty(t, s.Nodes)
}
