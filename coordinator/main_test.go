package coordinator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/atomic"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdtest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(etcdtest.Main(m, srv))
}

// Test timings: etcd (etcdtest) grants leases down to 1 s.
const (
	testTTL       = time.Second
	testInterval  = 100 * time.Millisecond
	testTTLSecond = 1
)

// env is one test's cluster: a unique root on the shared server, a View
// to wait on, a recorder of every assignment written, the managed
// channels.
type env struct {
	t        *testing.T
	ctx      context.Context
	cli      *clientv3.Client
	layout   cluster.Layout
	view     *cluster.View
	rec      *recorder
	channels *channelList
}

func newEnv(t *testing.T, timeout time.Duration, channels ...string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cli := etcdtest.Client(t, srv.Endpoints())
	layout, err := cluster.NewLayout(etcdtest.Prefix(t))
	require.NoError(t, err)
	e := &env{t: t, ctx: ctx, cli: cli, layout: layout, channels: &channelList{names: channels}}
	e.rec = startRecorder(t, ctx, cli, layout)
	e.view, err = cluster.Watch(ctx, cli, layout, nil)
	require.NoError(t, err)
	t.Cleanup(e.view.Close)
	return e
}

// waitFor waits for cond on the env's view, failing the test at the
// env's deadline.
func (e *env) waitFor(what string, cond func(cluster.Snapshot) bool) cluster.Snapshot {
	e.t.Helper()
	s, err := e.view.WaitFor(e.ctx, cond)
	require.NoError(e.t, err, "waiting for %s; last snapshot:\n%s", what, dump(s))
	return s
}

// waitCandidates waits until n candidates have an election key (a key
// put under the root wakes the view).
func (e *env) waitCandidates(n int) {
	e.t.Helper()
	e.waitFor("candidates", func(cluster.Snapshot) bool {
		resp, err := e.cli.Get(e.ctx, e.layout.Election()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == int64(n)
	})
}

// settled holds when every managed channel is Assigned to a live node.
func (e *env) settled(s cluster.Snapshot) bool {
	for _, ch := range e.channels.get() {
		a, ok := s.Assignments[ch]
		if !ok || a.Value.State != cluster.Assigned {
			return false
		}
		if _, ok := s.Nodes[a.Value.Node]; !ok {
			return false
		}
		if _, drained := s.Drains[a.Value.Node]; drained {
			return false
		}
	}
	return true
}

func (e *env) waitSettled() cluster.Snapshot {
	e.t.Helper()
	return e.waitFor("every channel assigned to a live node", e.settled)
}

// check waits until the recorder has seen every assignment of s and
// checks the history of every channel.
func (e *env) check(s cluster.Snapshot) {
	e.t.Helper()
	e.syncRecorder(s)
	e.rec.check(e.t)
}

// syncRecorder waits until the recorder has seen every assignment of s.
func (e *env) syncRecorder(s cluster.Snapshot) {
	e.t.Helper()
	var last int64
	for _, a := range s.Assignments {
		last = max(last, a.Revision)
	}
	e.rec.waitRev(e.t, e.ctx, last)
}

func dump(s cluster.Snapshot) string {
	out := fmt.Sprintf("rev %d nodes %v drains %v moves %d\n", s.Revision, slices.Sorted(mapsKeys(s.Nodes)), slices.Sorted(mapsKeys(s.Drains)), len(s.Moves))
	for _, ch := range slices.Sorted(mapsKeys(s.Assignments)) {
		a := s.Assignments[ch].Value
		o := s.Opened[ch].Value
		out += fmt.Sprintf("  %s: %s@%d %s prev=%v opened=%s@%d%s\n", ch, a.Node, a.Term, a.State, a.Previous, o.Node, o.Term, o.Error)
	}
	return out
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// owners counts the managed channels per owner.
func owners(s cluster.Snapshot, channels []string) map[string]int {
	out := map[string]int{}
	for _, ch := range channels {
		if a, ok := s.Assignments[ch]; ok {
			out[a.Value.Node]++
		}
	}
	return out
}

type channelList struct {
	mu    sync.Mutex
	names []string
}

func (l *channelList) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.names)
}

func (l *channelList) add(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, names...)
}

func (l *channelList) source() ChannelSource {
	return func(context.Context) ([]string, error) { return l.get(), nil }
}

