package node_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// startConfigured starts a node with cfg (its ID, root, TTL and backend
// filled in) and its own registry; setup runs before Start. stop shuts it
// down (once; the test's cleanup calls it too).
func (c *testCluster) startConfigured(tb testing.TB, cfg node.Config, setup func(*node.Node)) (n *node.Node, reg *prometheus.Registry, stop func()) {
	tb.Helper()
	o, err := memory.New(context.Background(), memory.Config{Cluster: c.mem})
	require.NoError(tb, err)
	reg = prometheus.NewRegistry()
	if cfg.ID == "" {
		cfg.ID = "n1"
	}
	cfg.Root, cfg.SessionTTL, cfg.Backend, cfg.Registerer, cfg.Gatherer = c.layout.Root, 2*time.Second, "memory", reg, reg
	n, err = node.New(c.cli, o, cfg)
	require.NoError(tb, err)
	if setup != nil {
		setup(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(tb, n.Start(ctx))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			require.NoError(tb, n.Shutdown(ctx))
			_ = o.Close()
		})
	}
	tb.Cleanup(stop)
	return n, reg, stop
}

// metricValue is the value of a counter of reg with these labels (0 when
// it has no such series).
func metricValue(tb testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	require.NoError(tb, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// from returns an HTTP client whose connections leave from the loopback
// address ip (127.0.0.0/8 all reaches the node's 127.0.0.1): another
// peer, as the node counts them.
func from(ip string, tlsCfg *tls.Config) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: tlsCfg, ForceAttemptHTTP2: tlsCfg != nil}}
}

// openLiveness opens a liveness stream and reads the node's ID: the
// stream is then held by the node's handler.
func openLiveness(ctx context.Context, t *testing.T, hc *http.Client, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+cluster.LivenessPath, nil)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode == http.StatusOK {
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "n1\n", line)
	}
	return resp
}

// TestLivenessNeedsNodeIdentity: with TLS that verifies client
// certificates, only a node's certificate holds the liveness stream; a
// client's certificate (the CA's, named like a node or not) and no
// certificate are refused and counted. With TLS that verifies no client
// certificate no caller can prove it is a node: a node's certificate is
// refused too. Without TLS it stays open to any caller (the caps bound
// it).
func TestLivenessNeedsNodeIdentity(t *testing.T) {
	c := newTestCluster(t)
	p := newPKI(t)
	n, reg, _ := c.startConfigured(t, node.Config{TLS: p.server(t)}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	url := "https://" + n.Addr()

	peer := p.client(t, "")
	peer.Certificates = []tls.Certificate{p.pair(t, certs.Request{CommonName: "n2", Kind: certs.Node, IPs: []net.IP{net.ParseIP("127.0.0.1")}})}
	require.Equal(t, http.StatusOK, openLiveness(ctx, t, from("127.0.0.1", peer), url).StatusCode, "a node's certificate")

	for who, cfg := range map[string]*tls.Config{
		"no certificate":                p.client(t, ""),
		"a client's certificate":        p.client(t, "alice"),
		"a client's, named like a node": p.client(t, "n2"),
	} {
		resp := openLiveness(ctx, t, from("127.0.0.1", cfg), url)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, who)
	}
	require.EqualValues(t, 3, metricValue(t, reg, "streamwal_node_refused_total", map[string]string{"reason": "no_node_identity"}))

	unverified := newTestCluster(t)
	server := p.server(t)
	server.ClientAuth, server.ClientCAs = tls.NoClientCert, nil
	un, ureg, _ := unverified.startConfigured(t, node.Config{TLS: server}, nil)
	resp := openLiveness(ctx, t, from("127.0.0.1", peer), "https://"+un.Addr())
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "TLS that verifies no client: not even a node's certificate")
	require.EqualValues(t, 1, metricValue(t, ureg, "streamwal_node_refused_total", map[string]string{"reason": "no_node_identity"}))

	plain := newTestCluster(t)
	pn, _, _ := plain.startConfigured(t, node.Config{}, nil)
	require.Equal(t, http.StatusOK, openLiveness(ctx, t, from("127.0.0.1", nil), "http://"+pn.Addr()).StatusCode, "no TLS: no identity to ask for")
}

