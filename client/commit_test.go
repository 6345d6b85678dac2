package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	crdb "github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// consumerCluster is a cluster whose nodes keep consumers' checkpoints: in
// chain mode on a shared memory backend, checkpoints and chains in etcd.
type consumerCluster struct {
	t      *testing.T
	cli    *clientv3.Client
	layout cluster.Layout
	b      *backendstest.Backends
	chains *chain.Store
	store  *consumers.Store
}

func newConsumerCluster(t *testing.T) *consumerCluster {
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	kv, err := etcdstore.New(cli, etcdstore.Options{Prefix: etcdtest.Prefix(t) + "meta/"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	store, err := consumers.NewStore(kv, consumers.Options{})
	require.NoError(t, err)
	return &consumerCluster{t: t, cli: cli, layout: l, b: backendstest.Start(t, "memory"), chains: chain.NewStore(kv, chain.Options{}), store: store}
}

// node starts a node whose retainer runs a round right after each commit;
// stop stops it (also at cleanup).
func (cc *consumerCluster) node(id string) (n *node.Node, stop func()) {
	t := cc.t
	entries := chainread.LookupFunc(cc.b.Lookup)
	d, err := entries.Describe("memory")
	require.NoError(t, err)
	n, err = node.New(cc.cli, cc.b.Entry("memory"), node.Config{ID: id, Root: cc.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory",
		Chains:    &chainwal.Config{Store: cc.chains, Openers: entries, Default: d, Describe: entries.Describe},
		Consumers: cc.store, Retention: retention.Config{Interval: time.Hour, CommitDelay: time.Millisecond}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, n.Start(ctx))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			require.NoError(t, n.Shutdown(ctx))
		})
	}
	t.Cleanup(stop)
	return n, stop
}

// appendAll appends payloads through c and returns what a read from the
// start delivers.
func appendAll(ctx context.Context, t *testing.T, c *client.Client, channel string, m client.Message, payloads ...string) []*streamwalv1.Delivered {
	return appendAfter(ctx, t, c, channel, "", m, payloads...)
}

// appendAfter appends payloads through c and returns what a read after
// the checkpoint after ("" : from the start) delivers. A read from the
// start races with the retainer once a consumer committed: it may begin
// at a message the retainer then truncates.
func appendAfter(ctx context.Context, t *testing.T, c *client.Client, channel, after string, m client.Message, payloads ...string) []*streamwalv1.Delivered {
	for _, p := range payloads {
		m.Payload = []byte(p)
		_, err := c.Append(ctx, channel, m, client.Options{})
		require.NoError(t, err)
	}
	var got []*streamwalv1.Delivered
	require.NoError(t, c.Read(ctx, channel, client.ReadOptions{After: after, UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
		got = append(got, d)
		return nil
	}))
	return got
}

// beyond returns a checkpoint of the same form as cp, far after it.
func beyond(t *testing.T, cp string) string {
	var tt uint64
	var pos string
	_, err := fmt.Sscanf(cp, "%d@%s", &tt, &pos)
	require.NoError(t, err)
	return fmt.Sprintf("%d@%s", tt+1<<30, pos)
}

