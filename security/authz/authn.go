package authz

import (
	"context"
	"net/http"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/security/certs"
)

// Sentinels of a refusal (errors.Is): Unauthenticated and
// PermissionDenied in the API.
var (
	// ErrUnauthenticated: no credentials, or credentials that
	// authenticate no one.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the principal does not hold the action.
	ErrPermissionDenied = errors.New("permission denied")
)

// Reasons of a refusal, as logged and counted.
const (
	ReasonNoCredentials  = "no_credentials"
	ReasonBadCredentials = "bad_credentials"
	ReasonNoGrant        = "no_grant"
	// ReasonVChannelElsewhere: a vchannel grant used on a pchannel the
	// pool did not allocate the vchannel to (GuardOptions.Placed).
	ReasonVChannelElsewhere = "vchannel_elsewhere"
)

// authnError is a failed authentication: a reason and what the client is
// told. It never holds the credentials.
type authnError struct {
	reason, msg string
}

func (e *authnError) Error() string        { return "unauthenticated: " + e.msg }
func (e *authnError) Is(target error) bool { return target == ErrUnauthenticated }

// Authenticate finds who r comes from (package doc, "Principals"): its
// bearer token if it has an Authorization header, else the CN of its
// verified client certificate. A request with neither, or with a header
// that is no bearer token of the policy, is an error matching
// ErrUnauthenticated. A verified certificate for a name the policy does not
// list is a principal that holds nothing.
func (p *Policy) Authenticate(r *http.Request) (Principal, error) {
	if values := r.Header.Values("Authorization"); len(values) > 0 {
		if len(values) > 1 {
			return Principal{}, &authnError{ReasonBadCredentials, "more than one Authorization header"}
		}
		scheme, token, ok := strings.Cut(values[0], " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return Principal{}, &authnError{ReasonBadCredentials, "the Authorization header is not \"Bearer <token>\""}
		}
		pr, ok := p.principalByToken(strings.TrimSpace(token))
		if !ok {
			return Principal{}, &authnError{ReasonBadCredentials, "the bearer token matches no principal"}
		}
		return pr, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		id, err := certs.Identify(r.TLS.VerifiedChains[0][0])
		if err != nil {
			return Principal{}, &authnError{ReasonBadCredentials, "the client certificate: " + err.Error()}
		}
		return p.Principal(PrincipalName(id)), nil
	}
	return Principal{}, &authnError{ReasonNoCredentials, "no credentials: present a client certificate or an \"Authorization: Bearer <token>\" header"}
}

// PrincipalName is the principal a certificate's identity authenticates:
// a client's name, or for a node "streamwal://node/<name>", which no
// client certificate can name (certs.Identify), so that a policy grants a
// node only under that name.
func PrincipalName(id certs.Identity) string {
	if id.Kind == certs.Node {
		return certs.IdentityScheme + "://node/" + id.Name
	}
	return id.Name
}

// authn is the outcome of a request's authentication, carried in its
// context.
type authn struct {
	principal Principal
	err       error
}

type authnKey struct{}

// WithAuthentication returns ctx carrying r's authentication by p (see
// Authenticate), for the Guard to find deeper in the request's handling.
func (p *Policy) WithAuthentication(ctx context.Context, r *http.Request) context.Context {
	pr, err := p.Authenticate(r)
	return context.WithValue(ctx, authnKey{}, &authn{principal: pr, err: err})
}

// fromContext returns the authentication ctx carries; none is no
// credentials.
func fromContext(ctx context.Context) (Principal, error) {
	if a, ok := ctx.Value(authnKey{}).(*authn); ok {
		return a.principal, a.err
	}
	return Principal{}, &authnError{ReasonNoCredentials, "no credentials"}
}
