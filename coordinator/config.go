package coordinator

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
)

// Defaults of a zero Config.
const (
	DefaultSessionTTL        = 5 * time.Second
	DefaultReconcileInterval = time.Second
	DefaultOpenTimeout       = 30 * time.Second
	DefaultProbeTimeout      = time.Second
)

// ChannelSource lists the channels (pchannels) the coordinator manages,
// e.g. a pool's PChannels. It is called at the start of every reconcile
// pass; an error skips the pass (nothing is decided from a partial list).
type ChannelSource func(ctx context.Context) ([]string, error)

// StaticChannels is a ChannelSource that always lists names.
func StaticChannels(names ...string) ChannelSource {
	names = append([]string(nil), names...)
	return func(context.Context) ([]string, error) { return names, nil }
}

// Config configures a Coordinator. Zero fields take the documented
// defaults; ID and Channels are required.
type Config struct {
	// ID names this candidate: the value of its election key and of its
	// logs. Required; the rules of node IDs (cluster.ValidateNodeID).
	ID string
	// Root is the cluster's cluster.Layout root; "" is cluster.DefaultRoot.
	Root string
	// SessionTTL is the TTL of the lease behind this candidate's election
	// key: how long a crashed leader keeps the others waiting. Zero is
	// DefaultSessionTTL; etcd counts whole seconds, so it is rounded up,
	// and below one second is invalid.
	SessionTTL time.Duration
	// Channels lists the channels to manage. Required.
	Channels ChannelSource
	// ReconcileInterval is the period of the safety sweep the leader runs
	// besides reacting to changes of the cluster. Zero is
	// DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// OpenTimeout is how long an assignment may stay Assigning (including
	// while its owner reports an open error) before the coordinator moves
	// the channel to another live node. Zero is DefaultOpenTimeout.
	OpenTimeout time.Duration
	// Node is the ID of the cluster node that runs in this candidate's
	// process (walnode sets its own ID), or "" for none. It is written
	// beside the candidate's election key (cluster.CandidateInfo), so that
	// the candidate waiting behind this one watches that node's liveness:
	// if this candidate leads and its process dies, the next one takes
	// over as soon as the death is confirmed, not after SessionTTL.
	Node string
	// LeaseOnly turns failure detection off: a node's channels move only
	// when its lease expires (or it is drained), and a candidate waits for
	// the lease of the one before it. By default the leader holds a
	// liveness stream to every registered node and moves a node's channels
	// as soon as its process is confirmed gone (see the package doc,
	// "Failure detection").
	LeaseOnly bool
	// ProbeTimeout bounds each connection attempt of failure detection. A
	// timeout proves nothing (a stalled process, a partition): it only
	// delays the next attempt. Zero is DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// TLS, when set, is how failure detection reaches the nodes' APIs
	// (their liveness streams): the client side of the nodes' TLS, with a
	// client certificate when they require one (walnode gives its own
	// node certificate). Nil: plaintext.
	TLS *tls.Config
	// Chains holds the channels' chains (package chain), in the cluster's
	// meta store (walnode: the root without its slash plus "-meta/"): the
	// leader records a migration's intent there (walctl migrate). Nil:
	// the cluster runs without chains, and every migrate request is
	// refused, saying so.
	Chains *chain.Store
	// Describe returns what a chain records of the backend entry name of
	// the nodes' configuration (walconfig.Backends.Describe): its Name,
	// Kind and Params, Channel empty (the leader names the new segment's
	// channel, chainwal.SegmentChannel). An error refuses a migration to
	// name. Required with Chains.
	Describe func(name string) (chain.Backend, error)
	// Backends names every entry Describe knows (walconfig.Backends.Names).
	// They are published beside the candidate's election key
	// (cluster.CandidateInfo.Migrations), so that walctl migrate refuses a
	// target the leader would refuse before writing a request, and its
	// -dry-run says so. Nil publishes nothing: the leader decides alone.
	// Only with Chains.
	Backends []string
	// Logger receives the coordinator's logs, with channel, node, term and
	// reason as attributes. Nil discards them.
	Logger *slog.Logger
	// Registerer receives the coordinator's metrics while Run runs; nil
	// registers none.
	Registerer prometheus.Registerer
	// Clock times the reconcile sweep and its retries, stamps assignments
	// and decisions, and times nodes' silences in failure detection; nil is
	// the real clock. etcd's leases and sockets' deadlines keep the
	// machine's time whatever it is.
	Clock clockwork.Clock
}

// Validate reports settings no coordinator can run with.
func (c Config) Validate() error {
	if c.ID == "" {
		return errors.New("coordinator: empty ID")
	}
	if err := cluster.ValidateNodeID(c.ID); err != nil {
		return errors.Wrap(err, "coordinator: ID")
	}
	if _, err := cluster.NewLayout(c.Root); err != nil {
		return errors.Wrap(err, "coordinator")
	}
	if c.SessionTTL < 0 || (c.SessionTTL > 0 && c.SessionTTL < time.Second) {
		return errors.Newf("coordinator: session TTL %s is below one second", c.SessionTTL)
	}
	if c.SessionTTL > time.Duration(math.MaxInt32)*time.Second {
		return errors.Newf("coordinator: session TTL %s is too long", c.SessionTTL)
	}
	if c.Channels == nil {
		return errors.New("coordinator: no channel source")
	}
	if c.ReconcileInterval < 0 {
		return errors.Newf("coordinator: negative reconcile interval %s", c.ReconcileInterval)
	}
	if c.OpenTimeout < 0 {
		return errors.Newf("coordinator: negative open timeout %s", c.OpenTimeout)
	}
	if c.ProbeTimeout < 0 {
		return errors.Newf("coordinator: negative probe timeout %s", c.ProbeTimeout)
	}
	if c.Node != "" {
		if err := cluster.ValidateNodeID(c.Node); err != nil {
			return errors.Wrap(err, "coordinator: Node")
		}
	}
	if c.Chains != nil && c.Describe == nil {
		return errors.New("coordinator: Chains without Describe: the leader could not name a migration's target")
	}
	if c.Chains == nil && c.Backends != nil {
		return errors.New("coordinator: Backends without Chains: no migration can target them")
	}
	for _, name := range c.Backends {
		if _, err := c.Describe(name); err != nil {
			return errors.Wrapf(err, "coordinator: Backends names %q, which Describe does not know", name)
		}
	}
	return nil
}

// migrationTargets is what the candidate publishes of the migrations it
// carries out (cluster.CandidateInfo.Migrations).
func (c Config) migrationTargets() *cluster.MigrationTargets {
	switch {
	case c.Chains == nil:
		return &cluster.MigrationTargets{}
	case c.Backends == nil:
		return nil
	}
	return &cluster.MigrationTargets{Chains: true, Backends: sortedUnique(c.Backends)}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Root == "" {
		c.Root = cluster.DefaultRoot
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// ttlSeconds is the session TTL as etcd takes it.
func (c Config) ttlSeconds() int {
	return int((c.SessionTTL + time.Second - 1) / time.Second)
}
