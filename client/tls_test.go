package client_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/internal/readback"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// testPKI is a CA with its files in a directory.
type testPKI struct {
	t   testing.TB
	dir string
	ca  *certs.Authority
}

func newTestPKI(t testing.TB) *testPKI {
	ca, err := certs.NewCA(certs.Request{CommonName: "test CA"})
	require.NoError(t, err)
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	require.NoError(t, os.WriteFile(p.path("ca.crt"), ca.Pair.CertPEM, 0o644))
	return p
}

func (p *testPKI) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes name.crt and name.key (a node's for 127.0.0.1 unless req
// says otherwise) and returns their paths.
func (p *testPKI) issue(name string, req certs.Request) (string, string) {
	p.t.Helper()
	if req.CommonName == "" {
		req.CommonName = name
	}
	if req.Kind == 0 {
		req.Kind = certs.Node
		if len(req.IPs) == 0 && len(req.DNSNames) == 0 {
			req.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
	}
	pair, err := p.ca.Issue(req)
	require.NoError(p.t, err)
	require.NoError(p.t, certs.Write(p.dir, name+".crt", name+".key", pair, true))
	return p.path(name + ".crt"), p.path(name + ".key")
}

// nodeServer issues the node certificate "node" and returns the server
// configuration of a node that requires client certificates of this CA,
// and the source that reloads its pair.
func (p *testPKI) nodeServer() (*tls.Config, *tlsconf.Source) {
	p.t.Helper()
	cert, key := p.issue("node", certs.Request{})
	server, src, err := tlsconf.Config{CertFile: cert, KeyFile: key, ClientCAFile: p.path("ca.crt")}.Server()
	require.NoError(p.t, err)
	return server, src
}

func (p *testPKI) client(c tlsconf.Config) *tls.Config {
	p.t.Helper()
	cfg, _, err := c.Client()
	require.NoError(p.t, err)
	return cfg
}

// startTLSNode starts a node on mem serving with server (nil: plaintext).
func startTLSNode(t testing.TB, cli *clientv3.Client, root string, mem *memory.Cluster, id string, server *tls.Config) *node.Node {
	o, err := memory.New(context.Background(), memory.Config{Cluster: mem})
	require.NoError(t, err)
	n, err := node.New(cli, o, node.Config{ID: id, Root: root, SessionTTL: 2 * time.Second, Backend: "memory", TLS: server})
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
	return n
}

// stored reads channel's data messages back at the backend, up to and
// including the one whose payload is last.
func stored(t *testing.T, mem *memory.Cluster, channel, last string) []string {
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

// Every connection a mutual-TLS node must refuse fails the client at once
// with ErrRefused and a reason that names the problem, and none of their
// appends reaches the backend; the right credentials append.
func TestTLSRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	p := newTestPKI(t)
	other := newTestPKI(t)
	server, _ := p.nodeServer()
	mem := memory.NewCluster()
	startTLSNode(t, cli, l.Root, mem, "secure", server)
	startTLSNode(t, cli, l.Root, mem, "plain", nil)
	assign(t, cli, l, "secure-ch", "secure", 1)
	assign(t, cli, l, "plain-ch", "plain", 1)

	cliCert, cliKey := p.issue("alice", certs.Request{Kind: certs.Client})
	strangerCert, strangerKey := other.issue("mallory", certs.Request{Kind: certs.Client})
	oldCert, oldKey := p.issue("old", certs.Request{Kind: certs.Client, NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
	expired, err := tls.LoadX509KeyPair(oldCert, oldKey)
	require.NoError(t, err)
	good := tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey}
	withExpired := p.client(tlsconf.Config{CAFile: p.path("ca.crt")})
	withExpired.Certificates = []tls.Certificate{expired}
	otherName := good
	otherName.ServerName = "elsewhere.example"

	newClient := func(cfg *tls.Config) *client.Client {
		c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, TLS: cfg})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	_, err = newClient(p.client(good)).Append(ctx, "secure-ch", client.Message{Payload: []byte("ok-1")}, client.Options{})
	require.NoError(t, err)

	for _, c := range []struct {
		name, channel string
		cfg           *tls.Config
		want          string
	}{
		{"no client certificate", "secure-ch", p.client(tlsconf.Config{CAFile: p.path("ca.crt")}), "certificate required"},
		{"client certificate of another CA", "secure-ch", p.client(tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: strangerCert, KeyFile: strangerKey}), "unknown certificate authority"},
		{"expired client certificate", "secure-ch", withExpired, "expired certificate"},
		{"node of another CA", "secure-ch", p.client(tlsconf.Config{CAFile: other.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey}), "certificate signed by unknown authority"},
		{"node certificate for another name", "secure-ch", p.client(otherName), "wanted to match elsewhere.example"},
		{"plaintext client to a TLS node", "secure-ch", nil, "it serves TLS"},
		{"TLS client to a plaintext node", "plain-ch", p.client(good), "serves plaintext"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(c.cfg)
			start := time.Now()
			_, err := cl.Append(ctx, c.channel, client.Message{Payload: []byte("refused")}, client.Options{})
			errmarktest.Is(t, err, client.ErrRefused)
			errmarktest.IsNot(t, err, client.ErrOutcomeUnknown) // nothing was sent
			require.Contains(t, err.Error(), c.want)
			require.Less(t, time.Since(start), 10*time.Second, "refused at once, not retried until the deadline")
			err = cl.Read(ctx, c.channel, client.ReadOptions{UntilCaughtUp: true}, func(*streamwalv1.Delivered) error { return nil })
			require.True(t, errors.Is(err, client.ErrRefused), "%+v", err)
			require.Contains(t, err.Error(), c.want)
		})
	}

	// Read back at the backend: only the accepted appends are there.
	_, err = newClient(p.client(good)).Append(ctx, "secure-ch", client.Message{Payload: []byte("ok-2")}, client.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"ok-1", "ok-2"}, stored(t, mem, "secure-ch", "ok-2"))
	_, err = newClient(nil).Append(ctx, "plain-ch", client.Message{Payload: []byte("plain-ok")}, client.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"plain-ok"}, stored(t, mem, "plain-ch", "plain-ok"))
}

