package authz_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/security/certs"
)

// testCA issues certificates for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for cn (a client certificate, and a server
// one for 127.0.0.1), valid until notAfter.
func (ca *testCA) issue(t *testing.T, cn string, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// syncBuffer is a log sink for concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuthenticate runs a mutual-TLS server whose handler checks "append
// on the channel named by the path" and answers 200, 401 or 403, with
// every kind of credentials.
func TestAuthenticate(t *testing.T) {
	token, hash, err := authz.NewToken(nil)
	require.NoError(t, err)
	other, _, err := authz.NewToken(nil)
	require.NoError(t, err)
	c, err := authz.Parse([]byte(strings.Replace(goodPolicy, "%s", hash, 1)))
	require.NoError(t, err)
	p, err := authz.Compile(c)
	require.NoError(t, err)
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	g, err := authz.NewGuard(p, authz.GuardOptions{Logger: slog.New(slog.NewTextHandler(logs, nil)), Registerer: reg})
	require.NoError(t, err)
	defer g.Close()

	ca := newCA(t)
	srv := httptest.NewUnstartedServer(g.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := g.Check(r.Context(), r.RemoteAddr, authz.ActionAppend, strings.TrimPrefix(r.URL.Path, "/"), nil)
		switch {
		case errors.Is(err, authz.ErrUnauthenticated):
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case errors.Is(err, authz.ErrPermissionDenied):
			http.Error(w, err.Error(), http.StatusForbidden)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "node", time.Now().Add(time.Hour))},
		ClientCAs: ca.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	defer srv.Close()

	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: ca.pool}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	alice := ca.issue(t, "alice", time.Now().Add(time.Hour))
	mallory := ca.issue(t, "mallory", time.Now().Add(time.Hour))
	expired := ca.issue(t, "alice", time.Now().Add(-time.Hour))
	foreign := newCA(t).issue(t, "alice", time.Now().Add(time.Hour))

	for name, tc := range map[string]struct {
		cert    *tls.Certificate
		header  string
		channel string
		status  int // 0: the handshake fails
		reason  string
	}{
		"certificate, granted":              {cert: &alice, channel: "orders-1", status: 200},
		"certificate, literal":              {cert: &alice, channel: "pch-0", status: 200},
		"certificate, another prefix":       {cert: &alice, channel: "pch-1", status: 403, reason: authz.ReasonNoGrant},
		"certificate of no principal":       {cert: &mallory, channel: "orders-1", status: 403, reason: authz.ReasonNoGrant},
		"expired certificate":               {cert: &expired, channel: "orders-1"},
		"certificate of another CA":         {cert: &foreign, channel: "orders-1"},
		"nothing":                           {channel: "orders-1", status: 401, reason: authz.ReasonNoCredentials},
		"token, role without append":        {header: "Bearer " + token, channel: "orders-1", status: 403, reason: authz.ReasonNoGrant},
		"wrong token":                       {header: "Bearer " + other, channel: "orders-1", status: 401, reason: authz.ReasonBadCredentials},
		"wrong token, granted certificate":  {cert: &alice, header: "Bearer " + other, channel: "orders-1", status: 401, reason: authz.ReasonBadCredentials},
		"basic auth":                        {header: "Basic YWxpY2U6eA==", channel: "orders-1", status: 401, reason: authz.ReasonBadCredentials},
		"hash presented as the token":       {header: "Bearer " + hash, channel: "orders-1", status: 401, reason: authz.ReasonBadCredentials},
		"certificate, every channel denied": {cert: &alice, channel: "", status: 403, reason: authz.ReasonNoGrant},
	} {
		t.Run(name, func(t *testing.T) {
			before := refusals(t, reg, tc.reason)
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/"+tc.channel, nil)
			require.NoError(t, err)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := client(tc.cert).Do(req)
			if tc.status == 0 {
				require.Error(t, err, "the handshake must fail")
				return
			}
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, "%s", body)
			require.NotContains(t, string(body), token)
			require.NotContains(t, string(body), other)
			if tc.reason != "" {
				require.Equal(t, before+1, refusals(t, reg, tc.reason), "counted once")
			}
		})
	}
	out := logs.String()
	require.NotContains(t, out, token)
	require.NotContains(t, out, other)
	require.NotContains(t, out, hash[len("sha256:"):])
	require.Equal(t, 9, strings.Count(out, `msg="request refused"`), "one line per refusal:\n%s", out)
	require.Contains(t, out, `principal=mallory action=append channel=orders-1 reason=no_grant`)
	require.Contains(t, out, `principal="" action=append channel=orders-1 reason=bad_credentials`)
}

// refusals is streamwal_authz_refused_total{action="append", reason}.
func refusals(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "streamwal_authz_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["action"] == "append" && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A certificate authenticates by what it says it is: a node's (identity
// URI streamwal://node/n1) is the principal "streamwal://node/n1", whom a
// policy grants only under that name; a client certificate named n1 is
// the client n1, never the node; contradicting marks authenticate no one.
func TestAuthenticateIdentity(t *testing.T) {
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	leaf := func(name string, kind certs.Kind) *x509.Certificate {
		req := certs.Request{CommonName: name, Kind: kind}
		if kind == certs.Node {
			req.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		p, err := ca.Issue(req)
		require.NoError(t, err)
		c, err := certs.Parse(p.CertPEM)
		require.NoError(t, err)
		return c
	}
	c, err := authz.Parse([]byte(`
roles:
  r: [{actions: [read], channels: ["*"]}]
principals:
  n1: {roles: [r]}
  streamwal://node/n2: {roles: [r]}
`))
	require.NoError(t, err)
	p, err := authz.Compile(c)
	require.NoError(t, err)
	as := func(cert *x509.Certificate) (authz.Principal, error) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert, ca.Cert}}}
		return p.Authenticate(r)
	}
	pr, err := as(leaf("n1", certs.Node))
	require.NoError(t, err)
	require.False(t, pr.Known(), "the node n1 is not the client n1 the policy names")
	pr, err = as(leaf("n1", certs.Client))
	require.NoError(t, err)
	require.True(t, pr.Allows(authz.ActionRead, "x"))
	pr, err = as(leaf("n2", certs.Node))
	require.NoError(t, err)
	require.True(t, pr.Allows(authz.ActionRead, "x"), "a node is granted under its identity URI")
	pr, err = as(leaf("n2", certs.Client))
	require.NoError(t, err)
	require.False(t, pr.Known())
	bad := leaf("n3", certs.Node)
	bad.Subject.CommonName = "n4" // the URI no longer names the CN
	_, err = as(bad)
	require.ErrorIs(t, err, authz.ErrUnauthenticated)
}