// ---- coordinators

type runner struct {
	c      *Coordinator
	cancel context.CancelFunc
	done   chan error
	passes atomic.Int64
	passed chan struct{} // closed and replaced after each pass
	mu     sync.Mutex
}

// startCoordinator runs a coordinator on its own client. setup may set
// hooks before Run starts (afterPass is taken by the runner).
func (e *env) startCoordinator(id string, cfg Config, setup func(*Coordinator)) *runner {
	e.t.Helper()
	cli := etcdtest.Client(e.t, srv.Endpoints())
	cfg.ID = id
	cfg.Root = e.layout.Root
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = testTTL
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = testInterval
	}
	if cfg.Channels == nil {
		cfg.Channels = e.channels.source()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t).With("candidate", id)
	}
	c, err := New(cli, cfg)
	require.NoError(e.t, err)
	r := &runner{c: c, done: make(chan error, 1), passed: make(chan struct{})}
	c.hooks.afterPass = func(error) {
		r.passes.Add(1)
		r.mu.Lock()
		close(r.passed)
		r.passed = make(chan struct{})
		r.mu.Unlock()
	}
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- c.Run(ctx) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	return r
}

// stop ends Run and waits for it; idempotent.
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			require.NoError(t, err)
			close(r.done)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// waitPasses waits until n passes have ended after the call.
func (r *runner) waitPasses(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for range n {
		r.mu.Lock()
		ch := r.passed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no reconcile pass: %v", ctx.Err())
		}
	}
}

// waitLeader waits until one of rs leads and returns it.
func waitLeader(t *testing.T, ctx context.Context, rs ...*runner) *runner {
	t.Helper()
	for {
		for _, r := range rs {
			if r.c.IsLeader() {
				return r
			}
		}
		cases := make([]<-chan struct{}, len(rs))
		for i, r := range rs {
			cases[i] = r.c.Leading()
		}
		if !waitAny(ctx, cases) {
			t.Fatalf("no leader: %v", ctx.Err())
		}
	}
}

func waitAny(ctx context.Context, chs []<-chan struct{}) bool {
	done := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, ch := range chs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ch:
				select {
				case done <- struct{}{}:
				default:
				}
			case <-stop:
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// ---- simulated nodes

// simNode registers a node under its own session lease and, for every
// assignment naming it, writes an Opened report at the assigned term
// (conditional on the assignment it saw being current), as the node
// package would after opening the WAL.
type simNode struct {
	id  string
	e   *env
	cli *clientv3.Client

	mu   sync.Mutex
	sess *concurrency.Session
	// hold stops reports while true.
	hold bool
	// fail returns the open error to report for a channel ("" for none)
	// and whether to report at all.
	behave func(ch string) (report bool, openErr string)

	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool

	// addr is the address it registers ("" for none); live serves the
	// liveness stream there (listening, detector_test.go).
	addr string
	live *livenessServer

	// chains, when set, makes the node open channels as chainwal does
	// (migrate_test.go) before it reports them open.
	chains *chainMode

	// ttl is its lease's TTL in seconds (0: testTTLSecond); publishTTL
	// puts it in its NodeInfo, as a node that heartbeats does
	// (heartbeating, detector_test.go).
	ttl        int
	publishTTL bool
}

type nodeOpt func(*simNode)

func holding() nodeOpt { return func(n *simNode) { n.hold = true } }

func behaving(f func(ch string) (bool, string)) nodeOpt { return func(n *simNode) { n.behave = f } }

func (e *env) startNode(id string, opts ...nodeOpt) *simNode {
	e.t.Helper()
	n := &simNode{id: id, e: e, cli: e.cli, kick: make(chan struct{}, 1), done: make(chan struct{})}
	for _, o := range opts {
		o(n)
	}
	require.NoError(e.t, n.register())
	view, err := cluster.Watch(e.ctx, e.cli, e.layout, nil)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	n.cancel = cancel
	go func() {
		defer close(n.done)
		defer view.Close()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			s, changed := view.Snapshot()
			n.report(ctx, s)
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-n.kick:
			case <-tick.C:
			}
		}
	}()
	e.t.Cleanup(func() { n.revoke() })
	return n
}

