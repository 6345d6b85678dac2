package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/internal/readback"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// bearer sets an Authorization header on every request ("" sets none).
type bearer struct {
	header string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.header != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", b.header)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func httpAs(header string) *http.Client { return &http.Client{Transport: bearer{header}} }

func apiAs(n *node.Node, header string) streamwalv1connect.WALServiceClient {
	return streamwalv1connect.NewWALServiceClient(httpAs(header), "http://"+n.Addr())
}

// TestAuthorization runs a node with a policy and every kind of request
// against it; then reads the channel at the backend and finds exactly the
// messages of the appends that were allowed.
func TestAuthorization(t *testing.T) {
	tokens := map[string]string{}
	hashes := map[string]string{}
	for _, who := range []string{"writer", "reader", "tenant", "operator", "nobody"} {
		tok, hash, err := authz.NewToken(nil)
		require.NoError(t, err)
		tokens[who], hashes[who] = "Bearer "+tok, hash
	}
	_, stranger, err := authz.NewToken(nil)
	require.NoError(t, err)
	policy, err := authz.Parse([]byte(fmt.Sprintf(`
roles:
  producer: [{actions: [append], channels: ["orders*"]}]
  tenant:   [{actions: [append, read], channels: ["tenant-a-*"]}]
  reader:   [{actions: [read], channels: ["*"]}]
  operator: [{actions: [admin], channels: ["*"]}]
principals:
  writer:   {roles: [producer], tokens: [%s]}
  reader:   {roles: [reader], tokens: [%s]}
  tenant:   {roles: [tenant], tokens: [%s]}
  operator: {roles: [operator], tokens: [%s]}
`, hashes["writer"], hashes["reader"], hashes["tenant"], hashes["operator"])))
	require.NoError(t, err)
	p, err := authz.Compile(policy)
	require.NoError(t, err)

	c := newTestCluster(t)
	o, err := memory.New(context.Background(), memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	n, err := node.New(c.cli, o, node.Config{ID: "n1", Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory", Authz: p})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
		_ = o.Close()
	})
	c.assign("orders", "n1", 1)
	c.assign("other", "n1", 1)

	msg := func(payload, vchannel string) *streamwalv1.Message {
		return &streamwalv1.Message{Payload: []byte(payload), Vchannel: vchannel}
	}
	var stored []string // payloads of the appends allowed, in order
	for _, tc := range []struct {
		name, who, channel string
		msgs               []*streamwalv1.Message // one: Append; more: AppendBatch
		code               connect.Code           // 0: allowed
	}{
		{"no credentials", "", "orders", []*streamwalv1.Message{msg("r1", "")}, connect.CodeUnauthenticated},
		{"a token of no principal", "Bearer " + stranger, "orders", []*streamwalv1.Message{msg("r2", "")}, connect.CodeUnauthenticated},
		{"the hash as a token", "Bearer " + hashes["writer"], "orders", []*streamwalv1.Message{msg("r3", "")}, connect.CodeUnauthenticated},
		{"read-only principal", tokens["reader"], "orders", []*streamwalv1.Message{msg("r4", "")}, connect.CodePermissionDenied},
		{"admin is not append", tokens["operator"], "orders", []*streamwalv1.Message{msg("r5", "")}, connect.CodePermissionDenied},
		{"writer", tokens["writer"], "orders", []*streamwalv1.Message{msg("a1", "")}, 0},
		{"writer, batch", tokens["writer"], "orders", []*streamwalv1.Message{msg("a2", ""), msg("a3", "x")}, 0},
		{"writer, another prefix", tokens["writer"], "other", []*streamwalv1.Message{msg("r6", "")}, connect.CodePermissionDenied},
		{"tenant, its vchannel", tokens["tenant"], "orders", []*streamwalv1.Message{msg("a4", "tenant-a-1")}, 0},
		{"tenant, another vchannel", tokens["tenant"], "orders", []*streamwalv1.Message{msg("r7", "tenant-b-1")}, connect.CodePermissionDenied},
		{"tenant, no vchannel", tokens["tenant"], "orders", []*streamwalv1.Message{msg("r8", "")}, connect.CodePermissionDenied},
		{"tenant, batch with one foreign vchannel", tokens["tenant"], "orders", []*streamwalv1.Message{msg("r9", "tenant-a-1"), msg("r10", "tenant-b-1")}, connect.CodePermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := apiAs(n, tc.who)
			var err error
			if len(tc.msgs) == 1 {
				_, err = api.Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: tc.channel, Message: tc.msgs[0]}))
			} else {
				_, err = api.AppendBatch(ctx, connect.NewRequest(&streamwalv1.AppendBatchRequest{Channel: tc.channel, Messages: tc.msgs}))
			}
			if tc.code == 0 {
				require.NoError(t, err)
				for _, m := range tc.msgs {
					stored = append(stored, string(m.GetPayload()))
				}
				return
			}
			require.Equal(t, tc.code, connect.CodeOf(err), "%v", err)
			_, oc := outcome(t, err)
			require.True(t, oc.GetNotStored(), "a refused append says nothing was stored")
			for _, tok := range tokens {
				require.NotContains(t, err.Error(), strings.TrimPrefix(tok, "Bearer "))
			}
		})
	}

	read := func(who string, vchannels ...string) ([]string, error) {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		stream, err := apiAs(n, who).Read(rctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "orders", Vchannels: vchannels, UntilCaughtUp: true}))
		if err != nil {
			return nil, err
		}
		defer func() { _ = stream.Close() }()
		var got []string
		for stream.Receive() {
			for _, d := range stream.Msg().GetMessages() {
				if d.GetKind() == "data" {
					got = append(got, string(d.GetPayload()))
				}
			}
			if stream.Msg().GetCaughtUp() {
				return got, nil
			}
		}
		return got, stream.Err()
	}
	_, err = read(tokens["writer"])
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "append is not read: %v", err)
	_, err = read("")
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
	_, err = read(tokens["tenant"])
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "the whole pchannel is not the tenant's: %v", err)
	got, err := read(tokens["tenant"], "tenant-a-1")
	require.NoError(t, err)
	require.Equal(t, []string{"a4"}, got, "a read confined to the tenant's vchannel")
	got, err = read(tokens["reader"])
	require.NoError(t, err)
	require.Equal(t, stored, got)

	// Status and the node-wide HTTP endpoints: read or admin on "*".
	_, err = apiAs(n, tokens["writer"]).Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	for _, who := range []string{"reader", "operator"} {
		_, err = apiAs(n, tokens[who]).Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
		require.NoError(t, err, who)
	}
	get := func(who, path string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Addr()+path, nil)
		require.NoError(t, err)
		resp, err := httpAs(who).Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, _ := get("", "/metrics")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(tokens["tenant"], "/admin/channels")
	require.Equal(t, http.StatusForbidden, code)
	code, body := get(tokens["operator"], "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `streamwal_authz_refused_total{action="append",reason="no_grant"} 6`)
	require.Contains(t, body, `streamwal_authz_refused_total{action="append",reason="bad_credentials"} 2`)
	require.Contains(t, body, `streamwal_authz_refused_total{action="append",reason="no_credentials"} 1`)
	code, _ = get("", "/healthz")
	require.Equal(t, http.StatusOK, code, "health is open")

	// The liveness stream stays open for the coordinator, without credentials.
	lctx, lcancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(lctx, http.MethodGet, "http://"+n.Addr()+cluster.LivenessPath+"?node=n1", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "n1\n", line)
	lcancel()
	_ = resp.Body.Close()

	// At the backend: exactly what was allowed, nothing refused. The
	// last append marks the end: every refused one was sent before it.
	_, err = apiAs(n, tokens["writer"]).Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: "orders", Message: msg("end", "")}))
	require.NoError(t, err)
	require.Equal(t, append(stored, "end"), backendPayloads(t, c.mem, "orders", "end"))
}

