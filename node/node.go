package node

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

// Node is one node of a cluster. Start runs it; Shutdown stops it.
type Node struct {
	cfg     Config
	cli     *clientv3.Client
	opener  walimpls.Opener
	chains  *chainwal.Opener // nil without Config.Chains
	layout  cluster.Layout
	log     *slog.Logger
	mgr     *walmanager.Manager
	metrics *metrics
	phases  *phases      // times opens and first appends (phases.go)
	guard   *authz.Guard // nil without Config.Authz (authz.go)
	// limits caps what unauthenticated peers hold (bounds.go); refuser
	// logs and counts the node's own refusals, through refusals, the
	// rate limit of every refusal's log line (refusallog.go).
	limits   *peerLimits
	refuser  refuser
	refusals *refusalLimiter
	// after times the liveness streams (time.After; tests replace it
	// before Start).
	after func(d time.Duration) <-chan time.Time
	// consumers keeps the consumers' checkpoints and retainer releases
	// the owned channels' logs (consumers.go); both nil without
	// Config.Consumers. The retainer starts with the API.
	consumers *consumers.Store
	retainer  *retention.Retainer

	view *cluster.View
	ln   net.Listener
	srv  *http.Server
	addr string

	// accepting is false once Shutdown began: appends are refused.
	accepting atomic.Bool
	appends   inflight // appends in flight

	sessMu   sync.Mutex
	sess     *concurrency.Session // the current registration; renewed when lost
	stopping bool                 // Shutdown began: no new registration

	keysMu sync.Mutex
	keys   map[string]*keys // per channel

	// The follower's state: the term each channel is held (or being
	// opened) at. Owned by follow.
	held map[string]int64

	// reports are the open reports written, per channel, with the
	// assignment revision each was written for: they live under the
	// node's lease, and keepSession writes them again under a new one.
	reportMu sync.Mutex
	reports  map[string]writtenReport

	// opening is, per channel, the open in flight (startOpen): an append
	// that arrives for the channel meanwhile waits for it to end instead
	// of being refused (owned), so the first append at a new term is
	// served as soon as the WAL is ready, not after the Opened report has
	// gone through etcd to the client.
	openMu  sync.Mutex
	opening map[string]openInFlight
	// waitingForOpen, when set (by tests, before Start), is called when a
	// request begins to wait for its channel's open.
	waitingForOpen func(channel string)

	ctx    context.Context // ends with Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // follow, the session keeper, opens and removes
}

// New returns a node over a backend opener and an etcd client; the caller
// owns both.
func New(cli *clientv3.Client, opener walimpls.Opener, cfg Config) (*Node, error) {
	if cli == nil || opener == nil {
		return nil, errors.Wrap(ErrInvalidConfig, "an etcd client and a backend opener are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	layout, _ := cluster.NewLayout(cfg.Root)
	n := &Node{cfg: cfg, cli: cli, opener: opener, layout: layout, log: cfg.Logger.With("node", cfg.ID), consumers: cfg.Consumers,
		keys: map[string]*keys{}, held: map[string]int64{}, opening: map[string]openInFlight{}, reports: map[string]writtenReport{}}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("metrics: %w: %w", err, ErrInvalidConfig))
	}
	n.metrics = m
	n.limits = newPeerLimits(cfg.MaxConnsPerPeer, cfg.MaxStreamsPerPeer)
	n.refusals = newRefusalLimiter(cfg.RefusalLogInterval, cfg.Clock, m.refusalLogsSuppressed)
	refusalLog := slog.New(refusalHandler{next: n.log.Handler(), l: n.refusals})
	n.refuser = refuser{log: refusalLog, refused: m.refused}
	n.after = time.After
	if cfg.Authz != nil {
		var placed func(ctx context.Context, vchannel string) (string, error)
		if cfg.Placement != nil {
			placed = placedBy(cfg.Placement)
		}
		if n.guard, err = authz.NewGuard(cfg.Authz, authz.GuardOptions{Logger: refusalLog, Placed: placed}); err != nil {
			m.unregister()
			return nil, errors.WithStack(fmt.Errorf("%w: %w", err, ErrInvalidConfig))
		}
	}
	n.phases = newPhases()
	collectors := n.phases.collectors()
	if n.guard != nil {
		collectors = append(collectors, n.guard.Collectors()...)
	}
	for _, c := range collectors {
		if err := cfg.Registerer.Register(c); err != nil {
			m.unregister()
			return nil, errors.WithStack(fmt.Errorf("metrics: %w: %w", err, ErrInvalidConfig))
		}
		m.collectors = append(m.collectors, c)
	}
	walOpts := cfg.WAL
	if walOpts.Logger == nil {
		walOpts.Logger = n.log
	}
	if walOpts.Metrics == nil {
		if walOpts.Metrics, err = adaptor.NewMetrics(cfg.Registerer); err != nil {
			return nil, errors.WithStack(fmt.Errorf("metrics: %w: %w", err, ErrInvalidConfig))
		}
	}
	walOpts.OnFirstAppend = n.phases.onFirstAppend(walOpts.OnFirstAppend)
	var walOpener walmanager.WALOpener = walmanager.WALOpenerFunc(func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
		return adaptor.Open(ctx, opener, ch, walOpts)
	})
	var deleter walmanager.ChannelDeleter = opener
	if cfg.Chains != nil {
		cc := *cfg.Chains
		cc.WAL, cc.Logger = walOpts, n.log
		if n.chains, err = chainwal.New(cc); err != nil {
			m.unregister()
			return nil, errors.WithStack(fmt.Errorf("%w: %w", err, ErrInvalidConfig))
		}
		walOpener, deleter = n.chains, n.chains
	}
	n.mgr, err = walmanager.New(walOpener, walmanager.Options{Logger: n.log, Registerer: cfg.Registerer, Deleter: deleter, Clock: cfg.Clock})
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("%w: %w", err, ErrInvalidConfig))
	}
	return n, nil
}

