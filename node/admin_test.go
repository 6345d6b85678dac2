package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// assignNoWait writes an assignment as the coordinator would.
func (c *testCluster) assignNoWait(channel, nodeID string, term int64) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	a := cluster.Assignment{Channel: channel, Node: nodeID, Term: term, State: cluster.Assigning, Since: time.Now()}
	_, err := c.cli.Put(ctx, c.layout.Assignment(channel), string(cluster.Encode(a)))
	require.NoError(c.t, err)
}

// adminChannel is one channel of /admin/channels, as the README documents
// it.
type adminChannel struct {
	Channel       string     `json:"channel"`
	Term          int64      `json:"term"`
	State         string     `json:"state"`
	Health        string     `json:"health"`
	Reason        string     `json:"reason"`
	AssignedSince *time.Time `json:"assigned_since"`
	Appends       struct {
		OK           uint64     `json:"ok"`
		Failed       uint64     `json:"failed"`
		Waiting      int        `json:"waiting"`
		Last         *time.Time `json:"last"`
		LastID       string     `json:"last_id"`
		LastTimeTick uint64     `json:"last_timetick"`
	} `json:"appends"`
	Readers struct {
		Active       int    `json:"active"`
		SlowestLagMS *int64 `json:"slowest_lag_ms"`
	} `json:"readers"`
	LastError string `json:"last_error"`
}

