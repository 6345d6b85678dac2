package authz_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/authz"
)

// A node's certificate carries the server-auth key usage; a client's,
// whatever its name, does not; no certificate is no node.
func TestNodeName(t *testing.T) {
	state := func(cn string, usages ...x509.ExtKeyUsage) *tls.ConnectionState {
		leaf := &x509.Certificate{ExtKeyUsage: usages}
		leaf.Subject.CommonName = cn
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	}
	name, err := authz.NodeName(state("n1", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
	require.NoError(t, err)
	require.Equal(t, "n1", name)
	for what, s := range map[string]*tls.ConnectionState{
		"a client's certificate named like a node": state("n1", x509.ExtKeyUsageClientAuth),
		"a node's without a name":                  state("", x509.ExtKeyUsageServerAuth),
		"no certificate":                           {},
		"no TLS":                                   nil,
	} {
		_, err := authz.NodeName(s)
		require.True(t, errors.Is(err, authz.ErrNotNode), "%s: %v", what, err)
	}
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
