package node_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/security/authz"
)

// allocations is a pool's allocation table, as node.Placement.
type allocations map[string]string

func (a allocations) Lookup(_ context.Context, vchannel string) (pool.Allocation, error) {
	pc, ok := a[vchannel]
	if !ok {
		return pool.Allocation{}, errors.Wrapf(pool.ErrNotAllocated, "vchannel %q", vchannel)
	}
	return pool.Allocation{VChannel: vchannel, PChannel: pc}, nil
}

// TestVChannelGrantHoldsOnItsPChannel: a producer granted "orders-*"
// appends messages of orders-x into pch-1, the pchannel the pool allocated
// orders-x to, and is refused (PermissionDenied, nothing stored) into
// pch-2, and for a vchannel the pool has not allocated; readers of pch-2
// never see the refused message. A principal granted the pchannel itself
// is not asked where its messages' vchannels live.
func TestVChannelGrantHoldsOnItsPChannel(t *testing.T) {
	tokens, hashes := map[string]string{}, map[string]string{}
	for _, who := range []string{"producer", "owner"} {
		tok, hash, err := authz.NewToken(nil)
		require.NoError(t, err)
		tokens[who], hashes[who] = "Bearer "+tok, hash
	}
	policy := compile(t, fmt.Sprintf(`
roles:
  producer: [{actions: [append, read], channels: ["orders-*"]}]
  owner:    [{actions: [append, read], channels: ["pch-*"]}]
principals:
  producer: {roles: [producer], tokens: [%s]}
  owner:    {roles: [owner], tokens: [%s]}
`, hashes["producer"], hashes["owner"]))
	c := newTestCluster(t)
	n, reg, _ := c.startConfigured(t, node.Config{Authz: policy,
		Placement: allocations{"orders-x": "pch-1", "orders-y": "pch-2"}}, nil)
	c.assign("pch-1", "n1", 1)
	c.assign("pch-2", "n1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	send := func(who, pchannel string, msgs ...*streamwalv1.Message) error {
		_, err := apiAs(n, tokens[who]).AppendBatch(ctx, connect.NewRequest(&streamwalv1.AppendBatchRequest{Channel: pchannel, Messages: msgs}))
		return err
	}
	msg := func(payload, vchannel string) *streamwalv1.Message {
		return &streamwalv1.Message{Payload: []byte(payload), Vchannel: vchannel}
	}
	require.NoError(t, send("producer", "pch-1", msg("x1", "orders-x"), msg("x2", "orders-x")), "its vchannel, on its pchannel")
	require.NoError(t, send("producer", "pch-2", msg("y1", "orders-y")))
	for _, tc := range []struct {
		name     string
		pchannel string
		msgs     []*streamwalv1.Message
	}{
		{"orders-x into another pchannel", "pch-2", []*streamwalv1.Message{msg("misplaced", "orders-x")}},
		{"a batch with one misplaced message", "pch-2", []*streamwalv1.Message{msg("y-ok", "orders-y"), msg("misplaced-2", "orders-x")}},
		{"a vchannel the pool never allocated", "pch-2", []*streamwalv1.Message{msg("nowhere", "orders-z")}},
	} {
		err := send("producer", tc.pchannel, tc.msgs...)
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s: %v", tc.name, err)
		require.ErrorContains(t, err, "only on its pchannel", tc.name)
		_, oc := outcome(t, err)
		require.True(t, oc.GetNotStored(), tc.name)
	}
	require.EqualValues(t, 3, metricValue(t, reg, "streamwal_authz_refused_total", map[string]string{"action": "append", "reason": "vchannel_elsewhere"}))
	require.NoError(t, send("owner", "pch-2", msg("owner-end", "orders-x")), "a pchannel grant covers whatever its messages carry")

	require.Equal(t, []string{"y1", "owner-end"}, backendPayloads(t, c.mem, "pch-2", "owner-end"), "readers of pch-2 never see the refused messages")
	require.Equal(t, []string{"x1", "x2"}, backendPayloads(t, c.mem, "pch-1", "x2"))

	// A read confined to a vchannel follows the same rule.
	stream, err := apiAs(n, tokens["producer"]).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "pch-2", Vchannels: []string{"orders-x"}, UntilCaughtUp: true}))
	require.NoError(t, err)
	for stream.Receive() {
	}
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(stream.Err()), "%v", stream.Err())
}