// Start listens, registers the node, starts following its assignments and
// serves the API. It returns once the node is registered and serving.
func (n *Node) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", n.cfg.Listen)
	if err != nil {
		return errors.Wrapf(err, "node %s: listen on %s", n.cfg.ID, n.cfg.Listen)
	}
	n.ln = ln
	n.addr = n.cfg.Advertise
	if n.addr == "" {
		n.addr = ln.Addr().String()
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	view, err := cluster.Watch(ctx, n.cli, n.layout, n.log)
	if err != nil {
		_ = ln.Close()
		n.cancel()
		return errors.Wrapf(err, "node %s", n.cfg.ID)
	}
	n.view = view
	if err := n.register(ctx); err != nil {
		view.Close()
		_ = ln.Close()
		n.cancel()
		return err
	}
	mux := http.NewServeMux()
	svc := &service{n: n, traffic: newTraffic(), tails: tails{at: map[string]termTail{}}}
	if n.consumers != nil {
		opts := retention.Options{Config: n.cfg.Retention, Store: n.consumers, Source: retentionSource{s: svc},
			Logger: n.log, Registerer: n.cfg.Registerer, AfterStep: n.cfg.RetentionAfterStep}
		if n.chains != nil {
			opts.Chains = n.chains.Chain
		}
		if n.retainer, err = retention.New(opts); err != nil {
			view.Close()
			_ = ln.Close()
			n.cancel()
			return errors.WithStack(fmt.Errorf("node %s: %w: %w", n.cfg.ID, err, ErrInvalidConfig))
		}
	}
	var handlerOpts []connect.HandlerOption
	if n.guard != nil {
		handlerOpts = append(handlerOpts, connect.WithInterceptors(guardInterceptor{g: n.guard}))
	}
	path, handler := streamwalv1connect.NewWALServiceHandler(svc, handlerOpts...)
	mux.Handle(path, handler)
	mux.Handle("/metrics", n.checkHTTP(promhttp.HandlerFor(n.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP))
	mux.HandleFunc("/healthz", n.health)
	mux.HandleFunc("/admin/channels", n.checkHTTP(svc.adminChannels))
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	if n.cfg.TLS != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true) // gRPC without TLS
	}
	mux.HandleFunc(cluster.LivenessPath, n.liveness)
	var budget *handshakeBudget
	var failed func(peer string)
	if n.cfg.TLS != nil {
		budget = newHandshakeBudget(n.cfg.FailedHandshakesPerPeer, n.cfg.Clock)
		failed = budget.failed
	}
	n.srv = &http.Server{Handler: n.guarded(n.bounded(mux)), Protocols: protocols, ReadHeaderTimeout: 10 * time.Second, TLSConfig: n.cfg.TLS,
		IdleTimeout: n.cfg.IdleTimeout, ConnState: connState,
		ErrorLog: newServerLog(n.refuser.log, n.metrics.handshakesRefused, failed)}
	ln = limitListener{Listener: ln, limits: n.limits, budget: budget, refuse: n.refuser}
	n.accepting.Store(true)
	n.wg.Add(4)
	go func() {
		defer n.wg.Done()
		t := n.cfg.Clock.NewTicker(n.cfg.RefusalLogInterval)
		defer t.Stop()
		n.refusals.run(n.ctx, n.log, t.Chan())
	}()
	go func() {
		defer n.wg.Done()
		serve := func() error { return n.srv.Serve(ln) }
		if n.cfg.TLS != nil {
			serve = func() error { return n.srv.ServeTLS(ln, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("api server stopped", "error", err)
		}
	}()
	go n.keepSession()
	go n.follow()
	if n.retainer != nil {
		n.retainer.Start()
	}
	n.log.Info("node started", "addr", n.addr, "backend", n.cfg.Backend, "tls", n.cfg.TLS != nil)
	if n.cfg.TLS != nil && !verifiesClients(n.cfg.TLS) {
		n.log.Warn("TLS verifies no client certificate, so no node can prove it is one: the liveness stream is refused to every caller, " +
			"and the coordinators detect this node's failure by its lease alone; verify client certificates with the cluster's CA " +
			"(walnode: -tls-ca or -tls-client-ca)")
	}
	n.reportOffDefault(ctx)
	return nil
}

// reportOffDefault says which channels are on a backend entry other than
// the default: a changed default never moves a channel (walctl migrate
// does), and an operator who changed it should see what stayed.
func (n *Node) reportOffDefault(ctx context.Context) {
	if n.chains == nil {
		return
	}
	off, err := n.chains.OffDefault(ctx)
	if err != nil {
		n.log.Warn("could not list the channels' chains", "error", err)
		return
	}
	n.metrics.offDefault.Set(float64(len(off)))
	if len(off) == 0 {
		return
	}
	where := make([]string, 0, len(off))
	for _, c := range off {
		where = append(where, c.Channel+" on "+c.Last().Backend.Name)
	}
	n.log.Warn("channels stay on a backend that is not the default; move them with walctl migrate <channel> "+n.chains.Default(),
		"default", n.chains.Default(), "count", len(off), "channels", strings.Join(where, ", "))
}

// Addr is where the node serves its API.
func (n *Node) Addr() string { return n.addr }

// ID is the node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// register creates a session and puts the node's key under its lease. The
// session is not bound to the node's context: Shutdown cancels that, and
// must still revoke the lease.
//
// The lease is granted here rather than by the session, so that the node
// learns the TTL etcd granted (it raises small ones) and publishes it in
// its NodeInfo: the coordinator times the node's silence by it.
func (n *Node) register(ctx context.Context) error {
	grant, err := n.cli.Grant(ctx, int64(n.cfg.SessionTTL.Round(time.Second)/time.Second))
	if err != nil {
		return errors.Wrapf(err, "node %s: etcd lease", n.cfg.ID)
	}
	sess, err := concurrency.NewSession(n.cli, concurrency.WithLease(grant.ID))
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.SessionTTL)
		_, _ = n.cli.Revoke(rctx, grant.ID)
		cancel()
		return errors.Wrapf(err, "node %s: etcd session", n.cfg.ID)
	}
	info := cluster.NodeInfo{ID: n.cfg.ID, Addr: n.addr, Started: time.Now().UTC(), LeaseTTL: grant.TTL}
	if _, err := n.cli.Put(ctx, n.layout.Node(n.cfg.ID), string(cluster.Encode(info)), clientv3.WithLease(sess.Lease())); err != nil {
		_ = sess.Close()
		return errors.Wrapf(err, "node %s: register", n.cfg.ID)
	}
	n.sessMu.Lock()
	if n.stopping {
		n.sessMu.Unlock()
		_ = sess.Close() // Shutdown began meanwhile: leave nothing behind
		return errors.Newf("node %s: shutting down", n.cfg.ID)
	}
	n.sess = sess
	n.sessMu.Unlock()
	n.log.Info("registered", "lease", int64(sess.Lease()), "lease_ttl_seconds", grant.TTL)
	return nil
}