// A consumer commits through the client, which finds the owner and
// follows it; refusals are sentinels the standard library's errors.Is
// sees, with the stored checkpoint; a restarted consumer reads its
// Checkpoint and resumes after it; a commit repeated after an unknown
// outcome succeeds.
func TestCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cc := newConsumerCluster(t)
	_, stopA := cc.node("a")
	b, _ := cc.node("b")
	cc.node("c")
	assign(t, cc.cli, cc.layout, "orders", "a", 1)
	c, err := client.New(ctx, client.Config{Etcd: cc.cli, Root: cc.layout.Root})
	require.NoError(t, err)
	defer c.Close()
	var payloads []string
	for i := range 20 {
		payloads = append(payloads, fmt.Sprintf("m%02d", i))
	}
	ds := appendAll(ctx, t, c, "orders", client.Message{}, payloads...)
	require.Len(t, ds, 20)

	// No checkpoint yet: the consumer starts from the first message kept.
	_, err = c.Checkpoint(ctx, "orders", "indexer", "")
	require.True(t, errors.Is(err, client.ErrNoCheckpoint), "%v", err)

	got, err := c.Commit(ctx, "orders", "indexer", ds[12].GetCheckpoint(), client.CommitOptions{})
	require.NoError(t, err)
	require.Equal(t, "indexer", got.Consumer)
	require.Equal(t, ds[12].GetCheckpoint(), got.Checkpoint)
	require.Equal(t, ds[12].GetCheckpoint(), got.Resume)
	require.EqualValues(t, 1, got.Term)
	require.False(t, got.At.IsZero())
	again, err := c.Commit(ctx, "orders", "indexer", ds[12].GetCheckpoint(), client.CommitOptions{})
	require.NoError(t, err, "the stored checkpoint again changes nothing")
	require.Equal(t, got, again)

	// Backwards: a stale consumer.
	_, err = c.Commit(ctx, "orders", "indexer", ds[10].GetCheckpoint(), client.CommitOptions{})
	require.True(t, errors.Is(err, client.ErrCheckpointBackwards), "%v", err)
	require.True(t, errors.Is(err, client.ErrRefused), "%v", err)
	require.False(t, errors.Is(err, client.ErrCheckpointTruncated), "%v", err)
	require.True(t, crdb.Is(err, client.ErrCheckpointBackwards) && crdb.Is(err, client.ErrRefused), "cockroachdb's errors.Is too: %v", err)
	require.False(t, crdb.Is(err, client.ErrCheckpointTruncated), "%v", err)
	var refused *client.CommitRefusedError
	require.True(t, errors.As(err, &refused))
	require.Equal(t, client.RefusedBackwards, refused.Reason)
	require.NotNil(t, refused.Stored)
	require.Equal(t, ds[12].GetCheckpoint(), refused.Stored.Checkpoint)
	require.Equal(t, ds[12].GetCheckpoint(), refused.ResumeAt())
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "the node's answer stays visible")

	// Beyond the log, a checkpoint that is none, a bad name: ErrRefused.
	for _, tc := range []struct{ consumer, cp, reason string }{
		{"indexer", beyond(t, ds[19].GetCheckpoint()), client.RefusedBeyond},
		{"indexer", "no checkpoint", client.RefusedInvalid},
		{"bad/name", ds[19].GetCheckpoint(), client.RefusedInvalid},
	} {
		_, err = c.Commit(ctx, "orders", tc.consumer, tc.cp, client.CommitOptions{})
		require.True(t, errors.Is(err, client.ErrRefused), "%s: %v", tc.cp, err)
		require.False(t, errors.Is(err, client.ErrCheckpointBackwards), "%v", err)
		require.True(t, errors.As(err, &refused), "%v", err)
		require.Equal(t, tc.reason, refused.Reason, "%v", err)
	}

	// The owner truncates at the only consumer's checkpoint; a commit
	// before it is refused as truncated.
	var cps client.ChannelCheckpoints
	require.Eventually(t, func() bool {
		cps, err = c.Checkpoints(ctx, "orders")
		require.NoError(t, err)
		return cps.Retention != nil && cps.Retention.TruncatedTo == ds[12].GetCheckpoint()
	}, testTimeout, 5*time.Millisecond)
	require.Equal(t, "consumer indexer", cps.Retention.HeldBy)
	require.Len(t, cps.Retention.Segments, 1)
	require.Len(t, cps.Consumers, 1)
	require.True(t, cps.Consumers[0].Holding)
	_, err = c.Commit(ctx, "orders", "late", ds[1].GetCheckpoint(), client.CommitOptions{})
	require.True(t, errors.Is(err, client.ErrCheckpointTruncated), "%v", err)
	require.True(t, errors.Is(err, client.ErrRefused), "%v", err)
	require.True(t, errors.As(err, &refused))
	require.Nil(t, refused.Stored)
	require.Equal(t, ds[12].GetCheckpoint(), refused.TruncatedTo)
	require.Empty(t, refused.ResumeAt(), "no checkpoint: from the first message kept")

	// A restarted consumer resumes after its checkpoint.
	resume, err := c.Checkpoint(ctx, "orders", "indexer", "")
	require.NoError(t, err)
	var rest []string
	require.NoError(t, c.Read(ctx, "orders", client.ReadOptions{After: resume, UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
		rest = append(rest, string(d.GetPayload()))
		return nil
	}))
	require.Equal(t, payloads[13:], rest)

	// The channel moves and its old owner stops: the client commits
	// through the new owner. (An old owner that has not seen the move yet
	// may still store a commit at its term: that is allowed, and would
	// make this test's term depend on timing.)
	assign(t, cc.cli, cc.layout, "orders", "b", 2)
	stopA()
	got, err = c.Commit(ctx, "orders", "indexer", ds[15].GetCheckpoint(), client.CommitOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Term)

	// An attempt whose answer was lost stored ds[17] at b; the channel
	// moves on; the same commit sent again succeeds with what is stored.
	direct := streamwalv1connect.NewWALServiceClient(http.DefaultClient, "http://"+b.Addr())
	_, err = direct.Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: "orders", Consumer: "indexer", Checkpoint: ds[17].GetCheckpoint()}))
	require.NoError(t, err)
	assign(t, cc.cli, cc.layout, "orders", "c", 3)
	got, err = c.Commit(ctx, "orders", "indexer", ds[17].GetCheckpoint(), client.CommitOptions{})
	require.NoError(t, err)
	require.Equal(t, ds[17].GetCheckpoint(), got.Checkpoint)
	require.EqualValues(t, 2, got.Term, "stored by the first attempt")

	// A consumer of one vchannel has a checkpoint of its own.
	vds := appendAfter(ctx, t, c, "orders", ds[17].GetCheckpoint(), client.Message{VChannel: "v1"}, "v-a", "v-b")
	last := vds[len(vds)-1]
	require.Equal(t, "v1", last.GetVchannel())
	got, err = c.Commit(ctx, "orders", "indexer", last.GetCheckpoint(), client.CommitOptions{VChannel: "v1"})
	require.NoError(t, err)
	require.Equal(t, "v1", got.VChannel)
	resume, err = c.Checkpoint(ctx, "orders", "indexer", "v1")
	require.NoError(t, err)
	require.Equal(t, last.GetCheckpoint(), resume)
	cps, err = c.Checkpoints(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, cps.Consumers, 2)
	require.Equal(t, "", cps.Consumers[0].VChannel, "the whole channel's consumers first")
	require.Equal(t, "v1", cps.Consumers[1].VChannel)
}

// A commit that cannot reach an owner before its context ends says so,
// with the context's error visible to errors.Is; a node without
// checkpoints refuses at once.
func TestCommitNoOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root})
	require.NoError(t, err)
	defer c.Close()
	short, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer scancel()
	_, err = c.Commit(short, "nowhere", "x", "1@s0/1", client.CommitOptions{})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.False(t, errors.Is(err, client.ErrRefused), "%v", err)

	startNode(t, cli, l.Root, memory.NewCluster(), "plain")
	assign(t, cli, l, "orders", "plain", 1)
	_, err = c.Commit(ctx, "orders", "x", "1@s0/1", client.CommitOptions{})
	require.True(t, errors.Is(err, client.ErrRefused), "%v", err)
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%v", err)
}
