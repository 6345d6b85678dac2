package coordinator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cluster"
)

// livenessServer is a simulated node process's API port: it serves the
// liveness stream as the node package does, with heartbeats when asked
// if beating. crash closes its listener and every connection, as the death
// of a process does; stall makes it stop answering (the kernel still
// accepts connections, nothing answers them) and stop heartbeating while
// the streams it holds stay open; cut ends the streams it holds from its
// side, the process still running.
type livenessServer struct {
	id  string
	srv *http.Server
	ln  net.Listener
	// beating: it heartbeats when asked (a node that publishes its TTL).
	beating atomic.Bool

	mu      sync.Mutex
	running chan struct{} // closed while not stalled
	cutting chan struct{} // closed and replaced by cut
	served  atomic.Int64  // streams established
	beats   atomic.Int64  // heartbeats written
	// lastBeat is when the last heartbeat was written (UnixNano): a
	// silence is counted from it, not from the stall that follows.
	lastBeat atomic.Int64
}

func startLivenessServer(t *testing.T, id string) *livenessServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return startLivenessServerOn(t, id, ln)
}

// startLivenessServerOn serves on ln (a TLS listener, say).
func startLivenessServerOn(t *testing.T, id string, ln net.Listener) *livenessServer {
	t.Helper()
	l := &livenessServer{id: id, ln: ln, running: make(chan struct{}), cutting: make(chan struct{})}
	close(l.running)
	mux := http.NewServeMux()
	mux.HandleFunc(cluster.LivenessPath, l.handle)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = l.srv.Serve(ln) }()
	t.Cleanup(l.crash)
	return l
}

func (l *livenessServer) addr() string { return l.ln.Addr().String() }

func (l *livenessServer) handle(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	running, cutting := l.running, l.cutting
	l.mu.Unlock()
	select {
	case <-running:
	case <-r.Context().Done():
		return
	}
	if r.URL.Query().Get("node") != l.id {
		http.Error(w, "not this node", http.StatusNotFound)
		return
	}
	interval, _ := time.ParseDuration(r.URL.Query().Get(cluster.LivenessHeartbeat))
	var beat <-chan time.Time
	if interval > 0 && l.beating.Load() {
		w.Header().Set(cluster.LivenessHeartbeatHeader, interval.String())
		t := time.NewTicker(interval)
		defer t.Stop()
		beat = t.C
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_, _ = fmt.Fprintln(w, l.id)
	_ = rc.Flush()
	l.served.Add(1)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-cutting:
			return
		case <-beat:
			l.mu.Lock()
			running := l.running
			l.mu.Unlock()
			select {
			case <-running:
			default:
				continue // stalled: silent
			}
			if _, err := w.Write([]byte("\n")); err != nil || rc.Flush() != nil {
				return
			}
			l.lastBeat.Store(time.Now().UnixNano())
			l.beats.Add(1)
		}
	}
}

func (l *livenessServer) crash() { _ = l.srv.Close() }

func (l *livenessServer) stall() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running = make(chan struct{})
}

func (l *livenessServer) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.running)
}

func (l *livenessServer) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.cutting)
	l.cutting = make(chan struct{})
}

// listening gives a simulated node a liveness server, registered as its
// address.
func listening() nodeOpt {
	return func(n *simNode) {
		n.live = startLivenessServer(n.e.t, n.id)
		n.addr = n.live.addr()
	}
}

// heartbeating gives a simulated node a liveness server that heartbeats
// when asked, and a lease of ttl seconds it publishes, as a node of this
// version does.
func heartbeating(ttl int) nodeOpt {
	return func(n *simNode) {
		listening()(n)
		n.live.beating.Store(true)
		n.ttl, n.publishTTL = ttl, true
	}
}

// dialLog counts the liveness connections a coordinator makes, by address
// and outcome, and can refuse to connect some addresses (a timeout).
type dialLog struct {
	mu      sync.Mutex
	ok      map[string]int
	timeout map[string]bool
	changed chan struct{}
}

func newDialLog() *dialLog {
	return &dialLog{ok: map[string]int{}, timeout: map[string]bool{}, changed: make(chan struct{})}
}

