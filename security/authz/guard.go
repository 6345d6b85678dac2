package authz

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// Guard enforces a policy: it authenticates requests and decides them,
// and logs and counts every refusal (package doc, "Audit"). Its policy
// can be replaced while it serves (SetPolicy): each request is decided
// whole by the policy current when it arrived.
type Guard struct {
	policy  atomic.Pointer[Policy]
	log     *slog.Logger
	reg     prometheus.Registerer
	refused *prometheus.CounterVec
	placed  func(ctx context.Context, vchannel string) (string, error)
}

// GuardOptions are a Guard's dependencies.
type GuardOptions struct {
	// Logger receives one line per refusal; nil discards them.
	Logger *slog.Logger
	// Registerer receives streamwal_authz_refused_total; nil registers
	// nothing (the counter still counts).
	Registerer prometheus.Registerer
	// Placed, when set, returns the pchannel the channel pool allocated
	// a vchannel to ("" when it is allocated to none): a grant on a
	// vchannel then holds only there (package doc, "Vchannels"). An
	// error (the pool cannot be read) fails the request, refusing
	// nothing. Nil: a vchannel grant holds on any pchannel.
	Placed func(ctx context.Context, vchannel string) (string, error)
}

// NewGuard returns a guard of policy.
func NewGuard(policy *Policy, o GuardOptions) (*Guard, error) {
	if policy == nil {
		return nil, errors.New("authz: a guard needs a policy")
	}
	g := &Guard{log: o.Logger, reg: o.Registerer, placed: o.Placed,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "authz",
			Name: "refused_total", Help: "Requests refused by authorization, by action and reason (no_credentials, bad_credentials, no_grant, vchannel_elsewhere)."},
			[]string{"action", "reason"})}
	g.policy.Store(policy)
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.reg != nil {
		if err := g.reg.Register(g.refused); err != nil {
			return nil, errors.Wrap(err, "authz: metrics")
		}
	}
	// Every series exists from the start, at 0, so that a rate over
	// them is defined before the first refusal.
	for _, a := range actions {
		for _, r := range []string{ReasonNoCredentials, ReasonBadCredentials, ReasonNoGrant, ReasonVChannelElsewhere} {
			g.refused.WithLabelValues(string(a), r)
		}
	}
	return g, nil
}

// Collectors are the guard's metrics, for a caller that registers them
// itself (GuardOptions.Registerer nil).
func (g *Guard) Collectors() []prometheus.Collector { return []prometheus.Collector{g.refused} }

// Close unregisters the guard's metrics.
func (g *Guard) Close() {
	if g.reg != nil {
		g.reg.Unregister(g.refused)
	}
}

// Policy is the guard's current policy.
func (g *Guard) Policy() *Policy { return g.policy.Load() }

// SetPolicy replaces the guard's policy (a reload): requests that arrive
// from now on are authenticated and decided by it; those already
// authenticated keep the grants they were given. A revoked token is
// refused from its next request. A nil policy is refused: authorization
// cannot be turned off while serving.
func (g *Guard) SetPolicy(p *Policy) error {
	if p == nil {
		return errors.New("authz: a guard needs a policy")
	}
	g.policy.Store(p)
	return nil
}

// Authenticate wraps next so that every request's context carries its
// authentication (for Check). It refuses nothing itself.
func (g *Guard) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(g.policy.Load().WithAuthentication(r.Context(), r)))
	})
}

// Refusal is a refused request: who, what, on which channel and why. It
// matches ErrUnauthenticated or ErrPermissionDenied. It holds no secret.
type Refusal struct {
	Principal string
	Action    Action
	// Channel is the pchannel the request names; "" for a node-wide
	// request (every channel).
	Channel string
	// Reason is one of the Reason constants.
	Reason string
	msg    string
	cause  error
}

func (r *Refusal) Error() string { return r.msg }