// Replacing a node's certificate and key: a new connection is served the
// new certificate while a read stream opened before goes on, and a client
// certificate expired meanwhile is refused by new connections.
func TestTLSRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	p := newTestPKI(t)
	server, src := p.nodeServer()
	mem := memory.NewCluster()
	startTLSNode(t, cli, l.Root, mem, "n1", server)
	assign(t, cli, l, "ch", "n1", 1)
	cliCert, cliKey := p.issue("alice", certs.Request{Kind: certs.Client})

	// seen records the serial of each node certificate a client's new
	// connections were served.
	var (
		mu   sync.Mutex
		seen []string
	)
	ccfg := p.client(tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey})
	ccfg.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, cs.PeerCertificates[0].SerialNumber.String())
		return nil
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	reader, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, TLS: ccfg})
	require.NoError(t, err)
	defer reader.Close()
	got := make(chan string, 16)
	readCtx, stopRead := context.WithCancel(ctx)
	readDone := make(chan error, 1)
	go func() {
		readDone <- reader.Read(readCtx, "ch", client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
			got <- string(d.GetPayload())
			return nil
		})
	}()
	appendNew := func(payload string) {
		t.Helper()
		c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, TLS: ccfg}) // a new connection
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Append(ctx, "ch", client.Message{Payload: []byte(payload)}, client.Options{})
		require.NoError(t, err)
		select {
		case g := <-got:
			require.Equal(t, payload, g, "the stream opened before delivers it")
		case <-ctx.Done():
			t.Fatal("the read stream delivered nothing")
		}
	}
	appendNew("before")
	first := last()
	require.Equal(t, first, src.Certificate().SerialNumber.String())
	mu.Lock()
	connsBefore := len(seen)
	mu.Unlock()

	p.issue("node", certs.Request{}) // rotate
	appendNew("after")
	require.NotEqual(t, first, last(), "a new connection is served the new certificate")
	mu.Lock()
	require.Greater(t, len(seen), connsBefore)
	mu.Unlock()
	stopRead()
	require.NoError(t, <-readDone)

	// A client whose certificate expired: refused.
	pair, err := p.ca.Issue(certs.Request{CommonName: "alice", Kind: certs.Client, NotBefore: time.Now().Add(-2 * time.Hour), Validity: time.Hour})
	require.NoError(t, err)
	kp, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	require.NoError(t, err)
	expCfg := p.client(tlsconf.Config{CAFile: p.path("ca.crt")})
	expCfg.Certificates = []tls.Certificate{kp}
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, TLS: expCfg})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Append(ctx, "ch", client.Message{Payload: []byte("expired")}, client.Options{})
	require.True(t, errors.Is(err, client.ErrRefused), "%+v", err)
	require.Contains(t, err.Error(), "expired certificate")
	require.Equal(t, []string{"before", "after"}, stored(t, mem, "ch", "after"))
}