func (d *dialLog) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	timeout := d.timeout[addr]
	d.mu.Unlock()
	var conn net.Conn
	err := error(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ETIMEDOUT})
	if !timeout {
		conn, err = dialer(time.Second)(ctx, addr)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		d.ok[addr]++
	}
	close(d.changed)
	d.changed = make(chan struct{})
	return conn, err
}

func (d *dialLog) setTimeout(addr string, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timeout[addr] = on
}

// waitOK waits until addr was connected to more than n times.
func (d *dialLog) waitOK(t *testing.T, ctx context.Context, addr string, n int) {
	t.Helper()
	for {
		d.mu.Lock()
		got, changed := d.ok[addr], d.changed
		d.mu.Unlock()
		if got > n {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%d connections to %s, waiting for more than %d: %v", got, addr, n, ctx.Err())
		}
	}
}

func (d *dialLog) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ok[addr]
}

// waitGauge waits until the named metric equals want (polled every 10ms
// until the env's deadline: a condition, not a bound).
func (e *env) waitGauge(reg *prometheus.Registry, name string, want float64, labels ...string) {
	e.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if gather(e.t, reg, name, labels...) == want {
			return
		}
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			e.t.Fatalf("%s stays %v, waiting for %v", name, gather(e.t, reg, name, labels...), want)
		}
	}
}

func ownedBy(s cluster.Snapshot, channels []string, node string) map[string]int64 {
	out := map[string]int64{}
	for _, ch := range channels {
		if a := s.Assignments[ch].Value; a.Node == node {
			out[ch] = a.Term
		}
	}
	return out
}

// A crashed node's channels move as soon as its address refuses
// connections, while its lease still lives (here it never expires: the
// simulated node keeps renewing it): reason owner_dead, term+1, Detected
// set. It gets no channel until it registers again, and then does.
func TestDetectCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(6)...)
	n1 := e.startNode("n1", listening())
	e.startNode("n2", listening())
	e.startNode("n3", listening())
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	reg := prometheus.NewRegistry()
	e.startCoordinator("c1", Config{Registerer: reg}, nil)
	s := e.waitSettled()
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 3)
	lost := ownedBy(s, e.channels.get(), "n1")
	require.Len(t, lost, 2)

	n1.live.crash()
	s = e.waitFor("n1's channels moved", func(s cluster.Snapshot) bool {
		return len(ownedBy(s, e.channels.get(), "n1")) == 0 && e.settled(s)
	})
	_, registered := s.Nodes["n1"]
	require.True(t, registered, "n1's lease still lives")
	e.syncRecorder(s)
	for ch, term := range lost {
		a := s.Assignments[ch].Value
		require.Equal(t, term+1, a.Term, ch)
		h := e.rec.writes(ch)
		move := h[len(h)-2].a
		require.Equal(t, a.Node, move.Node, ch)
		require.Equal(t, cluster.Assigning, move.State, ch)
		require.False(t, move.Detected.IsZero(), "%s: moved by detection, Detected set", ch)
	}
	require.EqualValues(t, 2, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "owner_dead"))
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "owner_lost"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_dead_nodes_total"))

	// A new channel does not go to the dead registration.
	e.channels.add("x")
	s = e.waitSettled()
	require.NotEqual(t, "n1", s.Assignments["x"].Value.Node)

	// Registered again (a restarted process), n1 is live again.
	n1.live = startLivenessServer(t, "n1")
	n1.addr = n1.live.addr()
	n1.restart(t)
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 3)
	e.channels.add("y", "z")
	s = e.waitSettled()
	require.Contains(t, []string{s.Assignments["y"].Value.Node, s.Assignments["z"].Value.Node}, "n1")
	e.check(s)
}

