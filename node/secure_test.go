package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// pki is a test's CA with the TLS configurations of a node and clients.
type pki struct {
	ca   *certs.Authority
	pool *x509.CertPool
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	ca, err := certs.NewCA(certs.Request{CommonName: "test CA"})
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &pki{ca: ca, pool: pool}
}

func (p *pki) pair(t testing.TB, req certs.Request) tls.Certificate {
	t.Helper()
	pr, err := p.ca.Issue(req)
	require.NoError(t, err)
	c, err := tls.X509KeyPair(pr.CertPEM, pr.KeyPEM)
	require.NoError(t, err)
	return c
}

// server is a node's TLS: client certificates of this CA verified when
// given (tokens serve clients without one).
func (p *pki) server(t testing.TB) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, ClientCAs: p.pool, ClientAuth: tls.VerifyClientCertIfGiven,
		Certificates: []tls.Certificate{p.pair(t, certs.Request{CommonName: "n1", Kind: certs.Node, IPs: []net.IP{net.ParseIP("127.0.0.1")}})}}
}

// client is the TLS of a client with principal's certificate ("" for none).
func (p *pki) client(t testing.TB, principal string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.pool}
	if principal != "" {
		c.Certificates = []tls.Certificate{p.pair(t, certs.Request{CommonName: principal, Kind: certs.Client})}
	}
	return c
}

// startSecureNode starts a node with TLS and a policy (either may be nil).
func (c *testCluster) startSecureNode(tb testing.TB, id string, tlsCfg *tls.Config, policy *authz.Policy) *node.Node {
	o, err := memory.New(context.Background(), memory.Config{Cluster: c.mem})
	require.NoError(tb, err)
	n, err := node.New(c.cli, o, node.Config{ID: id, Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory", TLS: tlsCfg, Authz: policy})
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

func compile(t testing.TB, text string) *authz.Policy {
	t.Helper()
	pc, err := authz.Parse([]byte(text))
	require.NoError(t, err)
	p, err := authz.Compile(pc)
	require.NoError(t, err)
	return p
}

// TestCertificatePrincipal: over mutual TLS the principal is the client
// certificate's CN: alice appends; mallory, whose certificate the CA
// signed but whom the policy does not name, is refused at once, as is a
// token holder without append; and the backend holds alice's messages
// only.
func TestCertificatePrincipal(t *testing.T) {
	c := newTestCluster(t)
	p := newPKI(t)
	token, hash, err := authz.NewToken(nil)
	require.NoError(t, err)
	policy := compile(t, fmt.Sprintf(`
roles:
  producer: [{actions: [append, read], channels: [orders]}]
  reader:   [{actions: [read], channels: ["*"]}]
principals:
  alice: {roles: [producer]}
  bob:   {roles: [reader], tokens: [%s]}
`, hash))
	c.startSecureNode(t, "n1", p.server(t), policy)
	c.assign("orders", "n1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	as := func(principal, token string) *client.Client {
		cl, err := client.New(ctx, client.Config{Etcd: c.cli, Root: c.layout.Root, TLS: p.client(t, principal), Token: token})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	_, err = as("alice", "").Append(ctx, "orders", client.Message{Payload: []byte("from-alice")}, client.Options{})
	require.NoError(t, err)
	for name, cl := range map[string]*client.Client{"mallory": as("mallory", ""), "bob's token": as("", token), "nothing": as("", "")} {
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = cl.Append(actx, "orders", client.Message{Payload: []byte("from-" + name)}, client.Options{})
		require.True(t, errors.Is(err, client.ErrRefused), "%s: %v", name, err)
		require.NoError(t, actx.Err(), "%s: refused at once", name)
		acancel()
	}
	_, err = as("alice", "").Append(ctx, "orders", client.Message{Payload: []byte("end")}, client.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"from-alice", "end"}, backendPayloads(t, c.mem, "orders", "end"))
}

// TestRefusedHandshakesCounted: a client turned away in the TLS handshake
// (no client certificate where one is required, plaintext to the TLS
// port) never reaches a handler, so net/http only logs it; the node counts
// each by reason in streamwal_node_tls_handshakes_refused_total.
func TestRefusedHandshakesCounted(t *testing.T) {
	c := newTestCluster(t)
	p := newPKI(t)
	srv := p.server(t)
	srv.ClientAuth = tls.RequireAndVerifyClientCert
	reg := prometheus.NewRegistry()
	o, err := memory.New(context.Background(), memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	n, err := node.New(c.cli, o, node.Config{ID: "n1", Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory",
		TLS: srv, Registerer: reg, Gatherer: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
		defer scancel()
		require.NoError(t, n.Shutdown(sctx))
		_ = o.Close()
	})

	// No client certificate: the server refuses it in the handshake.
	conn, err := tls.Dial("tcp", n.Addr(), p.client(t, ""))
	if err == nil {
		// TLS 1.3: the client learns of the refusal on its first read.
		_, _ = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_, _ = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	// Plaintext HTTP to the TLS port.
	raw, err := net.Dial("tcp", n.Addr())
	require.NoError(t, err)
	_, err = raw.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	_, _ = raw.Read(make([]byte, 64))
	_ = raw.Close()

	refused := func(reason string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "streamwal_node_tls_handshakes_refused_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == reason {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	require.Eventually(t, func() bool {
		return refused("no_client_certificate") >= 1 && refused("plaintext_client") >= 1
	}, testTimeout, 5*time.Millisecond, "refusals counted: no certificate %v, plaintext %v",
		refused("no_client_certificate"), refused("plaintext_client"))
}
