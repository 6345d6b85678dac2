package tlsconf_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pki is a CA and files written under dir.
type pki struct {
	t   *testing.T
	dir string
	ca  *certs.Authority
}

func newPKI(t *testing.T) *pki {
	ca, err := certs.NewCA(certs.Request{CommonName: "test CA"})
	require.NoError(t, err)
	p := &pki{t: t, dir: t.TempDir(), ca: ca}
	require.NoError(t, os.WriteFile(p.path("ca.crt"), ca.Pair.CertPEM, 0o644))
	return p
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes name.crt and name.key, and returns their paths.
func (p *pki) issue(name string, req certs.Request) (string, string) {
	p.t.Helper()
	if req.CommonName == "" {
		req.CommonName = name
	}
	if req.Kind == 0 {
		req.Kind = certs.Node
	}
	if req.Kind == certs.Node && len(req.DNSNames) == 0 && len(req.IPs) == 0 {
		req.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		req.DNSNames = []string{"localhost"}
	}
	pair, err := p.ca.Issue(req)
	require.NoError(p.t, err)
	require.NoError(p.t, certs.Write(p.dir, name+".crt", name+".key", pair, true))
	return p.path(name + ".crt"), p.path(name + ".key")
}

// serve runs an HTTP server (HTTP/2 over TLS) with cfg on loopback and
// returns its address; each answer is the serial number of the
// certificate the server presented... which the client reads itself.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" { // stays open until the client ends it
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
			buf := make([]byte, 1)
			for {
				if _, err := r.Body.Read(buf); err != nil {
					return
				}
				_, _ = w.Write(buf)
				_ = http.NewResponseController(w).Flush()
			}
		}
		_, _ = io.WriteString(w, "ok")
	}), TLSConfig: cfg, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeTLS(ln, "", "")
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// get makes one request on a new connection and returns the server's
// leaf certificate.
func get(t *testing.T, cfg *tls.Config, addr string) (*x509.Certificate, error) {
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "ok", string(body))
	require.Equal(t, 2, resp.ProtoMajor, "HTTP/2 by ALPN")
	return resp.TLS.PeerCertificates[0], nil
}

func serverConfig(t *testing.T, c tlsconf.Config) *tls.Config {
	t.Helper()
	cfg, _, err := c.Server()
	require.NoError(t, err)
	return cfg
}

func clientConfig(t *testing.T, c tlsconf.Config) *tls.Config {
	t.Helper()
	cfg, _, err := c.Client()
	require.NoError(t, err)
	return cfg
}