// A stalled process (SIGSTOP, a long GC pause) keeps its channels however
// its liveness stream fares: here the stream is cut while the process is
// stalled, the coordinator's probe connects (the kernel accepts) and gets
// no answer, and nothing moves; when the process runs again, the stream is
// back.
func TestDetectStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(6)...)
	n1 := e.startNode("n1", listening())
	e.startNode("n2", listening())
	e.startNode("n3", listening())
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	reg := prometheus.NewRegistry()
	dials := newDialLog()
	r := e.startCoordinator("c1", Config{Registerer: reg}, func(c *Coordinator) { c.hooks.dial = dials.dial })
	before := e.waitSettled()
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 3)

	n1.live.stall()
	connected := dials.count(n1.addr)
	n1.live.cut()
	// The probe after the cut connects; its request is not answered.
	dials.waitOK(t, e.ctx, n1.addr, connected)
	r.waitPasses(t, e.ctx, 3)
	after, err := cluster.Load(e.ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	for _, ch := range e.channels.get() {
		require.Equal(t, before.Assignments[ch], after.Assignments[ch], "%s: untouched by a stall", ch)
	}
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_dead_nodes_total"))
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_suspect_nodes"), "a connection that is not answered proves nothing")

	// Running again, it answers the waiting probe: the new stream.
	served := n1.live.served.Load()
	n1.live.resume()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n1.live.served.Load() == served {
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			t.Fatal("the waiting probe was never answered")
		}
	}
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 3)
	e.check(e.waitSettled())
}

// A node whose address times out (a partition) is suspect: it keeps its
// channels, new ones go elsewhere; once a stream is back, it is not
// suspect any more.
func TestDetectSuspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(4)...)
	n1 := e.startNode("n1", listening())
	e.startNode("n2", listening())
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	reg := prometheus.NewRegistry()
	dials := newDialLog()
	r := e.startCoordinator("c1", Config{Registerer: reg}, func(c *Coordinator) { c.hooks.dial = dials.dial })
	before := e.waitSettled()
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 2)

	dials.setTimeout(n1.addr, true)
	n1.live.cut()
	e.waitGauge(reg, "streamwal_coordinator_suspect_nodes", 1)
	e.channels.add("x", "y")
	s := e.waitSettled()
	require.Equal(t, "n2", s.Assignments["x"].Value.Node)
	require.Equal(t, "n2", s.Assignments["y"].Value.Node)
	r.waitPasses(t, e.ctx, 2)
	after, err := cluster.Load(e.ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	for _, ch := range channelNames(4) {
		require.Equal(t, before.Assignments[ch], after.Assignments[ch], "%s: a suspect keeps its channels", ch)
	}

	dials.setTimeout(n1.addr, false)
	e.waitGauge(reg, "streamwal_coordinator_suspect_nodes", 0)
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 2)
	e.check(s)
}

// A leader whose process dies is replaced as soon as the death of the
// node in its process is confirmed: the candidate behind it deletes its
// election key, long before its session's lease (30 s here) would expire.
func TestDetectDeadLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(4)...)
	n1 := e.startNode("n1", listening())
	e.startNode("n2", listening())
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := e.startCoordinator("n1", Config{Node: "n1", SessionTTL: 30 * time.Second, Registerer: regA}, nil)
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	require.Same(t, a, waitLeader(t, ctx, a))
	b := e.startCoordinator("n2", Config{Node: "n2", SessionTTL: 30 * time.Second, Registerer: regB}, nil)
	e.waitCandidates(2)
	s := e.waitSettled()
	lost := ownedBy(s, e.channels.get(), "n1")
	require.NotEmpty(t, lost)

	// The process of n1 dies: no resign, no revoke, its node's address
	// refuses connections.
	a.c.hooks.abandon.Store(true)
	a.stop(t)
	n1.live.crash()
	require.Same(t, b, waitLeader(t, e.ctx, b))
	require.EqualValues(t, 1, gather(t, regB, "streamwal_coordinator_dead_candidates_total"))
	s = e.waitFor("n1's channels moved", func(s cluster.Snapshot) bool {
		return len(ownedBy(s, e.channels.get(), "n1")) == 0 && e.settled(s)
	})
	require.EqualValues(t, len(lost), gather(t, regB, "streamwal_coordinator_moves_total", "reason", "owner_dead"))
	e.check(s)
}