// register starts a new session and puts the node key under it.
func (n *simNode) register() error {
	ttl := n.ttl
	if ttl == 0 {
		ttl = testTTLSecond
	}
	s, err := concurrency.NewSession(n.cli, concurrency.WithTTL(ttl), concurrency.WithContext(n.e.ctx))
	if err != nil {
		return err
	}
	// No address: a simulated node has no process to watch; its lease is
	// all the coordinator learns its death from (the detection tests give
	// theirs one).
	info := cluster.NodeInfo{ID: n.id, Addr: n.addr, Started: time.Now()}
	if n.publishTTL {
		info.LeaseTTL = int64(ttl)
	}
	if _, err := n.cli.Put(n.e.ctx, n.e.layout.Node(n.id), string(cluster.Encode(info)), clientv3.WithLease(s.Lease())); err != nil {
		_ = s.Close()
		return err
	}
	n.mu.Lock()
	n.sess = s
	n.mu.Unlock()
	return nil
}

func (n *simNode) report(ctx context.Context, s cluster.Snapshot) {
	n.mu.Lock()
	hold, sess, behave := n.hold, n.sess, n.behave
	n.mu.Unlock()
	if hold || sess == nil {
		return
	}
	for ch, a := range s.Assignments {
		if a.Value.Node != n.id {
			continue
		}
		want := cluster.Opened{Channel: ch, Node: n.id, Term: a.Value.Term}
		if behave != nil {
			report, openErr := behave(ch)
			if !report {
				continue
			}
			want.Error = openErr
		}
		if o, ok := s.Opened[ch]; ok && o.Value == want && o.Lease == int64(sess.Lease()) {
			continue
		}
		if n.chains != nil && want.Error == "" {
			want.Error = n.chains.open(ctx, ch, a.Value.Term)
		}
		_, _ = n.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(n.e.layout.Assignment(ch)), "=", a.Revision)).
			Then(clientv3.OpPut(n.e.layout.Opened(ch), string(cluster.Encode(want)), clientv3.WithLease(sess.Lease()))).
			Commit()
	}
}

func (n *simNode) setHold(on bool) {
	n.mu.Lock()
	n.hold = on
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// stopLoop ends the reporting goroutine; false if it had ended.
func (n *simNode) stopLoop() bool {
	n.mu.Lock()
	stopped := n.stopped
	n.stopped = true
	n.mu.Unlock()
	if stopped {
		return false
	}
	n.cancel()
	<-n.done
	return true
}

// kill stops the node like a crash: its lease is left to expire. It
// returns the lease.
func (n *simNode) kill() clientv3.LeaseID {
	n.stopLoop()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sess.Orphan()
	return n.sess.Lease()
}

// revoke stops the node and revokes its lease (a clean exit, or an
// expiry without the wait); idempotent.
func (n *simNode) revoke() {
	n.stopLoop()
	n.mu.Lock()
	s := n.sess
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Orphan()
	_, _ = n.cli.Revoke(ctx, s.Lease())
}

// restart re-registers the node under a new lease while the old one is
// left to expire, as a process restarting with the same ID would; it
// returns the old lease.
func (n *simNode) restart(t *testing.T) clientv3.LeaseID {
	t.Helper()
	n.mu.Lock()
	old := n.sess
	n.sess = nil
	n.mu.Unlock()
	old.Orphan()
	require.NoError(t, n.register())
	select {
	case n.kick <- struct{}{}:
	default:
	}
	return old.Lease()
}

// waitLeaseGone polls etcd until lease has expired: a condition, checked
// every 50ms until the env's deadline.
func (e *env) waitLeaseGone(id clientv3.LeaseID) {
	e.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := e.cli.TimeToLive(e.ctx, id)
		if err == nil && resp.TTL < 0 {
			return
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("lease %x still alive: %v", id, e.ctx.Err())
		case <-tick.C:
		}
	}
}

// ---- recorder

// recorder keeps every assignment value ever written under a layout, in
// revision order, from a watch of its own.
type recorder struct {
	mu       sync.Mutex
	history  map[string][]recorded
	deletes  []string
	lastRev  int64
	changed  chan struct{}
	watchErr error
}

type recorded struct {
	rev     int64
	version int64
	a       cluster.Assignment
}

