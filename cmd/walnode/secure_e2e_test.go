package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
	"github.com/streamwal/streamwal/utility/backoff"
)

// certDir writes what walctl certs would: a CA, node certificates for
// 127.0.0.1 and client certificates, and returns the directory.
func certDir(t *testing.T, nodes, clients []string) string {
	dir := t.TempDir()
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, certs.CACert, certs.CAKey, ca.Pair, false))
	for _, n := range nodes {
		pair, err := ca.Issue(certs.Request{CommonName: n, Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}})
		require.NoError(t, err)
		crt, key := certs.NodeFiles(n)
		require.NoError(t, certs.Write(dir, crt, key, pair, false))
	}
	for _, c := range clients {
		pair, err := ca.Issue(certs.Request{CommonName: c, Kind: certs.Client})
		require.NoError(t, err)
		crt, key := certs.ClientFiles(c)
		require.NoError(t, certs.Write(dir, crt, key, pair, false))
	}
	return dir
}

// Two walnode processes with mutual TLS on their API and on etcd: the
// coordinator holds its liveness streams over TLS, a client with the
// right certificate appends and reads, clients without one or in
// plaintext are refused at once and store nothing, and when a node is
// killed its channels move and appends go on.
func TestSecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two walnode processes")
	}
	dir := certDir(t, []string{"n1", "n2", "etcd"}, []string{"alice"})
	file := func(name string) string { return filepath.Join(dir, name) }
	srv := etcdtest.StartWith(t, etcdtest.Options{TLS: &etcdtest.TLSFiles{
		CertFile: file("node.etcd.crt"), KeyFile: file("node.etcd.key"), ClientCAFile: file(certs.CACert)}})
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	t.Cleanup(broker.Close)

	c := &e2eCluster{t: t, root: etcdtest.Prefix(t) + "cluster/", etcd: srv.Endpoints(), brokers: broker.ListenAddrs(),
		dir: t.TempDir(), nodes: map[string]*child{}}
	for _, id := range []string{"n1", "n2"} {
		c.nodes[id] = &child{id: id, log: filepath.Join(c.dir, id+".log"), args: []string{
			"-id", id, "-listen", "127.0.0.1:0", "-etcd", strings.Join(c.etcd, ","), "-kafka", strings.Join(c.brokers, ","),
			"-root", c.root, "-session-ttl", "10s", "-data", filepath.Join(c.dir, id), "-shutdown-timeout", "10s",
			"-log-level", "debug",
			"-tls-cert", file("node." + id + ".crt"), "-tls-key", file("node." + id + ".key"), "-tls-client-ca", file(certs.CACert),
		}}
		c.start(id)
	}
	t.Cleanup(func() {
		for id := range c.nodes {
			c.stop(id, syscall.SIGTERM)
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})

	tlsFor := func(principal string) *tls.Config {
		cfg := tlsconf.Config{CAFile: file(certs.CACert)}
		if principal != "" {
			cfg.CertFile, cfg.KeyFile = certs.ClientFiles(principal)
			cfg.CertFile, cfg.KeyFile = file(cfg.CertFile), file(cfg.KeyFile)
		}
		out, _, err := cfg.Client()
		require.NoError(t, err)
		return out
	}
	ecli, err := clientv3.New(clientv3.Config{Endpoints: c.etcd, DialTimeout: 5 * time.Second, TLS: tlsFor("alice"), Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ecli.Close() })
	c.ecli = ecli
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newClient := func(cfg *tls.Config) *client.Client {
		cl, err := client.New(ctx, client.Config{Etcd: ecli, Root: c.root, TLS: cfg,
			Retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	c.cli = newClient(tlsFor("alice"))
	c.view = c.cli.View()
	snap := c.waitAssigned(6)
	channels := make([]string, 0, len(snap.Assignments))
	for ch := range snap.Assignments {
		channels = append(channels, ch)
	}

	// The leader holds a liveness stream to both nodes, over mutual TLS.
	require.Eventually(t, func() bool {
		for id := range c.nodes {
			if secureMetrics(ctx, t, c, id, tlsFor("alice"))["streamwal_coordinator_liveness_streams"] == 2 {
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "no leader holds liveness streams to both nodes")
	m := secureMetrics(ctx, t, c, "n1", tlsFor("alice"))
	require.Equal(t, 0.0, m["streamwal_tls_reload_failing"])
	require.Greater(t, m["streamwal_tls_certificate_not_after_seconds"], float64(time.Now().Unix()))

	appendAll := func(tag string) {
		for _, ch := range channels {
			_, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte(tag + "-" + ch)}, client.Options{})
			require.NoError(t, err, "channel %s", ch)
		}
	}
	appendAll("before")

	for _, bad := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"no client certificate", tlsFor(""), "certificate required"},
		{"plaintext", nil, "it serves TLS"},
	} {
		_, err := newClient(bad.cfg).Append(ctx, channels[0], client.Message{Payload: []byte("refused")}, client.Options{})
		require.True(t, errors.Is(err, client.ErrRefused), "%s: %v", bad.name, err)
		require.Contains(t, err.Error(), bad.want, bad.name)
	}

	// Kill the owner of the first channel: its channels move to the other
	// node, which serves them over TLS.
	victim := snap.Assignments[channels[0]].Value.Node
	c.stop(victim, syscall.SIGKILL)
	_, err = c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		for _, ch := range channels {
			a := s.Assignments[ch].Value
			if a.Node == victim || a.State != cluster.Assigned {
				return false
			}
		}
		return true
	})
	require.NoError(t, err, "the killed node's channels never moved")
	appendAll("after")

	for _, ch := range channels {
		got := c.readAll(ch, []string{"before-" + ch, "after-" + ch})
		require.Equal(t, []string{"before-" + ch, "after-" + ch}, got, "channel %s: only the accepted appends", ch)
	}
}

