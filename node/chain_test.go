package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
)

// chainNode starts a node in chain mode over backends b, chains in store,
// new channels on def; each of tweaks changes its configuration.
func (c *testCluster) chainNode(id string, b *backendstest.Backends, store *chain.Store, def string, reg *prometheus.Registry, tweaks ...func(*node.Config)) *node.Node {
	t := c.t
	entries := chainread.LookupFunc(b.Lookup)
	d, err := entries.Describe(def)
	require.NoError(t, err)
	cfg := node.Config{ID: id, Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: def,
		Chains: &chainwal.Config{Store: store, Openers: entries, Default: d, Describe: entries.Describe}}
	if reg != nil {
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	n, err := node.New(c.cli, b.Entry(def), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
	})
	return n
}

// TestChainMigrationByAssignment: in chain mode, a migration is an intent
// in the chain and an assignment at its term: the node assigned opens the
// channel on the new backend (sealing the old segment on its way), serves
// every append before and after the seal in one read, and the old owner
// can append no more. A node that starts later reports the channel as off
// its default backend.
func TestChainMigrationByAssignment(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	kv, err := etcdstore.New(c.cli, etcdstore.Options{Prefix: etcdtest.Prefix(t) + "meta/"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	store := chain.NewStore(kv, chain.Options{})
	b := backendstest.Start(t, "memory", "kafka")
	n1 := c.chainNode("n1", b, store, "memory", nil)
	n2 := c.chainNode("n2", b, store, "memory", nil)

	c.assign("ch", "n1", 1)
	var want []string
	appendTo := func(n *node.Node, k int) {
		for i := range k {
			p := fmt.Sprintf("m%d", len(want))
			_, err := apiClient(n).Append(ctx, appendReq("ch", p, fmt.Sprintf("key-%d", len(want))))
			require.NoError(t, err, "append %d", i)
			want = append(want, p)
		}
	}
	appendTo(n1, 10)

	// The intent at term 2, then the assignment at term 2 to the other node.
	_, err = store.BeginMigration(ctx, "ch", chain.MigrationRequest{Segment: 0, Target: chain.Backend{Name: "kafka", Kind: "kafka",
		Channel: chainwal.SegmentChannel("ch", 1)}, Term: 2, By: "test"})
	require.NoError(t, err)
	c.assign("ch", "n2", 2)
	cur, err := store.Get(ctx, "ch")
	require.NoError(t, err)
	require.Len(t, cur.Segments, 2)
	require.Equal(t, "kafka", cur.Last().Backend.Name)
	require.Equal(t, int64(2), cur.Segments[0].Seal.Term)

	_, err = apiClient(n1).Append(ctx, appendReq("ch", "stale", ""))
	require.Error(t, err, "the old owner appended after the seal")
	appendTo(n2, 10)

	stream, err := apiClient(n2).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true}))
	require.NoError(t, err)
	got, _ := readAll(t, stream, -1)
	require.NoError(t, stream.Err())
	require.Equal(t, want, payloads(got))
	// A position of segment 0 resumes on the new owner.
	stream, err = apiClient(n2).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true,
		Start: &streamwalv1.ReadRequest_StartAfter{StartAfter: got[4].GetId()}}))
	require.NoError(t, err)
	rest, _ := readAll(t, stream, -1)
	require.Equal(t, want[5:], payloads(rest))

	reg := prometheus.NewRegistry()
	c.chainNode("n3", b, store, "memory", reg)
	require.Equal(t, 1.0, gaugeOf(t, reg, "streamwal_node_channels_off_default"))
}

// gaugeOf returns the value of the gauge name registered in reg.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	require.FailNow(t, "no metric "+name)
	return 0
}

// TestReportsOutliveTheLease: the node's open reports live under its
// lease; when the lease is lost (revoked here, as an expiry under load
// would end it) and the node registers again, it writes them again, or
// the coordinator would take its channels for unopened.
func TestReportsOutliveTheLease(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c.startNode("n1")
	c.assign("ch", "n1", 1)
	kv, err := c.cli.Get(ctx, c.layout.Node("n1"))
	require.NoError(t, err)
	require.Len(t, kv.Kvs, 1)
	_, err = c.cli.Revoke(ctx, clientv3.LeaseID(kv.Kvs[0].Lease))
	require.NoError(t, err)
	_, err = c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		n, ok := s.Nodes["n1"]
		o, opened := s.Opened["ch"]
		return ok && n.Revision > kv.Kvs[0].ModRevision && opened && o.Value.Term == 1 && o.Revision > kv.Kvs[0].ModRevision
	})
	require.NoError(t, err, "the open report was not written again under the new lease")
}