// A node that heartbeats and stops (here its liveness server stalls; its
// lease, renewed by the test's session, lives on) is silent once nothing
// came for its TTL and a heartbeat: its channels move (owner_silent,
// term+1, Detected set), it gets no new one, and it is still registered.
// When it speaks again it is live again; its registration outliving the
// verdict by a TTL and a second makes the verdict premature (counted): at
// a 1 s TTL etcd cannot tell a live lease from an expired one, and a node
// cut off from the leader only looks stalled.
func TestDetectSilence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, channelNames(6)...)
	n1 := e.startNode("n1", heartbeating(1))
	e.startNode("n2", heartbeating(1))
	e.startNode("n3", heartbeating(1))
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	reg := prometheus.NewRegistry()
	e.startCoordinator("c1", Config{Registerer: reg}, nil)
	s := e.waitSettled()
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 3)
	lost := ownedBy(s, e.channels.get(), "n1")
	require.Len(t, lost, 2)
	for n1.live.beats.Load() < 3 {
		time.Sleep(5 * time.Millisecond) // a condition, polled
	}

	stalled := time.Now()
	n1.live.stall()
	s = e.waitFor("n1's channels moved", func(s cluster.Snapshot) bool {
		return len(ownedBy(s, e.channels.get(), "n1")) == 0 && e.settled(s)
	})
	moved := time.Since(stalled)
	require.Contains(t, s.Nodes, "n1", "n1's lease still lives")
	e.syncRecorder(s)
	for ch, term := range lost {
		a := s.Assignments[ch].Value
		require.Equal(t, term+1, a.Term, ch)
		h := e.rec.writes(ch)
		move := h[len(h)-2].a
		require.Equal(t, cluster.Assigning, move.State, ch)
		require.False(t, move.Detected.IsZero(), "%s: moved by detection, Detected set", ch)
		// Silent from its last heartbeat, which may precede the stall.
		lastBeat := time.Unix(0, n1.live.lastBeat.Load())
		require.GreaterOrEqual(t, move.Detected.Sub(lastBeat), testTTL, "%s: not before the TTL after its last heartbeat", ch)
		t.Logf("%s: stalled → verdict %s, → move %s", ch, move.Detected.Sub(stalled), move.Since.Sub(stalled))
	}
	t.Logf("stalled → moved: %s (lease TTL %s)", moved.Round(time.Millisecond), testTTL)
	require.EqualValues(t, 2, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "owner_silent"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_silent_nodes_total", "outcome", "silent"))
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_dead_nodes_total"))
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 2)

	// No new channel goes to a silent node.
	e.channels.add("x")
	s = e.waitSettled()
	require.NotEqual(t, "n1", s.Assignments["x"].Value.Node)

	// Running again, it is heard and live; its lease never expired: the
	// verdict was premature.
	n1.live.resume()
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 3)
	e.waitGauge(reg, "streamwal_coordinator_premature_silences_total", 1)
	e.channels.add("y", "z")
	s = e.waitSettled()
	require.Contains(t, []string{s.Assignments["y"].Value.Node, s.Assignments["z"].Value.Node}, "n1")
	e.check(s)
}

// At a TTL of two seconds or more, etcd says how long a live lease has
// left: a node silent on its stream whose lease has a second or more left
// was renewed by its process, which runs (only its path to the leader is
// broken, or the leader did not read). It keeps its channels (counted
// lease_alive) and is judged again when that time has passed.
func TestDetectSilenceLeaseAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, channelNames(4)...)
	n1 := e.startNode("n1", heartbeating(3))
	e.startNode("n2", heartbeating(3))
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	reg := prometheus.NewRegistry()
	r := e.startCoordinator("c1", Config{Registerer: reg}, nil)
	before := e.waitSettled()
	e.waitGauge(reg, "streamwal_coordinator_liveness_streams", 2)

	n1.live.stall()
	e.waitGauge(reg, "streamwal_coordinator_silent_nodes_total", 1, "outcome", "lease_alive")
	r.waitPasses(t, e.ctx, 2)
	after, err := cluster.Load(e.ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	for _, ch := range e.channels.get() {
		require.Equal(t, before.Assignments[ch], after.Assignments[ch], "%s: a silent node whose lease lives keeps it", ch)
	}
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_silent_nodes_total", "outcome", "silent"))
	n1.live.resume()
	e.check(e.waitSettled())
}