// session returns the current session.
func (n *Node) session() *concurrency.Session {
	n.sessMu.Lock()
	defer n.sessMu.Unlock()
	return n.sess
}

// keepSession registers again whenever the session ends (its lease expired
// or etcd was unreachable for its TTL): the coordinator may have moved this
// node's channels meanwhile; the assignments say.
func (n *Node) keepSession() {
	defer n.wg.Done()
	retry := backoff.Config{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		sess := n.session()
		select {
		case <-n.ctx.Done():
			return
		case <-sess.Done():
		}
		n.sessMu.Lock()
		stopping := n.stopping
		n.sessMu.Unlock()
		if stopping {
			return // Shutdown revoked it
		}
		n.metrics.sessionsLost.Inc()
		n.log.Warn("lease lost; registering again")
		for attempt := 0; ; attempt++ {
			if n.ctx.Err() != nil {
				return
			}
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.SessionTTL)
			err := n.register(ctx)
			cancel()
			if err == nil {
				break
			}
			n.log.Warn("register failed", "error", err)
			if retry.Wait(n.ctx, attempt) != nil {
				return
			}
		}
		// The open reports went with the lost lease: without them the
		// coordinator would take this node's channels for unopened until
		// its open timeout, and with no other node to go to, for good.
		n.reportMu.Lock()
		again := maps.Clone(n.reports)
		n.reportMu.Unlock()
		for ch, r := range again {
			n.writeReport(ch, r.rev, r.report)
		}
	}
}

