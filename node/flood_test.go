package node_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/certs"
)

// lines is a slog.Handler that counts records by message, refusal lines
// (a "reason" but no "suppressed" attribute) by reason, and keeps the
// counts the "suppressed" lines report, by reason.
type lines struct {
	mu         sync.Mutex
	count      map[string]int
	refusals   map[string]int
	suppressed map[string][]int64
}

func newLines() *lines {
	return &lines{count: map[string]int{}, refusals: map[string]int{}, suppressed: map[string][]int64{}}
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lines) WithGroup(string) slog.Handler            { return l }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[r.Message]++
	var reason string
	var n int64 = -1
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "reason":
			reason = a.Value.String()
		case "suppressed":
			n = a.Value.Int64()
		}
		return true
	})
	switch {
	case n >= 0:
		l.suppressed[reason] = append(l.suppressed[reason], n)
	case reason != "":
		l.refusals[reason]++
	}
	return nil
}

// group runs goroutines and returns the first error of any; the first
// error cancels the others' context.
type group struct {
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func newGroup(ctx context.Context) (*group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &group{cancel: cancel}, ctx
}

func (g *group) Go(f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.once.Do(func() { g.err = err; g.cancel() })
		}
	}()
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

func (l *lines) snapshot() (count, refusals map[string]int, suppressed map[string][]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	suppressed = make(map[string][]int64, len(l.suppressed))
	for k, v := range l.suppressed {
		suppressed[k] = append([]int64(nil), v...)
	}
	return maps.Clone(l.count), maps.Clone(l.refusals), suppressed
}

// floodBadHandshakes makes n bad handshakes (until stop is closed when
// n < 0) from workers goroutines on 127.0.0.2, each waiting for the
// node's answer (at most one per tick of pace when n < 0), and returns
// how many it made: when everyTLS > 0, every
// everyTLS-th is a TLS handshake with cfg's certificate, which the node
// refuses, and the others send bytes that are no TLS record (cheap for
// both sides; with a loaded machine 10,000 full handshakes under -race
// take minutes); with everyTLS 0 all are TLS.
func floodBadHandshakes(ctx context.Context, addr string, cfg *tls.Config, n, everyTLS, workers int, stop <-chan struct{}, pace <-chan time.Time) (int, error) {
	var done atomic.Int64
	g, ctx := newGroup(ctx)
	cfg = cfg.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	for range workers {
		g.Go(func() error {
			for {
				i := done.Inc()
				if n >= 0 && i > int64(n) {
					return nil
				}
				if n < 0 {
					select {
					case <-stop:
						return nil
					case <-pace:
					}
				}
				raw, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return err
				}
				_ = raw.SetDeadline(time.Now().Add(testTimeout))
				if everyTLS > 0 && i%int64(everyTLS) != 0 {
					_, _ = raw.Write(make([]byte, 8))
					_, _ = raw.Read(make([]byte, 1))
					_ = raw.Close()
					continue
				}
				conn := tls.Client(raw, cfg)
				if err := conn.HandshakeContext(ctx); err == nil {
					// TLS 1.3: the refusal comes on the first read.
					_, _ = conn.Read(make([]byte, 1))
				}
				_ = conn.Close()
			}
		})
	}
	err := g.Wait()
	if n >= 0 {
		return n, err
	}
	return int(done.Load()), err
}