func startRecorder(t *testing.T, ctx context.Context, cli *clientv3.Client, layout cluster.Layout) *recorder {
	t.Helper()
	resp, err := cli.Get(ctx, layout.Assignments(), clientv3.WithPrefix())
	require.NoError(t, err)
	require.Empty(t, resp.Kvs)
	r := &recorder{history: map[string][]recorded{}, changed: make(chan struct{})}
	wctx, cancel := context.WithCancel(ctx)
	wch := cli.Watch(wctx, layout.Assignments(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wr := range wch {
			r.mu.Lock()
			if err := wr.Err(); err != nil && wctx.Err() == nil {
				r.watchErr = err
			}
			for _, ev := range wr.Events {
				ch := string(ev.Kv.Key[len(layout.Assignments()):])
				if ev.Type == clientv3.EventTypeDelete {
					r.deletes = append(r.deletes, ch)
					continue
				}
				a, err := cluster.Decode[cluster.Assignment](string(ev.Kv.Key), ev.Kv.Value)
				if err != nil {
					r.watchErr = err
				}
				r.history[ch] = append(r.history[ch], recorded{rev: ev.Kv.ModRevision, version: ev.Kv.Version, a: a})
				r.lastRev = ev.Kv.ModRevision
			}
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *recorder) waitRev(t *testing.T, ctx context.Context, rev int64) {
	t.Helper()
	for {
		r.mu.Lock()
		last, changed := r.lastRev, r.changed
		r.mu.Unlock()
		if last >= rev {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("recorder at %d, waiting for %d: %v", last, rev, ctx.Err())
		}
	}
}

// check verifies, per channel, the history of its assignment: created at
// term 1; then each write either confirms (same owner and term,
// Assigning → Assigned) or moves (term+1, Assigning, the previous owner
// last in Previous; the owner is another one, or the same one for a
// migration). So terms never decrease or repeat,
// and a term is bumped exactly once per move.
func (r *recorder) check(t *testing.T) (moves int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NoError(t, r.watchErr)
	require.Empty(t, r.deletes, "assignments are never deleted")
	for ch, h := range r.history {
		require.EqualValues(t, 1, h[0].version, "%s: first write creates", ch)
		require.EqualValues(t, 1, h[0].a.Term, "%s: created at term 1", ch)
		require.Equal(t, cluster.Assigning, h[0].a.State, "%s", ch)
		for i := 1; i < len(h); i++ {
			prev, cur := h[i-1].a, h[i].a
			require.Equal(t, ch, cur.Channel)
			if cur.Node == prev.Node && cur.Term == prev.Term {
				require.Equal(t, prev.Term, cur.Term, "%s: write %d keeps the owner but changes the term: %+v -> %+v", ch, i, prev, cur)
				require.Equal(t, cluster.Assigning, prev.State, "%s: write %d confirms an assigned channel", ch, i)
				require.Equal(t, cluster.Assigned, cur.State, "%s: write %d", ch, i)
				require.Empty(t, cur.Previous)
				continue
			}
			moves++
			require.Equal(t, prev.Term+1, cur.Term, "%s: write %d moves %s@%d -> %s@%d", ch, i, prev.Node, prev.Term, cur.Node, cur.Term)
			require.Equal(t, cluster.Assigning, cur.State, "%s: write %d", ch, i)
			require.NotEmpty(t, cur.Previous, "%s: write %d", ch, i)
			require.Equal(t, cluster.Owner{Node: prev.Node, Term: prev.Term}, cur.Previous[len(cur.Previous)-1], "%s: write %d", ch, i)
			require.LessOrEqual(t, len(cur.Previous), maxPrevious)
		}
	}
	return moves
}

// writes returns the history of ch.
func (r *recorder) writes(ch string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.history[ch])
}

// ---- metrics

func gather(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

var errCrashed = errors.New("test: crashed")

func channelNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("ch%02d", i)
	}
	return out
}

func itoa(i int) string { return fmt.Sprint(i) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// proxy forwards TCP connections to an etcd endpoint until cut, which
// makes etcd unreachable for the clients that use it, like a partition.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cutted bool
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, endpoint string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: strings.TrimPrefix(endpoint, "http://")}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.cutted {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(in, out)
		go pipe(out, in)
	}
}

// cut closes the listener and every connection; idempotent.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cutted {
		return
	}
	p.cutted = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
