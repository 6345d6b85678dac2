package client_test

import (
	"context"
	stderrors "errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// loseAnswers delivers every Append to the node and loses the answer, as a
// connection that breaks after the request went out; at the first lost
// answer it calls lost.
type loseAnswers struct {
	next http.RoundTripper
	lost func()
}

func (l loseAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	// Only an answer that the message is stored is lost: a refusal (the
	// node has not opened the channel yet, say) reaches the client, which
	// tries again.
	if err != nil || !strings.HasSuffix(req.URL.Path, "/Append") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body) // the node answered: the message is stored
	_ = resp.Body.Close()
	l.lost()
	return nil, stderrors.New("connection reset by test")
}

// The errors Append returns are seen by the standard errors.Is: an append
// whose answer was lost is ErrOutcomeUnknown (and was indeed stored), not a
// refusal; a refusal is ErrRefused, and ErrOutcomeUnknown too when an
// earlier attempt may have stored the message.
func TestAppendErrorsStandardIs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	mem := memory.NewCluster()
	startNode(t, cli, l.Root, mem, "a")
	assign(t, cli, l, "orders", "a", 1)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	lossy, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, HTTP: &http.Client{Transport: loseAnswers{next: tr, lost: acancel}}})
	require.NoError(t, err)
	defer lossy.Close()
	_, err = lossy.Append(actx, "orders", client.Message{Payload: []byte("m1")}, client.Options{Key: "k1"})
	require.Error(t, err)
	errmarktest.Is(t, err, client.ErrOutcomeUnknown)
	errmarktest.Is(t, err, context.Canceled) // why it gave up
	errmarktest.IsNot(t, err, client.ErrRefused)

	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root})
	require.NoError(t, err)
	defer c.Close()
	r, err := c.Append(ctx, "orders", client.Message{Payload: []byte("m1")}, client.Options{Key: "k1", Retry: true})
	require.NoError(t, err)
	require.True(t, r.Duplicate, "the attempt whose answer was lost had stored it")

	// A refusal (a reserved property key): nothing stored, nothing unknown.
	bad := client.Message{Payload: []byte("m2"), Properties: map[string]string{"_term": "9"}}
	_, err = c.Append(ctx, "orders", bad, client.Options{})
	errmarktest.Is(t, err, client.ErrRefused)
	errmarktest.IsNot(t, err, client.ErrOutcomeUnknown)
	// The same refusal of a retry: an earlier attempt may have stored it.
	_, err = c.Append(ctx, "orders", bad, client.Options{Key: "k2", Retry: true})
	errmarktest.Is(t, err, client.ErrRefused)
	errmarktest.Is(t, err, client.ErrOutcomeUnknown)
}
