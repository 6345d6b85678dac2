package node_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
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

const testTimeout = 30 * time.Second

type testCluster struct {
	t      testing.TB
	cli    *clientv3.Client
	layout cluster.Layout
	mem    *memory.Cluster
	view   *cluster.View
}

func newTestCluster(t testing.TB) *testCluster {
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	v, err := cluster.Watch(ctx, cli, l, nil)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return &testCluster{t: t, cli: cli, layout: l, mem: memory.NewCluster(), view: v}
}

// startNode starts a node on the shared memory backend.
func (c *testCluster) startNode(id string) *node.Node {
	return c.startNodeWith(id, nodeSetup{})
}

// nodeSetup is what startNodeWith changes; its zero value changes nothing.
type nodeSetup struct {
	stallAfter time.Duration                         // Config.StallAfter
	wrap       func(walimpls.Opener) walimpls.Opener // wraps the backend's opener
	setup      func(*node.Node)                      // called before Start
}

// startNodeWith starts a node on the shared memory backend, set up by ns.
func (c *testCluster) startNodeWith(id string, ns nodeSetup) *node.Node {
	t := c.t
	mo, err := memory.New(context.Background(), memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	var o walimpls.Opener = mo
	if ns.wrap != nil {
		o = ns.wrap(mo)
	}
	n, err := node.New(c.cli, o, node.Config{ID: id, Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory", StallAfter: ns.stallAfter})
	require.NoError(t, err)
	if ns.setup != nil {
		ns.setup(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
		_ = o.Close()
	})
	return n
}

// assign writes an assignment as the coordinator would, and waits until the
// node reports the channel open.
func (c *testCluster) assign(channel, nodeID string, term int64) {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	a := cluster.Assignment{Channel: channel, Node: nodeID, Term: term, State: cluster.Assigning}
	_, err := c.cli.Put(ctx, c.layout.Assignment(channel), string(cluster.Encode(a)))
	require.NoError(t, err)
	_, err = c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		o, ok := s.Opened[channel]
		return ok && o.Value.Node == nodeID && o.Value.Term == term
	})
	require.NoError(t, err, "node %s never reported %s open at term %d", nodeID, channel, term)
	require.Empty(t, mustOpened(c, channel).Error)
}

func mustOpened(c *testCluster, channel string) cluster.Opened {
	s, _ := c.view.Snapshot()
	return s.Opened[channel].Value
}

func apiClient(n *node.Node) streamwalv1connect.WALServiceClient {
	return streamwalv1connect.NewWALServiceClient(http.DefaultClient, "http://"+n.Addr())
}

func appendReq(channel, payload, key string) *connect.Request[streamwalv1.AppendRequest] {
	return connect.NewRequest(&streamwalv1.AppendRequest{Channel: channel, Key: key,
		Message: &streamwalv1.Message{Payload: []byte(payload), Properties: map[string]string{"p": payload}}})
}

func outcome(t *testing.T, err error) (*streamwalv1.WrongNode, *streamwalv1.Outcome) {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	var wn *streamwalv1.WrongNode
	var oc *streamwalv1.Outcome
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		switch x := v.(type) {
		case *streamwalv1.WrongNode:
			wn = x
		case *streamwalv1.Outcome:
			oc = x
		}
	}
	return wn, oc
}

