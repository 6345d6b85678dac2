package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
)

// migrationEnv is a cluster in chain mode over memory and kafka, channels
// beginning on memory.
type migrationEnv struct {
	*testCluster
	b     *backendstest.Backends
	store *chain.Store
}

func newMigrationEnv(t *testing.T) *migrationEnv {
	c := newTestCluster(t)
	kv, err := etcdstore.New(c.cli, etcdstore.Options{Prefix: etcdtest.Prefix(t) + "meta/"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	return &migrationEnv{testCluster: c, b: backendstest.Start(t, "memory", "kafka"), store: chain.NewStore(kv, chain.Options{})}
}

// migrate moves ch, at term, to a new segment on the backend entry to
// (memory or kafka), opened by owner: the intent in the chain, then the
// assignment (which waits for the open).
func (e *migrationEnv) migrate(ctx context.Context, ch, to, owner string, term int64) {
	t := e.t
	cur, err := e.store.Get(ctx, ch)
	require.NoError(t, err)
	last := cur.Last().Index
	_, err = e.store.BeginMigration(ctx, ch, chain.MigrationRequest{Segment: last, Target: chain.Backend{Name: to, Kind: to,
		Channel: chainwal.SegmentChannel(ch, last+1)}, Term: term, By: "test"})
	require.NoError(t, err)
	e.assign(ch, owner, term)
}

// appendSome appends n messages to ch on node n, keys and payloads
// numbered after want's, and returns want with them.
func appendSome(ctx context.Context, t *testing.T, n *node.Node, ch string, want []string, k int) []string {
	for range k {
		p := fmt.Sprintf("m%03d", len(want))
		_, err := apiClient(n).Append(ctx, appendReq(ch, p, "key-"+p))
		require.NoError(t, err, "append %s", p)
		want = append(want, p)
	}
	return want
}

// A raw Read stream (not the Go client) that follows the tail stays open
// across a migration of its channel on the same node: the manager closes
// the old term's WAL as it opens the migration's, and the read goes on
// with the new one after the last message it delivered - every message
// once, in order, the new segment's after the old one's.
func TestReadFollowsMigrationOnTheNode(t *testing.T) {
	e := newMigrationEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := e.chainNode("n1", e.b, e.store, "memory", nil)
	e.assign("ch", "n1", 1)
	want := appendSome(ctx, t, n1, "ch", nil, 10)

	stream, err := apiClient(n1).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch"}))
	require.NoError(t, err)
	defer func() { _ = stream.Close() }()
	got, _ := readAll(t, stream, 10)

	e.migrate(ctx, "ch", "kafka", "n1", 2)
	want = appendSome(ctx, t, n1, "ch", want, 5)
	e.migrate(ctx, "ch", "memory", "n1", 3)
	want = appendSome(ctx, t, n1, "ch", want, 5)
	more, _ := readAll(t, stream, len(want)-len(got))
	require.NoError(t, stream.Err(), "the stream ended at the seal")
	got = append(got, more...)
	require.Equal(t, want, payloads(got), "every message once, in order, across the seals")
	cur, err := e.store.Get(ctx, "ch")
	require.NoError(t, err)
	require.Len(t, cur.Segments, 3)
	for i, d := range got[1:] {
		require.Equal(t, got[i].GetCheckpoint(), d.GetPosition(), "message %d's position is the checkpoint of the one before", i+1)
	}
}

// An until_caught_up read that has not reached its tail when its channel
// migrates on the same node goes on with the new term's WAL up to that
// same tail: it delivers what was acknowledged before it started, once,
// flags caught_up and ends OK, not at the seal. The stream is held back
// (its client reads nothing, and more is pending than the connection
// buffers) while the migration happens.
func TestReadUntilCaughtUpAcrossMigration(t *testing.T) {
	e := newMigrationEnv(t)
	// 32 MiB through the node under -race takes 15-20 s of an idle 2-core
	// machine, and twice that on a loaded one: a deadline that bounds a
	// failure, not the pace.
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	var switched atomic.Int32
	n1 := e.chainNode("n1", e.b, e.store, "memory", nil, func(cfg *node.Config) {
		cfg.Logger = slog.New(onMessage{msg: "read goes on at a newer term", n: &switched})
	})
	e.assign("ch", "n1", 1)
	// 32 MiB pending: more than the connection's buffers hold.
	const count, size = 64, 512 << 10
	var want []string
	for i := range count {
		p := fmt.Sprintf("%03d-%s", i, strings.Repeat("x", size))
		_, err := apiClient(n1).Append(ctx, appendReq("ch", p, ""))
		require.NoError(t, err)
		want = append(want, p[:3])
	}
	stream, err := apiClient(n1).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true, Batch: 1}))
	require.NoError(t, err)
	defer func() { _ = stream.Close() }()
	require.True(t, stream.Receive(), "first response: %v", stream.Err())
	got := stream.Msg().GetMessages()

	e.migrate(ctx, "ch", "kafka", "n1", 2)
	_ = appendSome(ctx, t, n1, "ch", nil, 3) // after the read's tail: not delivered
	more, caughtAt := readAll(t, stream, -1)
	require.NoError(t, stream.Err(), "the read did not end OK")
	got = append(got, more...)
	var short []string
	for _, p := range payloads(got) {
		short = append(short, p[:3])
	}
	require.Equal(t, want, short, "what was acknowledged before the read, once, in order")
	require.Equal(t, len(got)-1, caughtAt, "caught_up on the last response")
	require.Positive(t, switched.Load(), "the read never went on with the new term's WAL: the test did not hold it back")
}

// A read whose channel moves to another node (here by a migration that
// node opens) ends with an error naming the new owner, not with OK, which
// a consumer would take for the end of the channel.
func TestReadEndsWithWrongNodeWhenTheChannelMoves(t *testing.T) {
	e := newMigrationEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := e.chainNode("n1", e.b, e.store, "memory", nil)
	n2 := e.chainNode("n2", e.b, e.store, "memory", nil)
	e.assign("ch", "n1", 1)
	want := appendSome(ctx, t, n1, "ch", nil, 5)
	stream, err := apiClient(n1).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch"}))
	require.NoError(t, err)
	defer func() { _ = stream.Close() }()
	got, _ := readAll(t, stream, len(want))
	require.Equal(t, want, payloads(got))

	e.migrate(ctx, "ch", "kafka", "n2", 2)
	more, _ := readAll(t, stream, -1)
	require.Empty(t, more)
	err = stream.Err()
	require.Error(t, err, "the stream ended OK")
	require.Contains(t, []connect.Code{connect.CodeFailedPrecondition, connect.CodeUnavailable}, connect.CodeOf(err), "%v", err)
	wn, _ := outcome(t, err)
	require.NotNil(t, wn, "no WrongNode detail: %v", err)
	require.Equal(t, "n2", wn.GetOwner())
	require.Equal(t, n2.Addr(), wn.GetOwnerAddr())
	require.EqualValues(t, 2, wn.GetTerm())
}

// onMessage is a log handler that counts the records of one message.
type onMessage struct {
	msg string
	n   *atomic.Int32
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h onMessage) WithGroup(string) slog.Handler            { return h }

func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