// Every handshake a mutual-TLS server must refuse is refused, from either
// side, and the right credentials pass.
func TestHandshakes(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t) // another CA
	nodeCert, nodeKey := p.issue("node", certs.Request{})
	cliCert, cliKey := p.issue("alice", certs.Request{Kind: certs.Client})
	oldCert, oldKey := p.issue("old", certs.Request{Kind: certs.Client, NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
	strangerCert, strangerKey := other.issue("mallory", certs.Request{Kind: certs.Client})
	elsewhereCert, elsewhereKey := p.issue("elsewhere", certs.Request{DNSNames: []string{"elsewhere.example"}})

	// The expired client certificate is refused by Client itself; the
	// server must refuse it too when a client presents it anyway.
	expired, err := tls.LoadX509KeyPair(oldCert, oldKey)
	require.NoError(t, err)

	addr := serve(t, serverConfig(t, tlsconf.Config{CertFile: nodeCert, KeyFile: nodeKey, ClientCAFile: p.path("ca.crt")}))
	elsewhere := serve(t, serverConfig(t, tlsconf.Config{CertFile: elsewhereCert, KeyFile: elsewhereKey}))

	good := tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey}
	leaf, err := get(t, clientConfig(t, good), addr)
	require.NoError(t, err)
	require.NoError(t, tlsconf.Probe(context.Background(), addr, clientConfig(t, good), 5*time.Second))
	require.Equal(t, "node", leaf.Subject.CommonName)

	expiredCfg := clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt")})
	expiredCfg.Certificates = []tls.Certificate{expired}
	for _, c := range []struct {
		name string
		cfg  *tls.Config
		addr string
		want string
	}{
		{"no client certificate", clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt")}), addr, "certificate required"},
		{"client certificate of another CA", clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: strangerCert, KeyFile: strangerKey}), addr, "unknown certificate authority"},
		{"expired client certificate", expiredCfg, addr, "expired certificate"},
		{"server of another CA", clientConfig(t, tlsconf.Config{CAFile: other.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey}), addr, "certificate signed by unknown authority"},
		{"server certificate for another name", clientConfig(t, good), elsewhere, "cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := get(t, c.cfg, c.addr)
			require.Error(t, err)
			// HTTP/2 over TLS 1.3 may only say the connection could not
			// be established; Probe finds the server's reason.
			err = tlsconf.Probe(context.Background(), c.addr, c.cfg, 5*time.Second)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

// A certificate starts at a server and a client, or is refused naming the
// flag, the file and the reason.
func TestMisconfiguration(t *testing.T) {
	p := newPKI(t)
	cert, key := p.issue("node", certs.Request{})
	otherCert, _ := p.issue("other", certs.Request{})
	expCert, expKey := p.issue("exp", certs.Request{NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
	require.NoError(t, os.WriteFile(p.path("empty.pem"), []byte("not pem\n"), 0o644))
	names := tlsconf.Names{CertFile: "-tls-cert", KeyFile: "-tls-key", CAFile: "-ca", ClientCAFile: "-tls-client-ca"}
	missing := p.path("missing.key")
	for _, c := range []struct {
		name   string
		cfg    tlsconf.Config
		client bool
		want   string
	}{
		{"certificate without key", tlsconf.Config{CertFile: cert}, false, "-tls-cert " + cert + " is given without -tls-key"},
		{"missing key", tlsconf.Config{CertFile: cert, KeyFile: missing}, false, "-tls-key " + missing + ": cannot read the key: open " + missing + ": no such file or directory"},
		{"unreadable key", tlsconf.Config{CertFile: cert, KeyFile: p.dir}, false, "-tls-key " + p.dir + ": cannot read the key: read " + p.dir + ": is a directory"},
		{"key of another certificate", tlsconf.Config{CertFile: otherCert, KeyFile: key}, false, "-tls-key " + key + ": not the key of the certificate -tls-cert " + otherCert + ": tls: private key does not match public key"},
		{"no key in the key file", tlsconf.Config{CertFile: cert, KeyFile: cert}, false, "-tls-key " + cert + ": holds no PEM private key"},
		{"no certificate in the certificate file", tlsconf.Config{CertFile: key, KeyFile: key}, false, "-tls-cert " + key + ": holds no PEM certificate"},
		{"expired certificate", tlsconf.Config{CertFile: expCert, KeyFile: expKey}, false, "-tls-cert " + expCert + ": the certificate expired at "},
		{"client CA with no certificate", tlsconf.Config{CertFile: cert, KeyFile: key, ClientCAFile: p.path("empty.pem")}, false, "-tls-client-ca " + p.path("empty.pem") + ": holds no PEM certificate"},
		{"CA with no certificate", tlsconf.Config{CAFile: p.path("empty.pem")}, true, "-ca " + p.path("empty.pem") + ": holds no PEM certificate"},
		{"server without certificate", tlsconf.Config{ClientCAFile: p.path("ca.crt")}, false, "a server needs -tls-cert and -tls-key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Names = names
			var err error
			if c.client {
				_, _, err = c.cfg.Client()
			} else {
				_, _, err = c.cfg.Server()
			}
			require.ErrorIs(t, err, tlsconf.ErrInvalid)
			require.Contains(t, err.Error(), c.want)
		})
	}
	_, _, err := tlsconf.Config{CertFile: cert, KeyFile: missing}.Server()
	require.ErrorIs(t, err, os.ErrNotExist, "the cause stays visible")
	var fe *tlsconf.FileError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "KeyFile", fe.Name, "without Names, the field's name")
}

// Replacing the files changes the certificate of new connections, leaves
// established streams alone, and a broken replacement keeps the last good
// pair.
func TestRotation(t *testing.T) {
	p := newPKI(t)
	cert, key := p.issue("node", certs.Request{})
	cliCert, cliKey := p.issue("alice", certs.Request{Kind: certs.Client})
	scfg, src, err := tlsconf.Config{CertFile: cert, KeyFile: key, ClientCAFile: p.path("ca.crt")}.Server()
	require.NoError(t, err)
	addr := serve(t, scfg)
	ccfg := clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey})

	first, err := get(t, ccfg, addr)
	require.NoError(t, err)

	// A stream established before the rotation.
	tr := &http.Transport{TLSClientConfig: ccfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/stream", pr)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	echo := func(b byte) {
		t.Helper()
		_, err := pw.Write([]byte{b})
		require.NoError(t, err)
		got := make([]byte, 1)
		_, err = io.ReadFull(resp.Body, got)
		require.NoError(t, err)
		require.Equal(t, b, got[0])
	}
	echo('a')
	require.Equal(t, first.SerialNumber, resp.TLS.PeerCertificates[0].SerialNumber)

	// Rotate: a new pair in place of the old.
	p.issue("node", certs.Request{})
	second, err := get(t, ccfg, addr)
	require.NoError(t, err)
	require.NotEqual(t, first.SerialNumber, second.SerialNumber, "a new connection sees the new certificate")
	require.Equal(t, second.SerialNumber, src.Certificate().SerialNumber)
	require.NoError(t, src.Err())
	echo('b') // the old stream goes on

	// A broken rotation: a new certificate beside the old key.
	pair, err := p.ca.Issue(certs.Request{CommonName: "node", Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cert+".new", pair.CertPEM, 0o644))
	require.NoError(t, os.Rename(cert+".new", cert))
	third, err := get(t, ccfg, addr)
	require.NoError(t, err)
	require.Equal(t, second.SerialNumber, third.SerialNumber, "the last good pair is kept")
	require.ErrorIs(t, src.Err(), tlsconf.ErrInvalid)
	require.Contains(t, src.Err().Error(), "not the key of the certificate")
	echo('c')

	// A broken client CA bundle beside it: Err names both problems, and
	// errors.Is sees past the first.
	ca, err := os.ReadFile(p.path("ca.crt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p.path("ca.crt.new"), []byte("not a certificate"), 0o644))
	require.NoError(t, os.Rename(p.path("ca.crt.new"), p.path("ca.crt")))
	both := src.Err()
	require.Contains(t, both.Error(), "not the key of the certificate")
	require.Contains(t, both.Error(), "ClientCAFile")
	require.ErrorIs(t, both, tlsconf.ErrInvalid)
	require.NoError(t, os.WriteFile(p.path("ca.crt.new"), ca, 0o644))
	require.NoError(t, os.Rename(p.path("ca.crt.new"), p.path("ca.crt")))

	// The key follows: the pair is whole again.
	require.NoError(t, certs.Write(p.dir, "node.crt.x", "node.key", pair, true))
	fourth, err := get(t, ccfg, addr)
	require.NoError(t, err)
	require.NotEqual(t, second.SerialNumber, fourth.SerialNumber)
	require.NoError(t, src.Err())
	echo('d')
	require.NoError(t, pw.Close())
}

// A client certificate is re-read when replaced, and the server's client
// CA bundle too: a client of a CA added later is accepted by new
// handshakes.
func TestRotationClientSide(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	cert, key := p.issue("node", certs.Request{})
	cliCert, cliKey := p.issue("alice", certs.Request{Kind: certs.Client})
	addr := serve(t, serverConfig(t, tlsconf.Config{CertFile: cert, KeyFile: key, ClientCAFile: p.path("ca.crt")}))
	ccfg := clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey})
	_, err := get(t, ccfg, addr)
	require.NoError(t, err)

	// The client's files now hold a certificate of the other CA: refused.
	pair, err := other.ca.Issue(certs.Request{CommonName: "alice", Kind: certs.Client})
	require.NoError(t, err)
	require.NoError(t, certs.Write(p.dir, "alice.crt", "alice.key", pair, true))
	_, err = get(t, ccfg, addr)
	require.Error(t, err)
	require.ErrorContains(t, tlsconf.Probe(context.Background(), addr, ccfg, 5*time.Second), "unknown certificate authority")

	// The server's client CA bundle gains the other CA: accepted.
	bundle := append(append([]byte(nil), p.ca.Pair.CertPEM...), other.ca.Pair.CertPEM...)
	require.NoError(t, os.WriteFile(p.path("ca.crt.new"), bundle, 0o644))
	require.NoError(t, os.Rename(p.path("ca.crt.new"), p.path("ca.crt")))
	_, err = get(t, ccfg, addr)
	require.NoError(t, err)
}

// With optional client certificates a client without one connects, and
// one with a certificate of another CA is still refused.
func TestClientCertOptional(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	cert, key := p.issue("node", certs.Request{})
	strangerCert, strangerKey := other.issue("mallory", certs.Request{Kind: certs.Client})
	addr := serve(t, serverConfig(t, tlsconf.Config{CertFile: cert, KeyFile: key, ClientCAFile: p.path("ca.crt"), ClientCertOptional: true}))
	_, err := get(t, clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt")}), addr)
	require.NoError(t, err)
	stranger := clientConfig(t, tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: strangerCert, KeyFile: strangerKey})
	require.ErrorContains(t, tlsconf.Probe(context.Background(), addr, stranger, 5*time.Second), "unknown certificate authority")
	_, _, err = tlsconf.Config{CertFile: cert, KeyFile: key, ClientCertOptional: true}.Server()
	require.ErrorIs(t, err, tlsconf.ErrInvalid)
}
