package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"slices"

	"github.com/cockroachdb/errors"
)

// ErrNotNode: a connection's verified certificate is not a node's (or
// there is none).
var ErrNotNode = errors.New("not a node")

// NodeName returns the node a connection's verified client certificate
// names: its subject CN, for a certificate issued to a node. Node
// certificates (package certs, Kind Node) carry the server-auth extended
// key usage beside the client-auth one, since a node both serves the API
// and dials the others' liveness streams; client certificates carry
// client-auth only. A connection without a verified certificate, or with
// a client's, is an error matching ErrNotNode.
func NodeName(state *tls.ConnectionState) (string, error) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return "", errors.Wrap(ErrNotNode, "no verified client certificate")
	}
	leaf := state.VerifiedChains[0][0]
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return "", errors.Wrapf(ErrNotNode, "the certificate of %q is a client's (no server-auth key usage)", leaf.Subject.CommonName)
	}
	if leaf.Subject.CommonName == "" {
		return "", errors.Wrap(ErrNotNode, "the node certificate has no subject common name")
	}
	return leaf.Subject.CommonName, nil
}

// Authenticated reports whether ctx, wrapped by Guard.Authenticate,
// carries a request that authenticated someone (a token of the policy or
// a verified certificate, even of a principal the policy does not list).
func Authenticated(ctx context.Context) bool {
	_, err := fromContext(ctx)
	return err == nil
}