// backendPayloads reads channel's data messages from the memory backend
// itself, below the node and the WAL, up to the one whose payload is last.
func backendPayloads(t *testing.T, mem *memory.Cluster, channel, last string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	o, err := memory.New(ctx, memory.Config{Cluster: mem})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	got, err := readback.Payloads(ctx, o, channel, last)
	require.NoError(t, err, "read back so far: %v", got)
	return got
}

// SetPolicy replaces a node's policy for the requests that follow; a node
// without one cannot be given one while it serves.
func TestSetPolicy(t *testing.T) {
	c := newTestCluster(t)
	token, hash, err := authz.NewToken(nil)
	require.NoError(t, err)
	grant := func(channel string) *authz.Policy {
		return compile(t, fmt.Sprintf("roles:\n  w: [{actions: [append], channels: [%s]}]\nprincipals:\n  p: {roles: [w], tokens: [%s]}\n", channel, hash))
	}
	n := c.startSecureNode(t, "n1", nil, grant("orders"))
	open := c.startNode("n2")
	errmarktest.Is(t, open.SetPolicy(grant("orders")), node.ErrInvalidConfig)
	c.assign("orders", "n1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	api := apiAs(n, "Bearer "+token)
	_, err = api.Append(ctx, appendReq("orders", "before", ""))
	require.NoError(t, err)
	require.NoError(t, n.SetPolicy(grant("other")))
	_, err = api.Append(ctx, appendReq("orders", "after", ""))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	errmarktest.Is(t, n.SetPolicy(nil), node.ErrInvalidConfig) // authorization cannot be turned off while serving
	_, err = api.Append(ctx, appendReq("orders", "after", ""))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
}
