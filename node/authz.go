package node

import (
	"context"
	"iter"
	"net/http"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/security/authz"
)

// guarded puts the authorization of package authz in front of the API
// (Config.Authz): every RPC is decided by the interceptor below from its
// decoded request, before the service sees it; /metrics and
// /admin/channels by checkHTTP; /healthz and the liveness stream stay
// open (authz's doc, "Enforcement"). Without a policy it returns h.
func (n *Node) guarded(h http.Handler) http.Handler {
	if n.guard == nil {
		return h
	}
	return n.guard.Authenticate(h)
}

// Placement is where the channel pool allocated vchannels: a *pool.Pool.
type Placement interface {
	Lookup(ctx context.Context, vchannel string) (pool.Allocation, error)
}

// placedBy answers authz's question (GuardOptions.Placed) from the pool:
// the pchannel a vchannel is allocated to, "" when it is allocated to
// none.
func placedBy(p Placement) func(ctx context.Context, vchannel string) (string, error) {
	return func(ctx context.Context, vchannel string) (string, error) {
		a, err := p.Lookup(ctx, vchannel)
		switch {
		case errors.Is(err, pool.ErrNotAllocated):
			return "", nil
		case err != nil:
			return "", err
		}
		return a.PChannel, nil
	}
}

// SetPolicy replaces the policy of a node started with Config.Authz, for
// requests that arrive from now on (walnode reloads its -authz file on
// SIGHUP). A node started without a policy cannot be given one, nor can a
// node's policy be removed, while it serves: that takes a restart.
func (n *Node) SetPolicy(p *authz.Policy) error {
	if n.guard == nil {
		return errors.Wrap(ErrInvalidConfig, "node: authorization is off (no Config.Authz): turning it on takes a restart")
	}
	if err := n.guard.SetPolicy(p); err != nil {
		return errmark.Mark(err, ErrInvalidConfig)
	}
	return nil
}

// checkHTTP guards a node-wide HTTP endpoint: read or admin on every
// channel.
func (n *Node) checkHTTP(h http.HandlerFunc) http.HandlerFunc {
	if n.guard == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		err := n.guard.CheckAny(r.Context(), r.RemoteAddr, authz.ActionRead, authz.ActionAdmin, "")
		switch {
		case err == nil:
			h(w, r)
		case errors.Is(err, authz.ErrUnauthenticated):
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, err.Error(), http.StatusUnauthorized)
		default:
			http.Error(w, err.Error(), http.StatusForbidden)
		}
	}
}

// guardInterceptor decides every RPC of the WALService. A request type it
// has no rule for is refused: nothing reaches the service undecided.
type guardInterceptor struct {
	g *authz.Guard
}

var _ connect.Interceptor = guardInterceptor{}

func (gi guardInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := gi.decide(ctx, req.Peer().Addr, req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (gi guardInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (gi guardInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &guardedConn{StreamingHandlerConn: conn, gi: gi, ctx: ctx})
	}
}

// guardedConn decides each request message of a stream as it is received.
type guardedConn struct {
	connect.StreamingHandlerConn
	gi  guardInterceptor
	ctx context.Context
}

func (c *guardedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.gi.decide(c.ctx, c.Peer().Addr, msg)
}

// decide maps a request to its action and channels (authz's doc) and asks
// the guard; a refusal becomes Unauthenticated or PermissionDenied, and an
// append's refusal says nothing was stored.
func (gi guardInterceptor) decide(ctx context.Context, peer string, msg any) error {
	var err error
	appending := false
	switch m := msg.(type) {
	case *streamwalv1.AppendRequest:
		appending = true
		err = gi.g.Check(ctx, peer, authz.ActionAppend, m.GetChannel(), func(yield func(string) bool) {
			yield(m.GetMessage().GetVchannel())
		})
	case *streamwalv1.AppendBatchRequest:
		appending = true
		var vcs iter.Seq[string]
		if len(m.GetMessages()) > 0 {
			vcs = func(yield func(string) bool) {
				for _, x := range m.GetMessages() {
					if !yield(x.GetVchannel()) {
						return
					}
				}
			}
		}
		err = gi.g.Check(ctx, peer, authz.ActionAppend, m.GetChannel(), vcs)
	case *streamwalv1.ReadRequest:
		var vcs iter.Seq[string]
		if len(m.GetVchannels()) > 0 {
			vcs = func(yield func(string) bool) {
				for _, vc := range m.GetVchannels() {
					if !yield(vc) {
						return
					}
				}
			}
		}
		err = gi.g.Check(ctx, peer, authz.ActionRead, m.GetChannel(), vcs)
	case *streamwalv1.StatusRequest:
		err = gi.g.CheckAny(ctx, peer, authz.ActionRead, authz.ActionAdmin, "")
	case *streamwalv1.CommitRequest:
		var vcs iter.Seq[string]
		if vc := m.GetVchannel(); vc != "" {
			vcs = func(yield func(string) bool) { yield(vc) }
		}
		err = gi.g.Check(ctx, peer, authz.ActionCommit, m.GetChannel(), vcs)
	case *streamwalv1.CheckpointsRequest:
		err = gi.g.CheckAny(ctx, peer, authz.ActionRead, authz.ActionAdmin, m.GetChannel())
	default:
		return connect.NewError(connect.CodePermissionDenied, errors.Newf("no authorization rule for %T: refused", msg))
	}
	if err == nil {
		return nil
	}
	code := connect.CodePermissionDenied
	switch {
	case errors.Is(err, authz.ErrUnauthenticated):
		code = connect.CodeUnauthenticated
	case !errors.Is(err, authz.ErrPermissionDenied):
		// Not a refusal: the pool could not say where a vchannel is
		// (GuardOptions.Placed).
		code = connect.CodeUnavailable
	}
	e := connect.NewError(code, err)
	if appending {
		e = notStored(e)
	}
	return e
}
