package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// livenessStatus opens a liveness stream to node id as a caller with cfg
// and returns the answer's status; the stream, if held, is let go.
func livenessStatus(ctx context.Context, t *testing.T, c *e2eCluster, id string, cfg *tls.Config) int {
	t.Helper()
	s, _ := c.view.Snapshot()
	n, ok := s.Nodes[id]
	require.True(t, ok, "node %s is not registered", id)
	u := url.URL{Scheme: "https", Host: n.Value.Addr, Path: cluster.LivenessPath, RawQuery: url.Values{"node": {id}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: cfg.Clone()}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A walnode with -tls-ca and no -tls-client-ca verifies the client
// certificates it is given against -tls-ca: its liveness stream takes a
// node's certificate of that CA (its own coordinator holds the stream with
// the certificate it presents) and refuses a client's certificate of the
// same CA, and a caller without one, while clients without a certificate
// still reach the API.
func TestLivenessWithClusterCAOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	dir := certDir(t, []string{"n1", "n2"}, []string{"alice"})
	file := func(name string) string { return filepath.Join(dir, name) }
	c, _ := embeddedNode(t, "/clusterca/", dir, "-tls-ca", file(certs.CACert))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	as := func(name string, crt, key string) *tls.Config {
		cfg, _, err := tlsconf.Config{CAFile: file(certs.CACert), CertFile: crt, KeyFile: key}.Client()
		require.NoError(t, err, name)
		return cfg
	}
	none := as("no certificate", "", "")
	c.connectTLS(ctx, none)

	require.Eventually(t, func() bool {
		return secureMetrics(ctx, t, c, "n1", none)["streamwal_coordinator_liveness_streams"] == 1
	}, time.Minute, 20*time.Millisecond, "the node's coordinator never held the liveness stream with its node certificate")

	for _, probe := range []struct {
		who  string
		cfg  *tls.Config
		want int
	}{
		{"a node's certificate", as("n2", file("node.n2.crt"), file("node.n2.key")), http.StatusOK},
		{"a client's certificate of the CA", as("alice", file("client.alice.crt"), file("client.alice.key")), http.StatusForbidden},
		{"no certificate", none, http.StatusForbidden},
	} {
		require.Equal(t, probe.want, livenessStatus(ctx, t, c, "n1", probe.cfg), probe.who)
	}
	require.Equal(t, 2.0, secureMetrics(ctx, t, c, "n1", none)[`streamwal_node_refused_total{reason="no_node_identity"}`])
}