func TestOwnershipFollowsAssignments(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1, n2 := c.startNode("n1"), c.startNode("n2")
	c.assign("orders", "n1", 1)

	res, err := apiClient(n1).Append(ctx, appendReq("orders", "first", "k1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Msg.GetTerm())
	first := res.Msg

	// n2 does not own it: a refusal naming the owner, once n2's view has
	// caught up with the assignment.
	require.Eventually(t, func() bool {
		_, err = apiClient(n2).Append(ctx, appendReq("orders", "wrong", ""))
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
		wn, oc := outcome(t, err)
		require.True(t, oc.GetNotStored())
		return wn.GetOwner() == "n1" && wn.GetOwnerAddr() == n1.Addr()
	}, testTimeout, time.Millisecond, "n2 never named the owner")

	// The same key again on the same owner: answered from memory.
	again, err := apiClient(n1).Append(ctx, appendReq("orders", "first", "k1"))
	require.NoError(t, err)
	require.True(t, again.Msg.GetDuplicate())
	require.Equal(t, first.GetId(), again.Msg.GetId())

	// The channel moves to n2 at term 2; the old owner refuses, the new one
	// takes appends, and a retry of k1 there finds the copy n1 stored.
	c.assign("orders", "n2", 2)
	_, err = apiClient(n1).Append(ctx, appendReq("orders", "late", ""))
	require.Contains(t, []connect.Code{connect.CodeFailedPrecondition, connect.CodeAborted}, connect.CodeOf(err))
	retry := appendReq("orders", "first", "k1")
	retry.Msg.Retry = true
	res, err = apiClient(n2).Append(ctx, retry)
	require.NoError(t, err)
	require.True(t, res.Msg.GetDuplicate(), "the retry found the earlier copy")
	require.Equal(t, first.GetId(), res.Msg.GetId())
	fresh := appendReq("orders", "second", "k2")
	fresh.Msg.Retry = true
	fresh.Msg.ResolveFrom = first.GetResolveFrom()
	res, err = apiClient(n2).Append(ctx, fresh)
	require.NoError(t, err)
	require.False(t, res.Msg.GetDuplicate(), "a retry whose first attempt stored nothing is stored")
	require.EqualValues(t, 2, res.Msg.GetTerm())

	// Every message once, in order, with keys.
	stream, err := apiClient(n2).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "orders"}))
	require.NoError(t, err)
	var got []string
	for len(got) < 2 && stream.Receive() {
		for _, d := range stream.Msg().GetMessages() {
			got = append(got, string(d.GetPayload())+"/"+d.GetKey())
		}
	}
	require.NoError(t, stream.Close())
	require.Equal(t, []string{"first/k1", "second/k2"}, got)

	// Bad input.
	_, err = apiClient(n2).Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: "orders",
		Message: &streamwalv1.Message{Properties: map[string]string{"_t": "9"}}}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = apiClient(n2).Append(ctx, appendReq("not a channel", "x", ""))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	st, err := apiClient(n2).Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
	require.NoError(t, err)
	require.Equal(t, "n2", st.Msg.GetNode())
	require.Len(t, st.Msg.GetChannels(), 1)

	resp, err := http.Get("http://" + n2.Addr() + "/healthz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close()
	resp, err = http.Get("http://" + n2.Addr() + "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close()
}

// Bad requests get the right code, say nothing was stored, and change
// nothing.
func TestBadRequests(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := c.startNode("n1")
	c.assign("ch", "n1", 4)
	api := apiClient(n1)
	before, err := api.Append(ctx, appendReq("ch", "kept", ""))
	require.NoError(t, err)

	cases := []struct {
		name string
		req  *streamwalv1.AppendRequest
		code connect.Code
	}{
		{"unknown channel", &streamwalv1.AppendRequest{Channel: "nobody-owns-this", Message: &streamwalv1.Message{}}, connect.CodeFailedPrecondition},
		{"stale term", &streamwalv1.AppendRequest{Channel: "ch", Term: 3, Message: &streamwalv1.Message{}}, connect.CodeFailedPrecondition},
		{"oversized", &streamwalv1.AppendRequest{Channel: "ch", Message: &streamwalv1.Message{Payload: make([]byte, 17<<20)}}, connect.CodeResourceExhausted},
		{"reserved property", &streamwalv1.AppendRequest{Channel: "ch", Message: &streamwalv1.Message{Properties: map[string]string{"_tt": "1"}}}, connect.CodeInvalidArgument},
		{"invalid channel", &streamwalv1.AppendRequest{Channel: "a/b", Message: &streamwalv1.Message{}}, connect.CodeInvalidArgument},
		{"invalid vchannel", &streamwalv1.AppendRequest{Channel: "ch", Message: &streamwalv1.Message{Vchannel: "x y"}}, connect.CodeInvalidArgument},
		{"retry without a key", &streamwalv1.AppendRequest{Channel: "ch", Retry: true, Message: &streamwalv1.Message{}}, connect.CodeInvalidArgument},
		{"corrupt resolve position", &streamwalv1.AppendRequest{Channel: "ch", Key: "k", Retry: true, ResolveFrom: "not-a-checkpoint", Message: &streamwalv1.Message{}}, connect.CodeInvalidArgument},
	}
	for _, tc := range cases {
		_, err := api.Append(ctx, connect.NewRequest(tc.req))
		require.Equalf(t, tc.code, connect.CodeOf(err), "%s: %v", tc.name, err)
		_, oc := outcome(t, err)
		require.NotNilf(t, oc, "%s: an Outcome detail", tc.name)
		require.Truef(t, oc.GetNotStored(), "%s: nothing stored", tc.name)
	}
	bad, err := api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch",
		Start: &streamwalv1.ReadRequest_StartFrom{StartFrom: "-1"}}))
	require.NoError(t, err, "a stream's error comes with its first receive")
	require.False(t, bad.Receive())
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(bad.Err()), "a malformed read position: %v", bad.Err())
	require.NoError(t, bad.Close())

	// A malformed body: InvalidArgument from the protocol layer.
	resp, err := http.Post("http://"+n1.Addr()+streamwalv1connect.WALServiceAppendProcedure, "application/proto", strings.NewReader("\xff\xff\xff"))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_ = resp.Body.Close()

	// Nothing of it was stored: the next append follows the first.
	after, err := api.Append(ctx, appendReq("ch", "next", ""))
	require.NoError(t, err)
	stream, err := api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch"}))
	require.NoError(t, err)
	var got []string
	for len(got) < 2 && stream.Receive() {
		for _, d := range stream.Msg().GetMessages() {
			got = append(got, d.GetId())
		}
	}
	require.NoError(t, stream.Close())
	require.Equal(t, []string{before.Msg.GetId(), after.Msg.GetId()}, got)
}

// A read's responses carry at most the batch asked for, every message once
// and in order, whether the scanner catches up or tails.
func TestReadBatchBound(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := c.startNode("n1")
	c.assign("ch", "n1", 1)
	api := apiClient(n1)
	var want []string
	appendSome := func(from, n int) {
		for i := from; i < from+n; i++ {
			p := fmt.Sprintf("m%03d", i)
			_, err := api.Append(ctx, appendReq("ch", p, ""))
			require.NoError(t, err)
			want = append(want, p)
		}
	}
	appendSome(0, 100) // caught up from the log
	stream, err := api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", Batch: 3}))
	require.NoError(t, err)
	defer func() { require.NoError(t, stream.Close()) }()
	var got []string
	receive := func(n int) {
		for len(got) < n && stream.Receive() {
			msgs := stream.Msg().GetMessages()
			require.NotEmpty(t, msgs, "an empty response")
			require.LessOrEqual(t, len(msgs), 3, "a response above the batch asked for")
			for _, d := range msgs {
				got = append(got, string(d.GetPayload()))
			}
		}
		require.NoError(t, stream.Err())
	}
	receive(100)
	appendSome(100, 50) // tailed
	receive(150)
	require.Equal(t, want, got)
}