// keysOf returns the idempotency keys of a channel.
func (n *Node) keysOf(channel string) *keys {
	n.keysMu.Lock()
	defer n.keysMu.Unlock()
	k := n.keys[channel]
	if k == nil {
		k = newKeys(n.cfg.DedupKeys)
		n.keys[channel] = k
	}
	return k
}

func (n *Node) health(w http.ResponseWriter, _ *http.Request) {
	sess := n.session()
	select {
	case <-sess.Done():
		http.Error(w, "lease lost", http.StatusServiceUnavailable)
		return
	default:
	}
	if !n.accepting.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Shutdown stops the node: it refuses new appends, waits for those in
// flight, closes its WALs, revokes its lease (the coordinator moves its
// channels at once) and stops serving. ctx bounds it; what is left when it
// ends is abandoned and the error says so.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.cancel == nil {
		return nil // never started
	}
	n.accepting.Store(false)
	// errors.Join, not CombineErrors: every step's error stays in the text
	// and visible to errors.Is (a context end as much as the first).
	var errs []error
	select {
	case <-n.appends.Drained():
	case <-ctx.Done():
		errs = append(errs, errors.Wrap(ctx.Err(), "node: appends in flight abandoned"))
	}
	if n.retainer != nil {
		_ = n.retainer.Close() // before the WALs: a round in flight ends first
	}
	if err := n.mgr.Close(ctx); err != nil {
		errs = append(errs, errors.Wrap(err, "node: close wals"))
	}
	n.sessMu.Lock()
	n.stopping = true
	sess := n.sess
	n.sessMu.Unlock()
	if sess != nil {
		if err := sess.Close(); err != nil { // revokes the lease: the coordinator moves the channels at once
			errs = append(errs, errors.Wrap(err, "node: revoke lease"))
		}
	}
	n.cancel()
	if err := n.srv.Shutdown(ctx); err != nil {
		_ = n.srv.Close()
		errs = append(errs, errors.Wrap(err, "node: stop serving"))
	}
	n.view.Close()
	n.wg.Wait()
	n.metrics.unregister()
	n.log.Info("node stopped")
	return errors.Join(errs...)
}

// metrics are the node's own series.
type metrics struct {
	reg          prometheus.Registerer
	requests     *prometheus.CounterVec
	sessionsLost prometheus.Counter
	opens        *prometheus.CounterVec
	dedup        *prometheus.CounterVec
	// handshakesRefused counts the API's failed TLS handshakes (tlslog.go).
	handshakesRefused *prometheus.CounterVec
	// refused counts the node's own refusals (bounds.go), by reason;
	// refusalLogsSuppressed the refusals' log lines not written
	// (refusallog.go).
	refused               *prometheus.CounterVec
	refusalLogsSuppressed prometheus.Counter
	// offDefault is how many channels were on a backend other than the
	// default when the node started (Config.Chains).
	offDefault prometheus.Gauge
	collectors []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "requests_total", Help: "API requests by method and code."}, []string{"method", "code"}),
		sessionsLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "sessions_lost_total", Help: "Times the node's lease was lost and it registered again."}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "channel_opens_total", Help: "Channel opens following assignments, by result."}, []string{"result"}),
		dedup: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "retries_total", Help: "Retried appends, by how they were resolved: memory, log (found an earlier copy), stored."}, []string{"resolved"}),
		handshakesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "tls_handshakes_refused_total", Help: "TLS handshakes of the API that failed, by reason: no_client_certificate, expired_certificate, unknown_authority, bad_certificate, plaintext_client, closed_by_client, other."}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "refused_total", Help: "Connections and requests the node refused before authorization, by reason: too_many_connections, too_many_streams (an unauthenticated peer over its caps), failed_handshakes (a connection of a peer whose TLS handshakes failed too fast, closed at accept), no_node_identity (a liveness stream without a node's certificate), liveness_stalled (a liveness stream whose heartbeat could not be written)."}, []string{"reason"}),
		refusalLogsSuppressed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "refusal_logs_suppressed_total", Help: "Refusals (of every kind) not logged because one of the same peer and reason was logged in the interval; the log says each count."}),
		offDefault: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "channels_off_default", Help: "Channels whose writable segment is on a backend entry other than the default, when the node started (walctl migrate moves them)."}),
	}
	for _, r := range []string{reasonTooManyConns, reasonTooManyStreams, reasonNoNodeIdentity, reasonLivenessStalled, reasonBadHandshakes} {
		m.refused.WithLabelValues(r)
	}
	m.collectors = []prometheus.Collector{m.requests, m.sessionsLost, m.opens, m.dedup, m.handshakesRefused, m.refused, m.refusalLogsSuppressed, m.offDefault}
	for _, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}
