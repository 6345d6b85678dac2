package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// The client sends its token; a refusal by the node's policy is ErrRefused
// at once (not retried until the context ends), and not an unknown
// outcome.
func TestToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	writer, writerHash, err := authz.NewToken(nil)
	require.NoError(t, err)
	reader, readerHash, err := authz.NewToken(nil)
	require.NoError(t, err)
	pc, err := authz.Parse(fmt.Appendf(nil, `
roles:
  w: [{actions: [append], channels: [orders]}]
  r: [{actions: [read], channels: ["*"]}]
principals:
  writer: {roles: [w], tokens: [%s]}
  reader: {roles: [r], tokens: [%s]}
`, writerHash, readerHash))
	require.NoError(t, err)
	policy, err := authz.Compile(pc)
	require.NoError(t, err)

	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	o, err := memory.New(ctx, memory.Config{Cluster: memory.NewCluster()})
	require.NoError(t, err)
	n, err := node.New(cli, o, node.Config{ID: "a", Root: l.Root, SessionTTL: 2 * time.Second, Backend: "memory", Authz: policy})
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
		_ = o.Close()
	})
	assign(t, cli, l, "orders", "a", 1)

	as := func(token string) *client.Client {
		c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, Token: token})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	w, r, anon := as(writer), as(reader), as("")
	_, err = w.Append(ctx, "orders", client.Message{Payload: []byte("m1")}, client.Options{})
	require.NoError(t, err)
	for name, c := range map[string]*client.Client{"reader": r, "no token": anon} {
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = c.Append(actx, "orders", client.Message{Payload: []byte("x")}, client.Options{})
		errmarktest.Is(t, err, client.ErrRefused)
		errmarktest.IsNot(t, err, client.ErrOutcomeUnknown)
		require.NoError(t, actx.Err(), "%s: refused at once, not retried", name)
		acancel()
	}
	var got []string
	require.NoError(t, r.Read(ctx, "orders", client.ReadOptions{UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
		got = append(got, string(d.GetPayload()))
		return nil
	}))
	require.Equal(t, []string{"m1"}, got)
	err = w.Read(ctx, "orders", client.ReadOptions{UntilCaughtUp: true}, func(*streamwalv1.Delivered) error { return nil })
	errmarktest.Is(t, err, client.ErrRefused)
}

// startNodeWith starts a node of cfg on the memory backend mem until tb
// ends.
func startNodeWith(tb testing.TB, cli *clientv3.Client, mem *memory.Cluster, cfg node.Config) *node.Node {
	o, err := memory.New(context.Background(), memory.Config{Cluster: mem})
	require.NoError(tb, err)
	cfg.SessionTTL, cfg.Backend = 2*time.Second, "memory"
	n, err := node.New(cli, o, cfg)
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(tb, n.Start(ctx))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(tb, n.Shutdown(ctx))
		_ = o.Close()
	})
	return n
}

// benchPolicy grants principal append on channel's prefix (a decision by
// binary search) among 10,000 other prefixes.
func benchPolicy(tb testing.TB, principal, channel string) *authz.Policy {
	c := authz.Config{
		Roles:      map[string][]authz.Grant{"bench": {{Actions: []authz.Action{authz.ActionAppend}, Channels: []string{channel[:len(channel)-1] + "*"}}}},
		Principals: map[string]authz.Binding{principal: {Roles: []string{"bench", "others"}}},
	}
	var others []string
	for i := range 10_000 {
		others = append(others, fmt.Sprintf("tenant-%05d-*", i))
	}
	c.Roles["others"] = []authz.Grant{{Actions: []authz.Action{authz.ActionAppend, authz.ActionRead}, Channels: others}}
	p, err := authz.Compile(c)
	require.NoError(tb, err)
	return p
}