// adminOf reads channel's entry of n's /admin/channels; an error when
// there is none (yet). It calls no require: it runs in Eventually's
// conditions too.
func adminOf(n *node.Node, channel string) (adminChannel, error) {
	resp, err := http.Get("http://" + n.Addr() + "/admin/channels?channel=" + channel)
	if err != nil {
		return adminChannel{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		return adminChannel{}, fmt.Errorf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var body struct {
		Node       string         `json:"node"`
		StallAfter string         `json:"stall_after"`
		Channels   []adminChannel `json:"channels"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return adminChannel{}, err
	}
	if body.Node != n.ID() || len(body.Channels) != 1 {
		return adminChannel{}, fmt.Errorf("node %q, %d channels", body.Node, len(body.Channels))
	}
	return body.Channels[0], nil
}

func admin(t *testing.T, n *node.Node, channel string) adminChannel {
	t.Helper()
	a, err := adminOf(n, channel)
	require.NoError(t, err, "channel %s", channel)
	return a
}

// adminIs returns a condition for Eventually: channel's entry satisfies
// cond.
func adminIs(n *node.Node, channel string, cond func(adminChannel) bool) func() bool {
	return func() bool {
		a, err := adminOf(n, channel)
		return err == nil && cond(a)
	}
}

// /admin/channels judges each channel from the node's traffic: healthy
// while appends succeed, stalled while appends wait with none finishing,
// failed once appends fail because the channel was fenced; Status says
// the same.
func TestAdminChannels(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := c.startNodeWith("n1", nodeSetup{stallAfter: 200 * time.Millisecond})
	c.assignNoWait("ch", "n1", 3)
	api := apiClient(n1)

	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool { return a.State == "available" }), testTimeout, time.Millisecond)
	a := admin(t, n1, "ch")
	require.Equal(t, "healthy", a.Health)
	require.EqualValues(t, 3, a.Term)
	require.NotNil(t, a.AssignedSince)
	require.Zero(t, a.Appends.OK)

	res, err := api.Append(ctx, appendReq("ch", "one", ""))
	require.NoError(t, err)
	a = admin(t, n1, "ch")
	require.Equal(t, "healthy", a.Health)
	require.EqualValues(t, 1, a.Appends.OK)
	require.Equal(t, res.Msg.GetId(), a.Appends.LastID)
	require.Equal(t, res.Msg.GetTimetick(), a.Appends.LastTimeTick)
	require.NotNil(t, a.Appends.Last)

	// A reader that got everything is 0 ms behind.
	rctx, rcancel := context.WithCancel(ctx)
	stream, err := api.Read(rctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch"}))
	require.NoError(t, err)
	require.True(t, stream.Receive())
	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool {
		return a.Readers.Active == 1 && a.Readers.SlowestLagMS != nil
	}), testTimeout, time.Millisecond)
	a = admin(t, n1, "ch")
	require.NotNil(t, a.Readers.SlowestLagMS)
	require.Zero(t, *a.Readers.SlowestLagMS)
	rcancel()
	_ = stream.Close()

	// Appends held up in the backend: stalled once none finished for
	// StallAfter.
	c.mem.SetAppendLatency(time.Hour)
	actx, acancel := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() {
		_, err := api.Append(actx, appendReq("ch", "held", ""))
		held <- err
	}()
	require.Eventually(t, func() bool { return c.mem.WaitingAppends() > 0 }, testTimeout, time.Millisecond)
	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool { return a.Health == "stalled" }), testTimeout, 5*time.Millisecond)
	a = admin(t, n1, "ch")
	require.Contains(t, a.Reason, "1 append waiting, none finished for")
	require.Equal(t, 1, a.Appends.Waiting)
	st, err := api.Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
	require.NoError(t, err)
	require.Len(t, st.Msg.GetChannels(), 1)
	require.Equal(t, "stalled", st.Msg.GetChannels()[0].GetHealth())
	require.EqualValues(t, 1, st.Msg.GetChannels()[0].GetAppendsWaiting())
	c.mem.SetAppendLatency(0)
	acancel()
	require.Error(t, <-held)
	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool { return a.Health == "healthy" }), testTimeout, time.Millisecond,
		"a caller who gave up is no failure of the channel")

	// Another writer opens the channel at a higher term behind the
	// cluster's back: the node's appends are fenced, and it says so.
	o, err := memory.New(ctx, memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	w, err := o.Open(ctx, walimpls.Channel{Name: "ch", Term: 9, Mode: walimpls.ReadWrite})
	require.NoError(t, err)
	defer func() { _ = w.Close() }()
	_, err = api.Append(ctx, appendReq("ch", "fenced", ""))
	require.Error(t, err)
	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool { return a.Health == "failed" }), testTimeout, time.Millisecond)
	a = admin(t, n1, "ch")
	require.Contains(t, a.Reason, "fenced by term 9", a.Reason)
	require.NotEmpty(t, a.LastError)
	st, err = api.Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
	require.NoError(t, err)
	cs := st.Msg.GetChannels()[0]
	require.Equal(t, "failed", cs.GetHealth())
	require.Contains(t, cs.GetReason(), "fenced")
	require.EqualValues(t, 1, cs.GetAppendsOk())

	// Only GET; a bad channel name is a bad request.
	resp, err := http.Post("http://"+n1.Addr()+"/admin/channels", "text/plain", strings.NewReader(""))
	require.NoError(t, err)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	_ = resp.Body.Close()
	resp, err = http.Get("http://" + n1.Addr() + "/admin/channels?channel=a%00b")
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_ = resp.Body.Close()
}

// A channel whose open fails is failed, with the open's error.
func TestAdminChannelOpenFailing(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := c.startNodeWith("n1", nodeSetup{stallAfter: time.Hour})
	// Term 5 is taken in the backend: an open at 4 is refused (fenced).
	o, err := memory.New(ctx, memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	w, err := o.Open(ctx, walimpls.Channel{Name: "late", Term: 5, Mode: walimpls.ReadWrite})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	c.assignNoWait("late", "n1", 4)
	require.Eventually(t, adminIs(n1, "late", func(a adminChannel) bool { return a.Health == "failed" }), testTimeout, time.Millisecond)
	a := admin(t, n1, "late")
	require.Equal(t, "failed", a.State)
	require.Contains(t, a.Reason, "open failing")
	require.NotEmpty(t, a.LastError)
}

// Read refuses what no node could serve, with InvalidArgument and a
// message that says what is wrong.
func TestReadValidation(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := c.startNode("n1")
	c.assign("ch", "n1", 1)
	api := apiClient(n1)
	cases := []struct {
		name string
		req  *streamwalv1.ReadRequest
		msg  string
	}{
		{"negative batch", &streamwalv1.ReadRequest{Channel: "ch", Batch: -1}, "batch -1 is negative"},
		{"NUL in a vchannel", &streamwalv1.ReadRequest{Channel: "ch", Vchannels: []string{"ok", "a\x00b"}}, "vchannels[1]"},
		{"last too large", &streamwalv1.ReadRequest{Channel: "ch", Last: 10001}, "last 10001 exceeds 10000"},
		{"bad channel, any node", &streamwalv1.ReadRequest{Channel: "a\x00b"}, "channel name"},
	}
	for _, tc := range cases {
		stream, err := api.Read(ctx, connect.NewRequest(tc.req))
		require.NoError(t, err)
		require.False(t, stream.Receive(), tc.name)
		require.Equalf(t, connect.CodeInvalidArgument, connect.CodeOf(stream.Err()), "%s: %v", tc.name, stream.Err())
		require.Contains(t, stream.Err().Error(), tc.msg, tc.name)
		require.NoError(t, stream.Close())
	}
	// A vchannel with NUL on append too.
	_, err := api.Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: "ch",
		Message: &streamwalv1.Message{Vchannel: "v\x00"}}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.Contains(t, err.Error(), "vchannel")
	_, err = api.AppendBatch(ctx, connect.NewRequest(&streamwalv1.AppendBatchRequest{Channel: "ch",
		Messages: []*streamwalv1.Message{{}, {Vchannel: "v\x00"}}}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.Contains(t, err.Error(), "message 1")
}

// readAll reads a stream to its end (or n messages), and says whether a
// response was flagged caught_up and after how many messages.
func readAll(t *testing.T, stream *connect.ServerStreamForClient[streamwalv1.ReadResponse], n int) (got []*streamwalv1.Delivered, caughtAt int) {
	t.Helper()
	caughtAt = -1
	for (n < 0 || len(got) < n) && stream.Receive() {
		got = append(got, stream.Msg().GetMessages()...)
		if stream.Msg().GetCaughtUp() {
			require.Equal(t, -1, caughtAt, "caught_up once")
			caughtAt = len(got)
		}
	}
	return got, caughtAt
}

func payloads(ds []*streamwalv1.Delivered) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.GetPayload()))
	}
	return out
}

// Read's until_caught_up ends the stream at what was acknowledged when it
// started; last delivers the last N of those, then follows; every message
// carries a position from which a read starts with it.
func TestReadHistory(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n1 := c.startNode("n1")
	c.assign("ch", "n1", 1)
	api := apiClient(n1)
	var want []string
	for i := range 10 {
		p := fmt.Sprintf("m%d", i)
		_, err := api.Append(ctx, appendReq("ch", p, ""))
		require.NoError(t, err)
		want = append(want, p)
	}

	// Until caught up: all ten, then the stream ends, OK.
	stream, err := api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true, Batch: 3}))
	require.NoError(t, err)
	got, caughtAt := readAll(t, stream, -1)
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, want, payloads(got))
	require.Equal(t, 10, caughtAt)
	require.Empty(t, got[0].GetPosition(), "the first message of a read from the start")
	for i := 1; i < len(got); i++ {
		require.Equal(t, got[i-1].GetCheckpoint(), got[i].GetPosition(), "a position is the checkpoint before it")
	}

	// From a position: that message first.
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true,
		Start: &streamwalv1.ReadRequest_AfterCheckpoint{AfterCheckpoint: got[6].GetPosition()}}))
	require.NoError(t, err)
	from, _ := readAll(t, stream, -1)
	require.NoError(t, stream.Close())
	require.Equal(t, want[6:], payloads(from))
	require.Equal(t, got[6].GetPosition(), from[0].GetPosition())

	// The last 3, until caught up.
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true, Last: 3}))
	require.NoError(t, err)
	last, caughtAt := readAll(t, stream, -1)
	require.NoError(t, stream.Close())
	require.Equal(t, want[7:], payloads(last))
	require.Equal(t, 3, caughtAt)
	require.Equal(t, got[7].GetPosition(), last[0].GetPosition(), "positions do not depend on where the read started")

	// More than there is: all of them.
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true, Last: 50}))
	require.NoError(t, err)
	last, _ = readAll(t, stream, -1)
	require.NoError(t, stream.Close())
	require.Equal(t, want, payloads(last))

	// The last 2, then following: what comes after is delivered too.
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", Last: 2}))
	require.NoError(t, err)
	last, caughtAt = readAll(t, stream, 2)
	require.Equal(t, want[8:], payloads(last))
	require.Equal(t, 2, caughtAt)
	_, err = api.Append(ctx, appendReq("ch", "m10", ""))
	require.NoError(t, err)
	more, _ := readAll(t, stream, 1)
	require.Equal(t, []string{"m10"}, payloads(more))
	require.Equal(t, last[1].GetCheckpoint(), more[0].GetPosition())
	require.NoError(t, stream.Close())

	// Latest: only new messages, the first with a position too. The call
	// returns with the first response; the node registers the reader
	// once its start is fixed, and what is appended from then on is new.
	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool { return a.Readers.Active == 0 }), testTimeout, time.Millisecond,
		"the earlier reads end")
	opened := make(chan *connect.ServerStreamForClient[streamwalv1.ReadResponse], 1)
	go func() {
		stream, err := api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch",
			Start: &streamwalv1.ReadRequest_Latest{Latest: true}}))
		if err != nil {
			t.Error(err)
		}
		opened <- stream
	}()
	require.Eventually(t, adminIs(n1, "ch", func(a adminChannel) bool { return a.Readers.Active == 1 }), testTimeout, time.Millisecond)
	_, err = api.Append(ctx, appendReq("ch", "m11", ""))
	require.NoError(t, err)
	stream = <-opened
	require.NotNil(t, stream)
	news, _ := readAll(t, stream, 1)
	require.NotEmpty(t, news[0].GetPosition())
	require.NoError(t, stream.Close())
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true,
		Start: &streamwalv1.ReadRequest_AfterCheckpoint{AfterCheckpoint: news[0].GetPosition()}}))
	require.NoError(t, err)
	again, _ := readAll(t, stream, -1)
	require.NoError(t, stream.Close())
	require.Equal(t, []string{"m11"}, payloads(news))
	require.Equal(t, []string{"m11"}, payloads(again))

	// Latest until caught up: nothing, at once.
	stream, err = api.Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "ch", UntilCaughtUp: true,
		Start: &streamwalv1.ReadRequest_Latest{Latest: true}}))
	require.NoError(t, err)
	none, caughtAt := readAll(t, stream, -1)
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Empty(t, none)
	require.Equal(t, 0, caughtAt)
}
