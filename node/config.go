package node

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/security/authz"
)

// ErrInvalidConfig means a Config does not validate.
var ErrInvalidConfig = errors.New("node: invalid config")

// Config is a node's settings. The zero value of a field takes its
// documented default; ID is required.
type Config struct {
	// ID names the node in the cluster; a restarted node keeps its ID.
	ID string
	// Listen is the address the API listens on; default "127.0.0.1:0" (a
	// port the kernel picks).
	Listen string
	// Advertise is the address clients reach the API at; default the
	// address the listener got.
	Advertise string
	// Root is the cluster's root in etcd; default cluster.DefaultRoot.
	Root string
	// TLS, when set, makes the node serve its API (HTTP/2 and HTTP/1.1,
	// by ALPN) over TLS with it, e.g. a tlsconf.Config's Server(); with
	// ClientAuth set it requires client certificates (mutual TLS). Nil
	// serves plaintext (HTTP/1.1 and h2c). With TLS the liveness stream
	// needs a node's verified certificate: a ClientAuth that verifies
	// none (NoClientCert, RequestClientCert, RequireAnyClientCert)
	// refuses it to every caller.
	TLS *tls.Config
	// SessionTTL is the lease the node registers under: the coordinator
	// moves its channels this long after the node stops renewing it.
	// Default 10s.
	SessionTTL time.Duration
	// Backend names the backend, for Status.
	Backend string
	// WAL configures every channel's WAL.
	WAL adaptor.Options
	// DedupKeys is how many recent idempotency keys each channel remembers
	// in memory; default 100,000.
	DedupKeys int
	// StallAfter is how long a channel may have appends waiting with none
	// finishing, or stay opening, before /admin/channels and Status call
	// it stalled; default 10s.
	StallAfter time.Duration
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the node's metrics (and its WALs' and manager's);
	// nil makes a registry of its own, served on /metrics either way.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; required with a Registerer of your own
	// (usually the same *prometheus.Registry).
	Gatherer prometheus.Gatherer
	// Chains, when set, opens every channel as a chain of segments
	// (package chainwal): channels can then move between backends
	// (walctl migrate), and the node reports those whose last segment is
	// not on Chains.Default. Its WAL and Logger are the node's own
	// (WAL above, with the node's first-append hook); the rest is the caller's: the chain store
	// (the cluster's meta store), the backends' openers by entry name, the
	// default entry and Describe. Nil opens every channel on the backend
	// opener given to New, as before chains.
	Chains *chainwal.Config
	// Consumers, when set, keeps the consumers' committed checkpoints (the
	// Commit and Checkpoints RPCs; the cluster's meta store, shared by
	// every node), and the node runs a retainer (package retention) that
	// truncates each channel it owns at the earliest of them, drops
	// sealed segments every checkpoint is past, and measures what each
	// log retains (Status, /admin/channels, metrics). Nil: Commit is
	// Unimplemented and the node never truncates.
	Consumers *consumers.Store
	// Retention configures the retainer: its caps by age and bytes (off
	// by default), per channel, and how often it runs.
	Retention retention.Config
	// RetentionAfterStep, when set, is called after each step of a
	// retention round (crash tests).
	RetentionAfterStep func(step retention.Step, channel string)
	// Authz, when set, turns authorization on: every request the policy
	// does not grant is refused (package authz, "Enforcement"). Nil
	// serves everyone, as a node on loopback does by default.
	Authz *authz.Policy
	// Placement, when set, is where the channel pool allocated each
	// vchannel (a *pool.Pool): a grant on a vchannel name then holds only
	// on the pchannel the pool allocated that vchannel to (authz.go). Nil
	// (no pool): a vchannel grant holds on any pchannel.
	Placement Placement

	// Bounds: what one peer may hold (bounds.go). A peer is an IP
	// address; an authenticated peer (a verified client certificate, or
	// a request with a token of the policy) is not capped.

	// MaxConnsPerPeer caps the connections open at once from one peer
	// not authenticated by a client certificate; default 256 (a plaintext client makes one per request in flight).
	MaxConnsPerPeer int
	// MaxStreamsPerPeer caps the requests (RPCs, streams) in flight at
	// once from one unauthenticated peer; default 1024. Over it a request
	// is refused with ResourceExhausted (HTTP 429 outside the RPC API).
	MaxStreamsPerPeer int
	// FailedHandshakesPerPeer is how many failed TLS handshakes a second
	// one peer may make (after a burst of four times as many) before its
	// connections are closed at accept, until it slows down; default 16.
	// A node behind a TCP proxy sees every client as one peer: raise it.
	FailedHandshakesPerPeer int
	// LivenessIdle bounds a liveness stream on which the node writes
	// nothing: a heartbeat not written within it (the caller does not
	// read) ends the stream, a stream without heartbeats ends after it
	// (the coordinator connects again at once), and heartbeats are at
	// most half of it apart; default 30s.
	LivenessIdle time.Duration
	// RequestReadTimeout bounds the time a request may take to send its
	// body (an append's messages; a read's request): past it, the request
	// fails; default 1m.
	RequestReadTimeout time.Duration
	// IdleTimeout closes a connection with no request in flight after
	// that long; default 2m.
	IdleTimeout time.Duration
	// RefusalLogInterval is how often the log says a refusal of one
	// (peer, reason); the others are counted and the count said once
	// (refusallog.go); default 10s.
	RefusalLogInterval time.Duration
	// Clock times the failed-handshake budget, the refusal log's rate
	// limit and the WAL manager (walmanager.Options.Clock); nil is the
	// real clock.
	Clock clockwork.Clock
}