// secureMetrics reads a node's /metrics over TLS.
func secureMetrics(ctx context.Context, t *testing.T, c *e2eCluster, id string, cfg *tls.Config) map[string]float64 {
	s, _ := c.view.Snapshot()
	out := map[string]float64{}
	n, ok := s.Nodes[id]
	if !ok {
		return out
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+n.Value.Addr+"/metrics", nil)
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: cfg.Clone()}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return out
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// One walnode process that embeds its etcd member serves it over TLS with
// its node certificate and requires client certificates of its CA: a
// client with one reaches etcd and appends; etcd refuses one without.
func TestSecureEmbeddedEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	dir := certDir(t, []string{"n1"}, []string{"alice"})
	file := func(name string) string { return filepath.Join(dir, name) }
	c, _ := embeddedNode(t, "/secure-embedded/", dir, "-tls-client-ca", file(certs.CACert))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tlsFor := func(cert bool) *tls.Config {
		cfg := tlsconf.Config{CAFile: file(certs.CACert)}
		if cert {
			cfg.CertFile, cfg.KeyFile = file("client.alice.crt"), file("client.alice.key")
		}
		out, _, err := cfg.Client()
		require.NoError(t, err)
		return out
	}
	c.connectTLS(ctx, tlsFor(true))

	// Without a client certificate etcd refuses, and says so.
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel()
	_, err := etcdstore.Dial(dctx, etcdstore.Config{Endpoints: c.etcd, TLS: tlsFor(false)})
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate required")
}

// embeddedNode starts walnode n1 with its embedded etcd member on a free
// loopback address (returned), the TLS pair node.n1.{crt,key} of the
// certificates in dir and the extra flags, under root; the test's cleanup
// stops it, and dumps its log when the test failed.
func embeddedNode(t *testing.T, root, dir string, extra ...string) (*e2eCluster, string) {
	t.Helper()
	etcdAddr := freeAddr(t)
	c := &e2eCluster{t: t, root: root, etcd: []string{"https://" + etcdAddr}, dir: t.TempDir(), nodes: map[string]*child{}}
	args := []string{
		"-id", "n1", "-listen", "127.0.0.1:0", "-etcd-listen", etcdAddr, "-root", c.root, "-data", filepath.Join(c.dir, "n1"),
		"-log-level", "debug", "-tls-cert", filepath.Join(dir, "node.n1.crt"), "-tls-key", filepath.Join(dir, "node.n1.key"),
	}
	c.nodes["n1"] = &child{id: "n1", log: filepath.Join(c.dir, "n1.log"), args: append(args, extra...)}
	c.start("n1")
	t.Cleanup(func() {
		c.stop("n1", syscall.SIGTERM)
		if t.Failed() {
			c.dumpLogs()
		}
	})
	return c, etcdAddr
}

// connectTLS reaches the cluster's embedded etcd member over TLS with
// cfg (waiting for it to answer), makes the cluster's client with cfg,
// and appends once to each of the four channels it waits to see assigned:
// the cluster serves that client.
func (c *e2eCluster) connectTLS(ctx context.Context, cfg *tls.Config) *client.Client {
	t := c.t
	t.Helper()
	var ecli *clientv3.Client
	require.Eventually(t, func() bool {
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		defer dcancel()
		var err error
		ecli, err = etcdstore.Dial(dctx, etcdstore.Config{Endpoints: c.etcd, TLS: cfg})
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the embedded etcd member never answered over TLS")
	t.Cleanup(func() { _ = ecli.Close() })
	cl, err := client.New(ctx, client.Config{Etcd: ecli, Root: c.root, TLS: cfg})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.cli, c.view = cl, cl.View()
	snap := c.waitAssigned(4)
	for ch := range snap.Assignments {
		_, err := cl.Append(ctx, ch, client.Message{Payload: []byte("hello")}, client.Options{})
		require.NoError(t, err, "channel %s", ch)
	}
	return cl
}
