package node

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/security/authz"
)

// bounds.go: what one peer that has not authenticated may hold. A peer is
// an IP address, an IPv6 one's /64 (peerHost). With TLS, a peer whose handshakes fail faster than
// Config.FailedHandshakesPerPeer a second (beyond a burst of four
// seconds' worth) has its connections closed at accept until it slows
// down (handshakeBudget). Connections are counted from accept: one over
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
	reasonBadHandshakes   = "failed_handshakes"
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

// limitListener closes at once each connection over its peer's cap, or
// from a peer out of failed handshakes (budget; nil without TLS).
type limitListener struct {
	net.Listener
	limits *peerLimits
	budget *handshakeBudget
	refuse refuser
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerHost(c.RemoteAddr().String())
		if l.budget != nil && l.budget.exhausted(peer) {
			_ = c.Close()
			l.refuse.refuse(c.RemoteAddr().String(), reasonBadHandshakes, "connection refused: too many failed TLS handshakes from this peer", "per_second", l.budget.rate)
			continue
		}
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
// (inside guarded: the authentication is known; without a policy, only a
// verified client certificate authenticates), and bounds the time any
// request may take to send its body (Config.RequestReadTimeout): a client
// that sends headers and then trickles its body, or stops, does not hold
// the request open.
func (n *Node) bounded(h http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	h = n.bodyBounded(h)
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

// bodyBounded puts a read deadline on each request with a body, lifted
// once the body has been read: a server stream (Read) then stays open as
// long as its client wants, and on HTTP/1.1 the connection's read that
// watches for the client going away is not cut short. A request without a
// body has nothing to wait for (and on HTTP/1.1 that read has begun
// already: a deadline would cut the request).
func (n *Node) bodyBounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(n.cfg.RequestReadTimeout)) == nil {
			r.Body = &boundedBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		h.ServeHTTP(w, r)
	})
}

// boundedBody lifts its request's read deadline when the body ends.
type boundedBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
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
// certificates (required or when given): without that, no caller can
// prove it is a node, and the liveness stream is refused to all.
func verifiesClients(c *tls.Config) bool {
	return c != nil && (c.ClientAuth == tls.VerifyClientCertIfGiven || c.ClientAuth == tls.RequireAndVerifyClientCert)
}

// handshakeBudget is, per peer, a bucket of failed TLS handshakes: each
// failure takes a token, tokens come back at rate per second up to burst.
// A peer with no token left has its connections closed at accept, before
// their handshake: a flood of bad handshakes then costs the node an
// accept and a close each, not a signature and a certificate
// verification. A client with a good certificate behind the same address
// is turned away with it until tokens come back.
type handshakeBudget struct {
	rate, burst float64
	clock       clockwork.Clock

	mu    sync.Mutex
	peers map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBudgetPeers bounds the table: beyond it, full buckets are dropped
// (they are the same as none), and if that is not enough, all of them
// (the budget fails open rather than grow without bound).
const maxBudgetPeers = 16384

func newHandshakeBudget(perSecond int, clock clockwork.Clock) *handshakeBudget {
	return &handshakeBudget{rate: float64(perSecond), burst: 4 * float64(perSecond), clock: clock, peers: map[string]*bucket{}}
}

// refill brings b to now. Assumes h.mu is held.
func (h *handshakeBudget) refill(b *bucket, now time.Time) {
	b.tokens = min(h.burst, b.tokens+now.Sub(b.at).Seconds()*h.rate)
	b.at = now
}

// failed takes a token from peer's bucket.
func (h *handshakeBudget) failed(peer string) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.peers[peer]
	if b == nil {
		if len(h.peers) >= maxBudgetPeers {
			for p, o := range h.peers {
				if h.refill(o, now); o.tokens >= h.burst {
					delete(h.peers, p)
				}
			}
			if len(h.peers) >= maxBudgetPeers {
				clear(h.peers)
			}
		}
		b = &bucket{tokens: h.burst, at: now}
		h.peers[peer] = b
	}
	h.refill(b, now)
	b.tokens = max(b.tokens-1, -1)
}

// exhausted reports whether peer has no token left.
func (h *handshakeBudget) exhausted(peer string) bool {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.peers[peer]
	if b == nil {
		return false
	}
	h.refill(b, now)
	if b.tokens >= h.burst {
		delete(h.peers, peer)
	}
	return b.tokens < 1
}