// TestRefusalFlood: 10,000 bad handshakes (every 50th a TLS handshake
// with another CA's certificate, the others bytes that are no TLS) from
// one peer and 10,000 requests without credentials from another, while a
// client with a good certificate appends: every one of its appends is
// served; every bad handshake is counted exactly once, refused by the TLS
// stack or, once its peer's budget of failed handshakes is spent, at
// accept; and the log holds one line per (peer, reason) and, by the time
// the node stopped, one line with the count of the others.
func TestRefusalFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 refusals")
	}
	const flood, everyTLS = 10_000, 50
	c := newTestCluster(t)
	p := newPKI(t)
	other, err := certs.NewCA(certs.Request{CommonName: "other CA"})
	require.NoError(t, err)
	log := newLines()
	policy := compile(t, `
roles:
  producer: [{actions: [append], channels: [orders]}]
principals:
  alice: {roles: [producer]}
`)
	n, reg, stop := c.startConfigured(t, node.Config{TLS: p.server(t), Authz: policy, Logger: slog.New(log), RefusalLogInterval: time.Hour}, nil)
	c.assign("orders", "n1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	bad := p.client(t, "")
	pr, err := other.Issue(certs.Request{CommonName: "mallory", Kind: certs.Client})
	require.NoError(t, err)
	kp, err := tls.X509KeyPair(pr.CertPEM, pr.KeyPEM)
	require.NoError(t, err)
	// Sent although the node names the CAs it takes (crypto/tls would
	// otherwise send none).
	bad.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	good := streamwalv1connect.NewWALServiceClient(from("127.0.0.1", p.client(t, "alice")), "https://"+n.Addr())
	anon := streamwalv1connect.NewWALServiceClient(from("127.0.0.3", p.client(t, "")), "https://"+n.Addr())

	// The good client appends until the floods are over; every append
	// must succeed.
	floods := make(chan struct{})
	var served atomic.Int64
	g, gctx := newGroup(ctx)
	g.Go(func() error {
		for {
			select {
			case <-floods:
				return nil
			default:
			}
			if _, err := good.Append(gctx, appendReq("orders", "good", "")); err != nil {
				return err
			}
			served.Inc()
		}
	})
	g.Go(func() error {
		defer close(floods)
		if _, err := floodBadHandshakes(gctx, n.Addr(), bad, flood, everyTLS, 4, nil, nil); err != nil {
			return err
		}
		var sent atomic.Int64
		rg, rctx := newGroup(gctx)
		for range 8 {
			rg.Go(func() error {
				for sent.Inc() <= flood {
					_, err := anon.Append(rctx, appendReq("orders", "anon", ""))
					if connect.CodeOf(err) != connect.CodeUnauthenticated {
						return err
					}
				}
				return nil
			})
		}
		return rg.Wait()
	})
	err = g.Wait()
	count, _, _ := log.snapshot()
	require.NoError(t, err, "the good client was served throughout; log: %v; refused connections %v", count,
		metricValue(t, reg, "streamwal_node_refused_total", map[string]string{"reason": "too_many_connections"}))
	require.Positive(t, served.Load())

	// Every bad handshake is refused in the TLS stack, or, once its
	// peer's budget of failed handshakes is spent, at accept. The node
	// logs a refused handshake after its answer: wait for the sum, then
	// check it is exact.
	refused := func() (sum float64, by map[string]float64) {
		by = map[string]float64{}
		for _, r := range []string{"no_client_certificate", "expired_certificate", "unknown_authority", "bad_certificate", "plaintext_client", "closed_by_client", "other"} {
			by[r] = metricValue(t, reg, "streamwal_node_tls_handshakes_refused_total", map[string]string{"reason": r})
			sum += by[r]
		}
		by["failed_handshakes"] = metricValue(t, reg, "streamwal_node_refused_total", map[string]string{"reason": "failed_handshakes"})
		return sum + by["failed_handshakes"], by
	}
	require.Eventually(t, func() bool { sum, _ := refused(); return sum >= flood }, testTimeout, 10*time.Millisecond, "refused: %v", fmt.Sprint(refused()))
	sum, by := refused()
	require.EqualValues(t, flood, sum, "%v", by)
	require.Positive(t, by["failed_handshakes"], "the flooding peer ran out of failed handshakes")
	require.Zero(t, by["closed_by_client"]+by["other"], "%v", by)
	require.EqualValues(t, flood, metricValue(t, reg, "streamwal_authz_refused_total", map[string]string{"action": "append", "reason": "no_credentials"}))
	for _, r := range []string{"too_many_connections", "too_many_streams"} {
		require.Zero(t, metricValue(t, reg, "streamwal_node_refused_total", map[string]string{"reason": r}), "no peer reached a cap")
	}

	_, lines, _ := log.snapshot()
	written := 0
	for reason, n := range lines {
		require.Equal(t, 1, n, "one line per peer and reason in the interval: %s: %v", reason, lines)
		written += n
	}
	require.EqualValues(t, 2*flood-written, metricValue(t, reg, "streamwal_node_refusal_logs_suppressed_total", nil))
	stop()
	count, _, sup := log.snapshot()
	said := int64(0)
	for reason, counts := range sup {
		require.Len(t, counts, 1, "each count said once, at the latest when the node stops: %s", reason)
		said += counts[0]
	}
	require.EqualValues(t, 2*flood-written, said, "every suppressed refusal said: %v", sup)
	require.Equal(t, []int64{flood - 1}, sup["no_credentials"])
	total := 0
	for _, v := range count {
		total += v
	}
	require.Less(t, total, 50, "the log stays bounded: %v", count)
}
