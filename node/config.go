package node

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"
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
	// serves plaintext (HTTP/1.1 and h2c).
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
}

// Defaults of Config.
const (
	DefaultListen     = "127.0.0.1:0"
	DefaultSessionTTL = 10 * time.Second
	DefaultDedupKeys  = 100_000
	DefaultStallAfter = 10 * time.Second
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer, c.Gatherer = reg, reg
	}
	return c
}