// A node with optional client certificates and authorization takes both
// kinds of client over TLS: one with a certificate (its CN the principal),
// one with a token and no certificate; a client with neither is refused by
// the policy, one with a certificate of another CA by the handshake, and
// none of their appends is stored.
func TestTLSCertificateOrToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	token, hash, err := authz.NewToken(nil)
	require.NoError(t, err)
	pc, err := authz.Parse(fmt.Appendf(nil, `
roles:
  w: [{actions: [append, read], channels: [orders]}]
principals:
  alice: {roles: [w]}
  service: {roles: [w], tokens: [%s]}
`, hash))
	require.NoError(t, err)
	policy, err := authz.Compile(pc)
	require.NoError(t, err)
	p := newTestPKI(t)
	other := newTestPKI(t)
	nodeCert, nodeKey := p.issue("node", certs.Request{})
	aliceCert, aliceKey := p.issue("alice", certs.Request{Kind: certs.Client})
	strangerCert, strangerKey := other.issue("alice", certs.Request{Kind: certs.Client})
	server, _, err := tlsconf.Config{CertFile: nodeCert, KeyFile: nodeKey, ClientCAFile: p.path("ca.crt"), ClientCertOptional: true}.Server()
	require.NoError(t, err)
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	mem := memory.NewCluster()
	startNodeWith(t, cli, mem, node.Config{ID: "a", Root: l.Root, TLS: server, Authz: policy})
	assign(t, cli, l, "orders", "a", 1)
	as := func(cfg tlsconf.Config, token string) *client.Client {
		c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, TLS: p.client(cfg), Token: token})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	ca := tlsconf.Config{CAFile: p.path("ca.crt")}
	_, err = as(tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: aliceCert, KeyFile: aliceKey}, "").
		Append(ctx, "orders", client.Message{Payload: []byte("by-certificate")}, client.Options{})
	require.NoError(t, err)
	_, err = as(ca, token).Append(ctx, "orders", client.Message{Payload: []byte("by-token")}, client.Options{})
	require.NoError(t, err)
	_, err = as(ca, "").Append(ctx, "orders", client.Message{Payload: []byte("anonymous")}, client.Options{})
	require.True(t, errors.Is(err, client.ErrRefused), "%v", err)
	require.Contains(t, err.Error(), "unauthenticated")
	_, err = as(tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: strangerCert, KeyFile: strangerKey}, "").
		Append(ctx, "orders", client.Message{Payload: []byte("stranger")}, client.Options{})
	require.True(t, errors.Is(err, client.ErrRefused), "%v", err)
	require.Contains(t, err.Error(), "unknown certificate authority")
	_, err = as(ca, token).Append(ctx, "orders", client.Message{Payload: []byte("last")}, client.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"by-certificate", "by-token", "last"}, stored(t, mem, "orders", "last"))
}

// Over TLS, appends go over HTTP/1.1 (a connection per call in flight: one
// HTTP/2 connection's reader and writer paced them all) and reads over
// HTTP/2 (a stream each, on one connection per node), as Config.TLS says.
func TestTLSProtocolsByCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	p := newTestPKI(t)
	server, _ := p.nodeServer()
	startTLSNode(t, cli, l.Root, memory.NewCluster(), "secure", server)
	assign(t, cli, l, "proto-ch", "secure", 1)
	cliCert, cliKey := p.issue("alice", certs.Request{Kind: certs.Client})
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root,
		TLS: p.client(tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey})})
	require.NoError(t, err)
	defer c.Close()

	// protocols records the ALPN protocol of every connection a call used.
	var (
		mu     sync.Mutex
		protos []string
	)
	traced := func(ctx context.Context) context.Context {
		mu.Lock()
		protos = nil
		mu.Unlock()
		return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			proto := fmt.Sprintf("no TLS: %T", info.Conn)
			if tc, ok := info.Conn.(*tls.Conn); ok {
				proto = tc.ConnectionState().NegotiatedProtocol
			}
			mu.Lock()
			protos = append(protos, proto)
			mu.Unlock()
		}})
	}
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(protos)
	}
	_, err = c.Append(traced(ctx), "proto-ch", client.Message{Payload: []byte("x")}, client.Options{})
	require.NoError(t, err)
	require.NotEmpty(t, seen())
	for _, p := range seen() {
		require.Equal(t, "http/1.1", p, "an append's connection")
	}
	require.NoError(t, c.Read(traced(ctx), "proto-ch", client.ReadOptions{UntilCaughtUp: true}, func(*streamwalv1.Delivered) error { return nil }))
	require.NotEmpty(t, seen())
	for _, p := range seen() {
		require.Equal(t, "h2", p, "a read's connection")
	}
}