// TestStreamsPerPeerCapped: one peer over its cap of requests in flight is
// refused (429 for the liveness stream, ResourceExhausted and not stored
// for an append), while another peer is served; a request that ends gives
// its place back.
func TestStreamsPerPeerCapped(t *testing.T) {
	c := newTestCluster(t)
	n, reg, _ := c.startConfigured(t, node.Config{MaxStreamsPerPeer: 2}, nil)
	c.assign("orders", "n1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	url := "http://" + n.Addr()
	one, other := from("127.0.0.1", nil), from("127.0.0.2", nil)

	first := openLiveness(ctx, t, one, url)
	require.Equal(t, http.StatusOK, first.StatusCode)
	require.Equal(t, http.StatusOK, openLiveness(ctx, t, one, url).StatusCode)
	require.Equal(t, http.StatusTooManyRequests, openLiveness(ctx, t, one, url).StatusCode, "a third stream of one peer")
	_, err := streamwalv1connect.NewWALServiceClient(one, url).Append(ctx, appendReq("orders", "over", ""))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	_, oc := outcome(t, err)
	require.True(t, oc.GetNotStored(), "over the cap: nothing stored")

	_, err = streamwalv1connect.NewWALServiceClient(other, url).Append(ctx, appendReq("orders", "served", ""))
	require.NoError(t, err, "another peer is served")
	require.EqualValues(t, 2, metricValue(t, reg, "streamwal_node_refused_total", map[string]string{"reason": "too_many_streams"}))

	_ = first.Body.Close()
	require.Eventually(t, func() bool {
		_, err := streamwalv1connect.NewWALServiceClient(one, url).Append(ctx, appendReq("orders", "again", ""))
		return err == nil
	}, testTimeout, 5*time.Millisecond, "a stream that ended gives its place back")
	require.Equal(t, []string{"served", "again"}, backendPayloads(t, c.mem, "orders", "again"))
}

// TestConnectionsPerPeerCapped: a connection over its peer's cap is closed
// at accept, before a byte is read, while another peer connects and is
// served; one that closes gives its place back.
func TestConnectionsPerPeerCapped(t *testing.T) {
	c := newTestCluster(t)
	n, reg, _ := c.startConfigured(t, node.Config{MaxConnsPerPeer: 2}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dial := func(ip string) net.Conn {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		conn, err := d.DialContext(ctx, "tcp", n.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(testTimeout)))
		return conn
	}
	// health asks /healthz on conn: the node serves it.
	health := func(conn net.Conn) error {
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	held := []net.Conn{dial("127.0.0.1"), dial("127.0.0.1")}
	for _, conn := range held {
		require.NoError(t, health(conn))
	}
	over := dial("127.0.0.1")
	_, err := over.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the node closed the third connection of one peer")
	require.NoError(t, health(dial("127.0.0.2")), "another peer is served")
	require.EqualValues(t, 1, metricValue(t, reg, "streamwal_node_refused_total", map[string]string{"reason": "too_many_connections"}))

	_ = held[0].Close()
	require.Eventually(t, func() bool { return health(dial("127.0.0.1")) == nil }, testTimeout, 5*time.Millisecond,
		"a closed connection gives its place back")
}

// TestIdleLivenessStreamEnds: a liveness stream without heartbeats ends
// when its idle bound passes (the node's timer, driven by the test); with
// heartbeats, they come at most half the bound apart.
func TestIdleLivenessStreamEnds(t *testing.T) {
	c := newTestCluster(t)
	fire := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	n, _, _ := c.startConfigured(t, node.Config{LivenessIdle: time.Second}, func(n *node.Node) {
		n.SetLivenessAfter(func(d time.Duration) <-chan time.Time {
			asked <- d
			return fire
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	url := "http://" + n.Addr()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+cluster.LivenessPath+"?"+cluster.LivenessHeartbeat+"=5s", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, "500ms", resp.Header.Get(cluster.LivenessHeartbeatHeader), "heartbeats at most half the bound apart")
	_ = resp.Body.Close()

	idle := openLiveness(ctx, t, http.DefaultClient, url)
	require.Equal(t, time.Second, <-asked)
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, idle.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		t.Fatalf("the stream ended before its bound: %v", err)
	default:
	}
	fire <- time.Now()
	select {
	case err := <-ended:
		require.NoError(t, err, "the node ended the stream")
	case <-ctx.Done():
		t.Fatal("an idle liveness stream outlived its bound")
	}
}

// TestIdleConnectionClosed: a connection with no request in flight is
// closed after Config.IdleTimeout.
func TestIdleConnectionClosed(t *testing.T) {
	c := newTestCluster(t)
	n, _, _ := c.startConfigured(t, node.Config{IdleTimeout: 50 * time.Millisecond}, nil)
	conn, err := net.Dial("tcp", n.Addr())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	require.NoError(t, conn.SetDeadline(time.Now().Add(testTimeout)))
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the node closed the idle connection (a deadline error means it did not)")
}

// TestRequestBodyBounded: a request whose body stops coming is ended
// after Config.RequestReadTimeout; a tailing read, whose body was read at
// once, stays open past it and delivers what is appended later.
func TestRequestBodyBounded(t *testing.T) {
	c := newTestCluster(t)
	const bound = 50 * time.Millisecond
	n, _, _ := c.startConfigured(t, node.Config{RequestReadTimeout: bound}, nil)
	c.assign("orders", "n1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	conn, err := net.Dial("tcp", n.Addr())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	require.NoError(t, conn.SetDeadline(time.Now().Add(testTimeout)))
	_, err = io.WriteString(conn, "POST /streamwal.v1.WALService/Append HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the node answered the stalled request (a deadline error means it waited for the body)")
	_ = resp.Body.Close()
	require.NotEqual(t, http.StatusOK, resp.StatusCode)

	_, err = apiClient(n).Append(ctx, appendReq("orders", "first", ""))
	require.NoError(t, err)
	stream, err := apiClient(n).Read(ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: "orders"}))
	require.NoError(t, err)
	defer func() { _ = stream.Close() }()
	require.True(t, stream.Receive(), "%v", stream.Err())
	require.Equal(t, "first", string(stream.Msg().GetMessages()[0].GetPayload()))
	time.Sleep(4 * bound) // past the bound: a deadline left on the read would have cut it by now
	_, err = apiClient(n).Append(ctx, appendReq("orders", "later", ""))
	require.NoError(t, err)
	for stream.Receive() {
		for _, m := range stream.Msg().GetMessages() {
			if string(m.GetPayload()) == "later" {
				return
			}
		}
	}
	t.Fatalf("the tailing read ended: %v", stream.Err())
}