// Is matches the refusal's sentinel.
func (r *Refusal) Is(target error) bool {
	if r.Reason == ReasonNoGrant || r.Reason == ReasonVChannelElsewhere {
		return target == ErrPermissionDenied
	}
	return target == ErrUnauthenticated
}

// Check decides a request from ctx (wrapped by Authenticate) for action on
// pchannel ("" for every channel) under the vchannel rule (Principal.AllowsIn;
// vchannels may be nil): nil if allowed, otherwise a *Refusal, logged and
// counted once. peer is the client's address, for the log. With
// GuardOptions.Placed, a request allowed by vchannel grants alone is
// refused unless every vchannel it names is allocated to pchannel; an
// error finding out is returned as is (no *Refusal).
func (g *Guard) Check(ctx context.Context, peer string, action Action, pchannel string, vchannels iter.Seq[string]) error {
	pr, err := fromContext(ctx)
	if err == nil {
		if pr.AllowsIn(action, pchannel, vchannels) {
			if g.placed == nil || pr.Allows(action, pchannel) {
				return nil
			}
			return g.checkPlaced(ctx, peer, pr, action, pchannel, vchannels)
		}
		what := fmt.Sprintf("channel %q", pchannel)
		if pchannel == "" {
			what = `every channel ("*")`
		}
		msg := fmt.Sprintf("permission denied: principal %q may not %s %s", pr.Name, action, what)
		if !pr.Known() {
			msg = fmt.Sprintf("permission denied: principal %q is not in the policy", pr.Name)
		}
		return g.refuse(ctx, peer, &Refusal{Principal: pr.Name, Action: action, Channel: pchannel, Reason: ReasonNoGrant, msg: msg})
	}
	reason := ReasonBadCredentials
	var ae *authnError
	if errors.As(err, &ae) {
		reason = ae.reason
	}
	return g.refuse(ctx, peer, &Refusal{Action: action, Channel: pchannel, Reason: reason, msg: err.Error(), cause: err})
}

// CheckAny is Check for a request that either of two actions allows (as
// the node's Status: read or admin); a refusal names the first.
func (g *Guard) CheckAny(ctx context.Context, peer string, a, b Action, pchannel string) error {
	if pr, err := fromContext(ctx); err == nil && pr.Allows(b, pchannel) {
		return nil
	}
	return g.Check(ctx, peer, a, pchannel, nil)
}

// checkPlaced refuses a request confined to vchannels (allowed by their
// grants) unless the pool allocated each of them to pchannel.
func (g *Guard) checkPlaced(ctx context.Context, peer string, pr Principal, action Action, pchannel string, vchannels iter.Seq[string]) error {
	last := ""
	for vc := range vchannels {
		if vc == last {
			continue // a batch of one vchannel's messages asks once
		}
		last = vc
		at, err := g.placed(ctx, vc)
		if err != nil {
			return errors.Wrapf(err, "authz: which pchannel holds vchannel %q", vc)
		}
		if at == pchannel {
			continue
		}
		where := fmt.Sprintf("the pool allocated it to %q", at)
		if at == "" {
			where = "the pool has not allocated it"
		}
		msg := fmt.Sprintf("permission denied: principal %q may %s vchannel %q only on its pchannel, not on %q (%s)", pr.Name, action, vc, pchannel, where)
		return g.refuse(ctx, peer, &Refusal{Principal: pr.Name, Action: action, Channel: pchannel, Reason: ReasonVChannelElsewhere, msg: msg})
	}
	return nil
}

func (g *Guard) refuse(ctx context.Context, peer string, r *Refusal) error {
	g.refused.WithLabelValues(string(r.Action), r.Reason).Inc()
	g.log.LogAttrs(ctx, slog.LevelWarn, "request refused",
		slog.String("principal", r.Principal), slog.String("action", string(r.Action)),
		slog.String("channel", r.Channel), slog.String("reason", r.Reason), slog.String("peer", peer))
	return r
}

// Unwrap returns the authentication's failure, if that was the reason.
func (r *Refusal) Unwrap() error { return r.cause }
