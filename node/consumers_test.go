package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/retention"
)

// consumersEnv is a cluster's nodes in chain mode with the consumers'
// checkpoints beside the chains, in etcd.
type consumersEnv struct {
	def    string // where channels begin: the first kind
	c      *testCluster
	b      *backendstest.Backends
	chains *chain.Store
	store  *consumers.Store
}

func newConsumersEnv(t testing.TB, kinds ...string) *consumersEnv {
	c := newTestCluster(t)
	kv, err := etcdstore.New(c.cli, etcdstore.Options{Prefix: etcdtest.Prefix(t) + "meta/"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	store, err := consumers.NewStore(kv, consumers.Options{})
	require.NoError(t, err)
	return &consumersEnv{def: kinds[0], c: c, b: backendstest.Start(t, kinds...), chains: chain.NewStore(kv, chain.Options{}), store: store}
}

// node starts a node whose retainer runs a round soon after each commit
// (and every owned channel's once an hour).
func (e *consumersEnv) node(id string, rc retention.Config) *node.Node {
	t := e.c.t
	def := e.def
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe(def)
	require.NoError(t, err)
	if rc.Interval == 0 {
		rc.Interval = time.Hour
	}
	if rc.CommitDelay == 0 {
		rc.CommitDelay = time.Millisecond
	}
	n, err := node.New(e.c.cli, e.b.Entry(def), node.Config{ID: id, Root: e.c.layout.Root, SessionTTL: 2 * time.Second, Backend: def,
		Chains:    &chainwal.Config{Store: e.chains, Openers: entries, Default: d, Describe: entries.Describe},
		Consumers: e.store, Retention: rc})
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

// appendAndRead appends payloads to channel at n, and returns every
// message a read from the start delivers up to the tail.
func appendAndRead(t *testing.T, n *node.Node, channel string, payloads ...string) []*streamwalv1.Delivered {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, p := range payloads {
		_, err := apiClient(n).Append(ctx, appendReq(channel, p, ""))
		require.NoError(t, err)
	}
	stream, err := apiClient(n).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: channel, UntilCaughtUp: true}))
	require.NoError(t, err)
	got, _ := readAll(t, stream, -1)
	require.NoError(t, stream.Err())
	return got
}

func names(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// commitRefusal returns the CommitRefused detail of a refused commit.
func commitRefusal(t *testing.T, err error) *streamwalv1.CommitRefused {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if r, ok := v.(*streamwalv1.CommitRefused); ok {
			return r
		}
	}
	require.FailNow(t, "no CommitRefused detail", "%v", err)
	return nil
}

