package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/utility/backoff"
)

// ErrRunning is Run's answer while another Run of the same Coordinator is
// going.
var ErrRunning = errors.New("coordinator: already running")

var (
	// errDeposed: a write failed the leader condition.
	errDeposed = errors.New("coordinator: deposed: the election key is no longer ours")
	// errConflict: a write failed because a key changed since the read.
	errConflict = errors.New("coordinator: a key changed since it was read")
)

// Coordinator is one candidate for leading a cluster's assignments. Run
// campaigns and, while leading, reconciles; any number of candidates may
// run against the same root, one leads at a time.
type Coordinator struct {
	cli     *clientv3.Client
	cfg     Config
	layout  cluster.Layout
	rules   rules
	log     *slog.Logger
	metrics *metrics
	clock   clockwork.Clock

	running atomic.Bool
	leader  atomic.Bool

	mu sync.Mutex
	// leading is closed while this coordinator leads, and replaced by an
	// open channel when it steps down.
	leading chan struct{}

	// overdue holds the term at which each channel was last reported
	// overdue with nowhere to go, so that it is logged once. Owned by the
	// goroutine in Run.
	overdue map[string]int64

	hooks hooks
}

// hooks let tests act inside Run's goroutine. Zero in production.
type hooks struct {
	// beforeCommit runs before each write; an error stops the write from
	// being sent and ends the pass with that error.
	beforeCommit func(f fence, c change) error
	// afterCommit runs after each write that was sent; rev is the
	// revision of etcd's answer (0 without one).
	afterCommit func(f fence, c change, rev int64, applied bool, err error)
	// loseAnswer, when it returns true, makes a write that applied look
	// like one whose answer was lost.
	loseAnswer func(c change) bool
	// beforeIntent runs after the leader checked its election key and
	// before it records a migration's intent in the chain.
	beforeIntent func(f fence, channel string, term int64)
	// afterPass runs after each reconcile pass.
	afterPass func(err error)
	// abandon makes the next step-down behave like a crash: no resign, no
	// revoke; the election key stays until the session's TTL passes.
	abandon atomic.Bool
	// dial, when set, replaces failure detection's connections (set
	// before Run).
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// fence is the leader condition of every write: the election key and its
// create revision.
type fence struct {
	key string
	rev int64
}

// New returns a coordinator that uses cli, which the caller owns and
// closes after Run has returned.
func New(cli *clientv3.Client, cfg Config) (*Coordinator, error) {
	if cli == nil {
		return nil, errors.New("coordinator: nil etcd client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	layout, err := cluster.NewLayout(cfg.Root)
	if err != nil {
		return nil, errors.Wrap(err, "coordinator")
	}
	return &Coordinator{
		cli:     cli,
		cfg:     cfg,
		layout:  layout,
		rules:   rules{openTimeout: cfg.OpenTimeout},
		log:     cfg.Logger.With("coordinator", cfg.ID),
		metrics: newMetrics(cfg.Registerer),
		clock:   cfg.Clock,
		leading: make(chan struct{}),
		overdue: map[string]int64{},
	}, nil
}

// IsLeader reports whether this coordinator leads now: it won the election
// and has not noticed losing it. A leader that lost its session without
// noticing yet still reports true, but none of its writes applies.
func (c *Coordinator) IsLeader() bool { return c.leader.Load() }

// Leading returns a channel that is closed while this coordinator leads.
// After it steps down, Leading returns a new channel, closed at its next
// win.
func (c *Coordinator) Leading() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

func (c *Coordinator) setLeader(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader.Load() == on {
		return
	}
	c.leader.Store(on)
	if on {
		close(c.leading)
		c.metrics.leader.Set(1)
		return
	}
	c.leading = make(chan struct{})
	c.metrics.leader.Set(0)
	c.metrics.assigning.Set(0)
	c.metrics.overdue.Set(0)
}

// Run campaigns in the cluster's election and, while it leads,
// reconciles the assignments. It steps down when its session ends (etcd
// unreachable for the TTL, lease revoked) or a write finds it deposed, and
// campaigns again with a new session. It returns nil once ctx ends, after
// resigning and revoking its session's lease; the client stays open.
//
// Run registers the metrics on Config.Registerer and unregisters them
// when it returns. It returns an error only for a registerer that refuses
// them, or ErrRunning while another Run of c is going.
func (c *Coordinator) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	if err := c.metrics.register(); err != nil {
		return err
	}
	defer c.metrics.unregister()
	retry := backoff.Config{Initial: 50 * time.Millisecond, Max: c.cfg.SessionTTL}
	for attempt := 0; ; attempt++ {
		led, err := c.runTerm(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if led {
			attempt = 0
			c.log.Warn("stepped down", "error", err)
		} else {
			c.log.Warn("campaign failed", "error", err)
		}
		if retry.Wait(ctx, attempt) != nil {
			return nil
		}
	}
}

// runTerm is one session: campaign, lead until the session ends, step
// down. led reports whether it led.
func (c *Coordinator) runTerm(ctx context.Context) (led bool, err error) {
	// The session outlives ctx just long enough to resign and revoke; ctx
	// only cuts short its creation.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	stop := context.AfterFunc(ctx, scancel)
	s, err := concurrency.NewSession(c.cli, concurrency.WithTTL(c.cfg.ttlSeconds()), concurrency.WithContext(sctx))
	stop()
	if err != nil {
		return false, errors.Wrap(err, "coordinator: new session")
	}
	var f fence
	defer func() { c.stepDown(ctx, s, f) }()

	// lctx ends with ctx or with the session.
	lctx, lcancel := context.WithCancel(s.Ctx())
	defer lcancel()
	defer context.AfterFunc(ctx, lcancel)()

	if f, err = c.campaign(lctx, s); err != nil {
		return false, err
	}
	// The wait can end after the session lost its key; lead only with a
	// key that is still ours.
	resp, err := c.cli.Get(lctx, f.key)
	if err != nil {
		return false, errors.Wrap(err, "coordinator: check election key")
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != f.rev {
		return false, errDeposed
	}

	c.log.Info("leading", "election_key", f.key, "election_rev", f.rev)
	c.setLeader(true)
	defer c.setLeader(false)
	err = c.lead(lctx, f)
	if ctx.Err() == nil && lctx.Err() != nil {
		err = errors.New("coordinator: session ended")
	}
	return true, err
}

// stepDown resigns (if f is set) and revokes the session's lease, bounded
// by the TTL (after which the lease is gone anyway).
func (c *Coordinator) stepDown(ctx context.Context, s *concurrency.Session, f fence) {
	if c.hooks.abandon.Load() {
		s.Orphan()
		return
	}
	select {
	case <-s.Done():
		// Expired or revoked: nothing of it is left to remove.
		return
	default:
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SessionTTL)
	defer cancel()
	if f.key != "" {
		if err := c.resign(tctx, f); err != nil {
			c.log.Debug("resign", "error", err)
		}
	}
	s.Orphan()
	if _, err := c.cli.Revoke(tctx, s.Lease()); err != nil {
		c.log.Debug("revoke session lease", "error", err)
	}
}

// lead reconciles until ctx ends or a write finds the coordinator
// deposed: a pass on every change of the cluster, every
// ReconcileInterval, and soon (with backoff) after a pass that did not
// finish cleanly.
//
// Unless Config.LeaseOnly, a detector watches every registered node
// meanwhile; what it learns is an input of every pass, and a pass runs as
// soon as it learns something.
func (c *Coordinator) lead(ctx context.Context, f fence) error {
	var view *cluster.View
	defer func() {
		if view != nil {
			view.Close()
		}
	}()
	var det *detector
	if !c.cfg.LeaseOnly {
		det = newDetector(ctx, c.liveness(), c.log, c.metrics)
		defer det.stop()
	}
	tick := c.clock.NewTicker(c.cfg.ReconcileInterval)
	defer tick.Stop()
	retry := backoff.Config{Initial: 10 * time.Millisecond, Max: c.cfg.ReconcileInterval}
	failures := 0
	for ctx.Err() == nil {
		if view == nil {
			// The view only wakes the loop; the ticker covers its absence.
			v, err := cluster.Watch(ctx, c.cli, c.layout, c.log)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("watch cluster", "error", err)
			}
			view = v
		}
		var changed <-chan struct{}
		if view != nil {
			var s cluster.Snapshot
			s, changed = view.Snapshot()
			if det != nil {
				det.sync(s)
			}
		}
		err := c.reconcile(ctx, f, det.health())
		if c.hooks.afterPass != nil {
			c.hooks.afterPass(err)
		}
		if errors.Is(err, errDeposed) {
			return err
		}
		var retryAfter <-chan time.Time
		var timer clockwork.Timer
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			failures = 0
		default:
			if errors.Is(err, errConflict) {
				c.log.Debug("reconcile again", "error", err)
			} else {
				c.log.Warn("reconcile", "error", err)
			}
			timer = c.clock.NewTimer(retry.Delay(failures))
			retryAfter, changed = timer.Chan(), nil
			failures++
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-tick.Chan():
		case <-retryAfter:
		case ev := <-det.eventsChan():
			det.note(ev)
			for more := true; more; {
				select {
				case ev := <-det.eventsChan():
					det.note(ev)
				default:
					more = false
				}
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
	return nil
}

// liveness is failure detection's watch as configured.
func (c *Coordinator) liveness() liveness {
	dial := c.hooks.dial
	if dial == nil {
		dial = dialer(c.cfg.ProbeTimeout)
	}
	return liveness{dial: dial, timeout: c.cfg.ProbeTimeout, tls: c.cfg.TLS, clock: c.clock, log: c.log,
		retry:     backoff.Config{Initial: 10 * time.Millisecond, Max: time.Second},
		leaseLeft: c.leaseLeft, metrics: c.metrics}
}

// leaseLeft asks etcd how long lease has left, in the whole seconds etcd
// answers (a lease etcd no longer has: -1s).
func (c *Coordinator) leaseLeft(ctx context.Context, lease int64) (time.Duration, error) {
	resp, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return -time.Second, nil
	case err != nil:
		return 0, fmt.Errorf("lease %x time to live: %w", lease, err)
	}
	return time.Duration(resp.TTL) * time.Second, nil
}
