package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
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

// BenchmarkSecureAppend compares appends through the client to one node
// in plaintext with no authorization and to another, in the same process
// on the same backend, with mutual TLS and authorization (a policy of
// 10,000 prefixes besides the one that grants), in alternating rounds of
// 250 ms (one of each per b.N), from 8 concurrent appenders of 256-byte
// messages. A third node with mutual TLS and no authorization separates
// the two costs. It reports appends/s and p99 and their ratios to
// plaintext. The memory backend makes the API the whole cost: on a backend
// that syncs, the ratios are closer to 1.
func BenchmarkSecureAppend(b *testing.B) {
	const (
		workers = 8
		round   = 250 * time.Millisecond
	)
	c := newTestCluster(b)
	p := newPKI(b)
	var grants []string
	for i := range 10_000 {
		grants = append(grants, fmt.Sprintf("tenant-%05d-*", i))
	}
	policy := compile(b, fmt.Sprintf("roles:\n  others: [{actions: [append, read], channels: [%s]}]\n"+
		"  producer: [{actions: [append], channels: [\"secur*\"]}]\nprincipals:\n  bench: {roles: [others, producer]}\n", quoteAll(grants)))
	c.startSecureNode(b, "plain", nil, nil)
	c.startSecureNode(b, "tls", p.server(b), nil)
	c.startSecureNode(b, "secure", p.server(b), policy)
	c.assign("plain", "plain", 1)
	c.assign("tls", "tls", 1)
	c.assign("secure", "secure", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	newClient := func(tlsCfg *tls.Config) *client.Client {
		cl, err := client.New(ctx, client.Config{Etcd: c.cli, Root: c.layout.Root, TLS: tlsCfg})
		require.NoError(b, err)
		b.Cleanup(cl.Close)
		return cl
	}
	plain, tlsOnly, secure := newClient(nil), newClient(p.client(b, "bench")), newClient(p.client(b, "bench"))
	// Warm up: connections made, handshakes done, channels' first appends.
	appendRound(ctx, plain, "plain", workers, round/5)
	appendRound(ctx, tlsOnly, "tls", workers, round/5)
	appendRound(ctx, secure, "secure", workers, round/5)

	var plainLat, tlsLat, secureLat []time.Duration
	b.ResetTimer()
	for range b.N {
		plainLat = append(plainLat, appendRound(ctx, plain, "plain", workers, round)...)
		tlsLat = append(tlsLat, appendRound(ctx, tlsOnly, "tls", workers, round)...)
		secureLat = append(secureLat, appendRound(ctx, secure, "secure", workers, round)...)
	}
	b.StopTimer()
	require.NotEmpty(b, plainLat)
	require.NotEmpty(b, tlsLat)
	require.NotEmpty(b, secureLat)
	elapsed := (time.Duration(b.N) * round).Seconds()
	pr, tr, sr := float64(len(plainLat))/elapsed, float64(len(tlsLat))/elapsed, float64(len(secureLat))/elapsed
	pp, tp, sp := p99(plainLat), p99(tlsLat), p99(secureLat)
	b.ReportMetric(pr, "plain-appends/s")
	b.ReportMetric(sr, "secure-appends/s")
	b.ReportMetric(float64(pp.Microseconds()), "plain-p99-µs")
	b.ReportMetric(float64(sp.Microseconds()), "secure-p99-µs")
	b.ReportMetric(sr/pr, "throughput-ratio")
	b.ReportMetric(float64(sp)/float64(pp), "p99-ratio")
	// mutual TLS without authorization, for what authorization adds on top
	b.ReportMetric(tr/pr, "tls-only-throughput-ratio")
	b.ReportMetric(float64(tp)/float64(pp), "tls-only-p99-ratio")
}

func quoteAll(ss []string) string {
	var b []byte
	for i, s := range ss {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%q", s)
	}
	return string(b)
}

// appendRound appends from workers goroutines for d and returns how many
// appends finished and their latencies.
func appendRound(ctx context.Context, cl *client.Client, channel string, workers int, d time.Duration) []time.Duration {
	payload := make([]byte, 256)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(end) {
				start := time.Now()
				if _, err := cl.Append(ctx, channel, client.Message{Payload: payload}, client.Options{}); err != nil {
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*99/100]
}