// A consumer commits through the owner; the owner truncates the log at
// the slowest consumer's checkpoint, reports what it retains and who
// holds it back, and refuses commits that move backwards, go beyond the
// log or do not decode.
func TestCommitReleasesTheLog(t *testing.T) {
	e := newConsumersEnv(t, "memory")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := e.node("n1", retention.Config{})
	e.node("n2", retention.Config{})
	e.c.assign("ch", "n1", 1)
	api := apiClient(n1)

	// Two batches, a watermark (the read's tail) between them.
	appendAndRead(t, n1, "ch", names("a", 0, 10)...)
	all := appendAndRead(t, n1, "ch", names("b", 0, 10)...)
	require.Len(t, all, 20)

	commit := func(consumer, vchannel, cp string) (*connect.Response[streamwalv1.CommitResponse], error) {
		return api.Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: "ch", Consumer: consumer, Vchannel: vchannel, Checkpoint: cp}))
	}
	// The indexer first: a consumer that commits later than another may
	// find the log truncated at that one's checkpoint already.
	_, err := commit("indexer", "", all[12].GetCheckpoint())
	require.NoError(t, err)
	res, err := commit("flusher", "", all[15].GetCheckpoint())
	require.NoError(t, err)
	require.Equal(t, all[15].GetCheckpoint(), res.Msg.GetCommitted().GetCheckpoint())
	require.EqualValues(t, 1, res.Msg.GetCommitted().GetTerm())

	// The owner truncates at the slowest, soon after the commit.
	var ret *streamwalv1.Retention
	waitUntil(t, func() bool {
		st, err := api.Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
		require.NoError(t, err)
		for _, cs := range st.Msg.GetChannels() {
			if cs.GetName() == "ch" && cs.GetRetention().GetTruncatedTo() != "" {
				ret = cs.GetRetention()
			}
		}
		return ret != nil && ret.GetHeldBy() == "consumer indexer"
	})
	require.Equal(t, all[12].GetCheckpoint(), ret.GetTruncatedTo())
	require.LessOrEqual(t, ret.GetMessages(), uint64(20))
	require.Positive(t, ret.GetBytes())
	require.Len(t, ret.GetSegments(), 1)
	require.Equal(t, "memory", ret.GetSegments()[0].GetBackend())

	// What lies before the first batch's watermark is gone.
	stream, err := api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true,
		Start: &streamwalv1.ReadRequest_AfterCheckpoint{AfterCheckpoint: all[2].GetCheckpoint()}}))
	require.NoError(t, err)
	readAll(t, stream, -1)
	require.Equal(t, connect.CodeOutOfRange, connect.CodeOf(stream.Err()), "a checkpoint before the truncation is gone: %v", stream.Err())
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true,
		Start: &streamwalv1.ReadRequest_AfterCheckpoint{AfterCheckpoint: all[12].GetCheckpoint()}}))
	require.NoError(t, err)
	rest, _ := readAll(t, stream, -1)
	require.NoError(t, stream.Err())
	require.Equal(t, names("b", 3, 10), payloads(rest), "everything after the slowest checkpoint is kept")

	// Checkpoints lists both, the slowest holding.
	cps, err := api.Checkpoints(ctx, connect.NewRequest(&streamwalv1.CheckpointsRequest{Channel: "ch"}))
	require.NoError(t, err)
	require.Len(t, cps.Msg.GetConsumers(), 2)
	for _, c := range cps.Msg.GetConsumers() {
		require.Equal(t, c.GetConsumer() == "indexer", c.GetHolding(), c.GetConsumer())
	}
	require.NotNil(t, cps.Msg.GetRetention())

	// Refusals, each with its reason and nothing stored.
	_, err = commit("flusher", "", all[14].GetCheckpoint())
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	r := commitRefusal(t, err)
	require.Equal(t, "backwards", r.GetReason())
	require.Equal(t, all[15].GetCheckpoint(), r.GetStored().GetCheckpoint())
	_, err = commit("late", "", all[1].GetCheckpoint())
	require.Equal(t, "truncated", commitRefusal(t, err).GetReason())
	_, err = commit("flusher", "", "no checkpoint")
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.Equal(t, "invalid", commitRefusal(t, err).GetReason())
	last := all[19].GetCheckpoint()
	var tt uint64
	var pos string
	_, err = fmt.Sscanf(last, "%d@%s", &tt, &pos)
	require.NoError(t, err)
	_, err = commit("flusher", "", fmt.Sprintf("%d@%s", tt+1<<30, pos))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.Equal(t, "beyond", commitRefusal(t, err).GetReason())
	_, err = commit("bad/name", "", last)
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = apiClient(n1).Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: "other", Consumer: "x", Checkpoint: last}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "not the owner")
	stored, err := e.store.Load(ctx, "ch")
	require.NoError(t, err)
	require.Len(t, stored.Consumers, 2, "no refused commit was stored")

	// /admin/channels carries the same.
	resp, err := http.Get("http://" + n1.Addr() + "/admin/channels?channel=ch")
	require.NoError(t, err)
	defer resp.Body.Close()
	var rep struct {
		Channels []struct {
			Retention struct {
				HeldBy   string `json:"held_by"`
				Messages int64  `json:"messages"`
				Segments []struct {
					Backend string `json:"backend"`
				} `json:"segments"`
			} `json:"retention"`
		} `json:"channels"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	require.Len(t, rep.Channels, 1)
	require.Equal(t, "consumer indexer", rep.Channels[0].Retention.HeldBy)
	require.Equal(t, "memory", rep.Channels[0].Retention.Segments[0].Backend)
}

// The release moves with the channel: after a move, the new owner's
// retainer truncates at the checkpoints committed through the old one, and
// a commit through the old owner is refused.
func TestReleaseMovesWithTheChannel(t *testing.T) {
	e := newConsumersEnv(t, "memory")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := e.node("n1", retention.Config{})
	n2 := e.node("n2", retention.Config{})
	e.c.assign("ch", "n1", 1)
	appendAndRead(t, n1, "ch", names("a", 0, 10)...)
	all := appendAndRead(t, n1, "ch", names("b", 0, 10)...)
	_, err := apiClient(n1).Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: "ch", Consumer: "f", Checkpoint: all[11].GetCheckpoint()}))
	require.NoError(t, err)

	e.c.assign("ch", "n2", 2)
	_, err = apiClient(n1).Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: "ch", Consumer: "f", Checkpoint: all[12].GetCheckpoint()}))
	require.Error(t, err, "the old owner takes no commit")
	res, err := apiClient(n2).Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: "ch", Consumer: "f", Checkpoint: all[13].GetCheckpoint()}))
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Msg.GetCommitted().GetTerm())
	waitUntil(t, func() bool {
		cps, err := apiClient(n2).Checkpoints(ctx, connect.NewRequest(&streamwalv1.CheckpointsRequest{Channel: "ch"}))
		require.NoError(t, err)
		return cps.Msg.GetRetention().GetTruncatedTo() == all[13].GetCheckpoint()
	})
	got := appendAndRead(t, n2, "ch")
	require.Equal(t, "b4", string(got[0].GetPayload()), "truncated by the new owner at the committed checkpoint")
}

// waitUntil waits for cond within the test's timeout, checking it every
// few milliseconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition never held")
		time.Sleep(5 * time.Millisecond)
	}
}
