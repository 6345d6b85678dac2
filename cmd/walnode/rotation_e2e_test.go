package main

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// replaceFile writes data over path by a rename, as a rotation tool does.
func replaceFile(t *testing.T, path string, data []byte) {
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// Certificate rotation of a walnode that embeds its etcd member, file by
// file, against the API and the member alike: a new certificate written
// over the old key (a rotation half done) leaves both serving the last
// good pair, with new handshakes succeeding; the key following completes
// it and both serve the new one. A client CA file that does not load
// leaves both admitting the clients they admitted.
func TestRotationEveryFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	dir := certDir(t, []string{"n1"}, []string{"alice"})
	file := func(name string) string { return filepath.Join(dir, name) }
	c, etcdAddr := embeddedNode(t, "/rotation/", dir, "-tls-client-ca", file(certs.CACert))
	ready := regexp.MustCompile(`walnode n1 serving on (\S+)`)
	var apiAddr string
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(c.nodes["n1"].log)
		if m := ready.FindSubmatch(data); m != nil {
			apiAddr = string(m[1])
			return true
		}
		return false
	}, time.Minute, 20*time.Millisecond, "the node never served")

	clientCfg, _, err := tlsconf.Config{CAFile: file(certs.CACert), CertFile: file("client.alice.crt"), KeyFile: file("client.alice.key")}.Client()
	require.NoError(t, err)
	// serial is the serial of the certificate addr presents to a new
	// handshake, or nil if the handshake fails.
	serial := func(addr string) *big.Int {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: clientCfg.Clone()}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Logf("handshake with %s: %v", addr, err)
			return nil
		}
		defer func() { _ = conn.Close() }()
		return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber
	}
	first, err := certs.Parse(mustRead(t, file("node.n1.crt")))
	require.NoError(t, err)
	for _, addr := range []string{apiAddr, etcdAddr} {
		require.Equal(t, first.SerialNumber, serial(addr), addr)
	}

	ca, err := certs.LoadCA(file(certs.CACert), file(certs.CAKey))
	require.NoError(t, err)
	next, err := ca.Issue(certs.Request{CommonName: "n1", Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}})
	require.NoError(t, err)
	nextCert, err := certs.Parse(next.CertPEM)
	require.NoError(t, err)

	// Half done: the new certificate over the old key. Both go on with
	// the old pair; give the member's refresh (every second) time to run
	// wrongly, by waiting for the API's refusal to load in the log.
	replaceFile(t, file("node.n1.crt"), next.CertPEM)
	require.Equal(t, first.SerialNumber, serial(apiAddr))
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(c.nodes["n1"].log)
		return regexp.MustCompile(`replaced files are unusable`).Match(data)
	}, time.Minute, 20*time.Millisecond)
	for i := 0; i < 3; i++ {
		require.Equal(t, first.SerialNumber, serial(etcdAddr), "the member keeps its last good pair")
	}

	// Complete: the key follows. Both serve the new pair.
	replaceFile(t, file("node.n1.key"), next.KeyPEM)
	for _, addr := range []string{apiAddr, etcdAddr} {
		require.Eventually(t, func() bool {
			s := serial(addr)
			return s != nil && s.Cmp(nextCert.SerialNumber) == 0
		}, time.Minute, 50*time.Millisecond, "%s never served the new certificate", addr)
	}

	// A client CA file that does not load: both keep admitting alice.
	replaceFile(t, file(certs.CACert), []byte("not a PEM bundle"))
	for _, addr := range []string{apiAddr, etcdAddr} {
		require.Equal(t, nextCert.SerialNumber, serial(addr), addr)
	}
	// The client CA restored: still.
	replaceFile(t, file(certs.CACert), ca.Pair.CertPEM)
	for _, addr := range []string{apiAddr, etcdAddr} {
		require.Equal(t, nextCert.SerialNumber, serial(addr), addr)
	}
}

func mustRead(t *testing.T, path string) []byte {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// -tls-cert and -tls-key alone (no CA flag) with the embedded member: the
// node reaches its member, pinned to the pair it gave it, and serves;
// clients verify both with the CA they know. With no CA to verify a node
// by, the liveness stream is refused to every caller, a node's
// certificate included, and the node says so when it starts.
func TestTLSWithoutCAFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	dir := certDir(t, []string{"n1"}, nil)
	file := func(name string) string { return filepath.Join(dir, name) }
	c, _ := embeddedNode(t, "/noca/", dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tc, _, err := tlsconf.Config{CAFile: file(certs.CACert)}.Client()
	require.NoError(t, err)
	c.connectTLS(ctx, tc)
	asNode, _, err := tlsconf.Config{CAFile: file(certs.CACert), CertFile: file("node.n1.crt"), KeyFile: file("node.n1.key")}.Client()
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, livenessStatus(ctx, t, c, "n1", asNode), "no CA: not even a node's certificate")
	require.Eventually(t, func() bool {
		return strings.Contains(string(mustRead(t, c.nodes["n1"].log)), "the liveness stream is refused to every caller")
	}, time.Minute, 20*time.Millisecond, "no warning that the liveness stream is closed")
}