// Defaults of Config.
const (
	DefaultListen     = "127.0.0.1:0"
	DefaultSessionTTL = 10 * time.Second
	DefaultDedupKeys  = 100_000
	DefaultStallAfter = 10 * time.Second

	DefaultMaxConnsPerPeer    = 256
	DefaultMaxStreamsPerPeer  = 1024
	DefaultFailedHandshakes   = 16
	DefaultLivenessIdle       = 30 * time.Second
	DefaultIdleTimeout        = 2 * time.Minute
	DefaultRequestReadTimeout = time.Minute
	DefaultRefusalLogInterval = 10 * time.Second
)

// Validate reports settings no node can run with.
func (c Config) Validate() error {
	if err := cluster.ValidateNodeID(c.ID); err != nil {
		return errors.WithStack(fmt.Errorf("%w: %w", err, ErrInvalidConfig))
	}
	if c.SessionTTL < 0 || (c.SessionTTL > 0 && c.SessionTTL < time.Second) {
		return errors.Wrapf(ErrInvalidConfig, "SessionTTL %s (at least 1s)", c.SessionTTL)
	}
	if c.DedupKeys < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative DedupKeys %d", c.DedupKeys)
	}
	if c.StallAfter < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative StallAfter %s", c.StallAfter)
	}
	if c.MaxConnsPerPeer < 0 || c.MaxStreamsPerPeer < 0 || c.FailedHandshakesPerPeer < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative MaxConnsPerPeer %d, MaxStreamsPerPeer %d or FailedHandshakesPerPeer %d",
			c.MaxConnsPerPeer, c.MaxStreamsPerPeer, c.FailedHandshakesPerPeer)
	}
	if c.LivenessIdle < 0 || c.IdleTimeout < 0 || c.RequestReadTimeout < 0 || c.RefusalLogInterval < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative LivenessIdle %s, IdleTimeout %s, RequestReadTimeout %s or RefusalLogInterval %s",
			c.LivenessIdle, c.IdleTimeout, c.RequestReadTimeout, c.RefusalLogInterval)
	}
	if c.Registerer != nil && c.Gatherer == nil {
		return errors.Wrap(ErrInvalidConfig, "a Registerer of your own needs its Gatherer to serve /metrics")
	}
	if _, err := cluster.NewLayout(c.Root); err != nil {
		return errors.WithStack(fmt.Errorf("%w: %w", err, ErrInvalidConfig))
	}
	if err := validateRetention(c.Retention); err != nil {
		return err
	}
	if err := c.WAL.Validate(); err != nil {
		return errors.WithStack(fmt.Errorf("WAL: %w: %w", err, ErrInvalidConfig))
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.DedupKeys == 0 {
		c.DedupKeys = DefaultDedupKeys
	}
	if c.StallAfter == 0 {
		c.StallAfter = DefaultStallAfter
	}
	if c.MaxConnsPerPeer == 0 {
		c.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if c.MaxStreamsPerPeer == 0 {
		c.MaxStreamsPerPeer = DefaultMaxStreamsPerPeer
	}
	if c.FailedHandshakesPerPeer == 0 {
		c.FailedHandshakesPerPeer = DefaultFailedHandshakes
	}
	if c.LivenessIdle == 0 {
		c.LivenessIdle = DefaultLivenessIdle
	}
	if c.RequestReadTimeout == 0 {
		c.RequestReadTimeout = DefaultRequestReadTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.RefusalLogInterval == 0 {
		c.RefusalLogInterval = DefaultRefusalLogInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer, c.Gatherer = reg, reg
	}
	return c
}
