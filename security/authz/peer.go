package authz

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/security/certs"
)

// ErrNotNode: a connection's verified certificate is not a node's (or
// there is none).
var ErrNotNode = errors.New("not a node")

// NodeName returns the node a connection's verified client certificate
// names: its identity as certs.Identify reads it (a node's certificate
// carries streamwal://node/<name> and server use; no client certificate
// can pass for one, whatever its common name). A connection without a
// verified certificate, or with one whose identity is a client's or
// unclear, is an error matching ErrNotNode.
func NodeName(state *tls.ConnectionState) (string, error) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return "", errors.Wrap(ErrNotNode, "no verified client certificate")
	}
	id, err := certs.Identify(state.VerifiedChains[0][0])
	if err != nil {
		return "", errors.WithStack(fmt.Errorf("%w: %w", ErrNotNode, err))
	}
	if id.Kind != certs.Node {
		return "", errors.Wrapf(ErrNotNode, "the certificate of %q is a client's", id.Name)
	}
	return id.Name, nil
}

// Authenticated reports whether ctx, wrapped by Guard.Authenticate,
// carries a request that authenticated someone (a token of the policy or
// a verified certificate, even of a principal the policy does not list).
func Authenticated(ctx context.Context) bool {
	_, err := fromContext(ctx)
	return err == nil
}
