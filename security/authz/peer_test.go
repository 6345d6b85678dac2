package authz_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/security/certs"
)

// A node's certificate (certs.Node) names a node; a client's, whatever its
// common name, does not; no certificate is no node.
func TestNodeName(t *testing.T) {
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	state := func(req certs.Request) *tls.ConnectionState {
		pair, err := ca.Issue(req)
		require.NoError(t, err)
		leaf, err := certs.Parse(pair.CertPEM)
		require.NoError(t, err)
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	}
	name, err := authz.NodeName(state(certs.Request{CommonName: "n1", Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}))
	require.NoError(t, err)
	require.Equal(t, "n1", name)
	clientLeaf := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	clientLeaf.Subject.CommonName = "n1"
	for what, s := range map[string]*tls.ConnectionState{
		"a client's certificate": state(certs.Request{CommonName: "alice", Kind: certs.Client}),
		"a certificate named like a node, with server use, without a node's identity": {VerifiedChains: [][]*x509.Certificate{{clientLeaf}}},
		"no certificate": {},
		"no TLS":         nil,
	} {
		_, err := authz.NodeName(s)
		require.True(t, errors.Is(err, authz.ErrNotNode), "%s: %v", what, err)
	}
	// An identity certs.Identify cannot read (here: no name at all) keeps
	// its cause beside ErrNotNode.
	_, err = authz.NodeName(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}})
	require.True(t, errors.Is(err, authz.ErrNotNode), "%v", err)
	require.True(t, errors.Is(err, certs.ErrIdentity), "%v", err)
}

// With Placed, a vchannel grant holds only on the pchannel the pool
// allocated the vchannel to; a pchannel grant is not asked; a failure to
// find out is no refusal.
func TestCheckPlaced(t *testing.T) {
	cfg, err := authz.Parse([]byte(`
roles:
  tenant: [{actions: [append], channels: ["orders-*"]}]
  owner:  [{actions: [append], channels: ["pch-*"]}]
principals:
  tenant: {roles: [tenant]}
  owner:  {roles: [owner]}
`))
	require.NoError(t, err)
	p, err := authz.Compile(cfg)
	require.NoError(t, err)
	asked := 0
	g, err := authz.NewGuard(p, authz.GuardOptions{Logger: slog.New(slog.DiscardHandler),
		Placed: func(_ context.Context, vc string) (string, error) {
			asked++
			switch vc {
			case "orders-x":
				return "pch-1", nil
			case "orders-broken":
				return "", errors.New("etcd is away")
			}
			return "", nil
		}})
	require.NoError(t, err)
	as := func(cn string) context.Context {
		r := httptest.NewRequest("GET", "/", nil)
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
		r.TLS.VerifiedChains[0][0].Subject.CommonName = cn
		return p.WithAuthentication(context.Background(), r)
	}
	vcs := func(names ...string) func(func(string) bool) { return slices.Values(names) }

	require.NoError(t, g.Check(as("tenant"), "peer", authz.ActionAppend, "pch-1", vcs("orders-x", "orders-x")))
	require.Equal(t, 1, asked, "one vchannel, asked once")
	for _, tc := range []struct {
		pchannel string
		vcs      []string
	}{{"pch-2", []string{"orders-x"}}, {"pch-1", []string{"orders-nowhere"}}, {"pch-1", []string{"orders-x", "orders-nowhere"}}} {
		err := g.Check(as("tenant"), "peer", authz.ActionAppend, tc.pchannel, vcs(tc.vcs...))
		require.True(t, errors.Is(err, authz.ErrPermissionDenied), "%v: %v", tc, err)
		var r *authz.Refusal
		require.True(t, errors.As(err, &r))
		require.Equal(t, authz.ReasonVChannelElsewhere, r.Reason)
	}
	err = g.Check(as("tenant"), "peer", authz.ActionAppend, "pch-1", vcs("orders-broken"))
	require.Error(t, err)
	require.False(t, errors.Is(err, authz.ErrPermissionDenied) || errors.Is(err, authz.ErrUnauthenticated), "not a refusal: %v", err)

	asked = 0
	require.NoError(t, g.Check(as("owner"), "peer", authz.ActionAppend, "pch-2", vcs("orders-x")))
	require.Zero(t, asked, "a pchannel grant covers every vchannel in it")
}
