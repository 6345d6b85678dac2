package node

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/security/authz"
)

// bounds.go: what one peer that has not authenticated may hold. A peer is
// an IP address. Connections are counted from accept: one over
// Config.MaxConnsPerPeer is closed at once, before its TLS handshake; a
// connection whose handshake verified a client certificate stops
// counting (its peer is known: the CA vouched for it). Requests in flight
// (RPCs, streams, on every connection of the peer) are counted unless
// they authenticated; one over Config.MaxStreamsPerPeer is refused with
// ResourceExhausted. Every refusal is counted in
// streamwal_node_refused_total{reason} and logged through the refusal
// log (refusallog.go).

// Reasons of the node's own refusals, as logged and counted.
const (
	reasonTooManyConns    = "too_many_connections"
	reasonTooManyStreams  = "too_many_streams"
	reasonNoNodeIdentity  = "no_node_identity"
	reasonLivenessStalled = "liveness_stalled"
)

// peerLimits counts what each peer holds. Safe for concurrent use.
type peerLimits struct {
	maxConns, maxStreams int

	mu      sync.Mutex
	conns   map[string]int
	streams map[string]int
}

func newPeerLimits(maxConns, maxStreams int) *peerLimits {
	return &peerLimits{maxConns: maxConns, maxStreams: maxStreams, conns: map[string]int{}, streams: map[string]int{}}
}

// take counts one more of a peer's things in m (under max): false when it
// already holds max.
func (p *peerLimits) take(m map[string]int, peer string, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m[peer] >= max {
		return false
	}
	m[peer]++
	return true
}

// give counts one less of a peer's things in m.
func (p *peerLimits) give(m map[string]int, peer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m[peer]--; m[peer] <= 0 {
		delete(m, peer)
	}
}

// refuser logs and counts the node's own refusals.
type refuser struct {
	log     *slog.Logger // the refusal log
	refused *prometheus.CounterVec
}

func (r refuser) refuse(peer, reason, msg string, attrs ...any) {
	r.refused.WithLabelValues(reason).Inc()
	r.log.Warn(msg, append([]any{"peer", peer, "reason", reason}, attrs...)...)
}

// limitListener closes at once each connection over its peer's cap.
type limitListener struct {
	net.Listener
	limits *peerLimits
	refuse refuser
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerHost(c.RemoteAddr().String())
		if !l.limits.take(l.limits.conns, peer, l.limits.maxConns) {
			_ = c.Close()
			l.refuse.refuse(c.RemoteAddr().String(), reasonTooManyConns, "connection refused: too many from this peer", "max", l.limits.maxConns)
			continue
		}
		return &peerConn{Conn: c, peer: peer, limits: l.limits}, nil
	}
}

// peerConn is a counted connection: it stops counting when closed, or
// when its peer authenticated (release).
type peerConn struct {
	net.Conn
	peer     string
	limits   *peerLimits
	released atomic.Bool
}

func (c *peerConn) release() {
	if c.released.CompareAndSwap(false, true) {
		c.limits.give(c.limits.conns, c.peer)
	}
}

func (c *peerConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// connState is the server's ConnState hook: a TLS connection that
// verified a client certificate stops counting against its peer's cap
// once it serves its first request (its handshake is over then).
func connState(c net.Conn, state http.ConnState) {
	if state != http.StateActive {
		return
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return
	}
	pc, ok := tc.NetConn().(*peerConn)
	if !ok || pc.released.Load() {
		return
	}
	if cs := tc.ConnectionState(); len(cs.VerifiedChains) > 0 {
		pc.release()
	}
}

// bounded caps the requests in flight of each unauthenticated peer
// (inside guarded: the authentication is known). Without a policy, only
// a verified client certificate authenticates.
func (n *Node) bounded(h http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.authenticated(r) {
			h.ServeHTTP(w, r)
			return
		}
		peer := peerHost(r.RemoteAddr)
		if !n.limits.take(n.limits.streams, peer, n.limits.maxStreams) {
			n.refuser.refuse(r.RemoteAddr, reasonTooManyStreams, "request refused: too many in flight from this peer", "max", n.limits.maxStreams, "path", r.URL.Path)
			err := connect.NewError(connect.CodeResourceExhausted,
				errors.Newf("too many requests in flight from %s (at most %d without authentication)", peer, n.limits.maxStreams))
			if errs.IsSupported(r) {
				_ = errs.Write(w, r, notStored(err))
				return
			}
			http.Error(w, err.Message(), http.StatusTooManyRequests)
			return
		}
		defer n.limits.give(n.limits.streams, peer)
		h.ServeHTTP(w, r)
	})
}

// authenticated reports whether r comes from a peer that authenticated:
// a verified client certificate, or (with a policy) a token of it.
func (n *Node) authenticated(r *http.Request) bool {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	return n.guard != nil && authz.Authenticated(r.Context())
}

// verifiesClients reports whether a TLS configuration verifies client
// certificates (required or when given): then the liveness stream asks
// for a node's.
func verifiesClients(c *tls.Config) bool {
	return c != nil && (c.ClientAuth == tls.VerifyClientCertIfGiven || c.ClientAuth == tls.RequireAndVerifyClientCert)
}
