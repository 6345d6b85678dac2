package coordinator

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
)

// TestInitialPlacement pins the first placement: 12 channels on 3 nodes,
// balanced (4 each: least loaded, ties by ID), all confirmed Assigned at
// term 1, and the metrics and leadership reporting around it.
func TestInitialPlacement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(12)...)
	for _, id := range []string{"n1", "n2", "n3"} {
		e.startNode(id)
	}
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	reg := prometheus.NewRegistry()
	start := time.Now()
	r := e.startCoordinator("c1", Config{Registerer: reg}, nil)
	waitLeader(t, e.ctx, r)
	s := e.waitSettled()
	t.Logf("12 channels placed and confirmed in %s", time.Since(start))

	require.Equal(t, map[string]int{"n1": 4, "n2": 4, "n3": 4}, owners(s, e.channels.get()))
	for _, ch := range e.channels.get() {
		require.EqualValues(t, 1, s.Assignments[ch].Value.Term)
		require.Empty(t, s.Assignments[ch].Value.Previous)
	}
	require.ErrorIs(t, r.c.Run(e.ctx), ErrRunning)

	r.waitPasses(t, e.ctx, 2)
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_leader"))
	require.EqualValues(t, 12, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "new"))
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "owner_lost"))
	require.EqualValues(t, 0, gather(t, reg, "streamwal_coordinator_assigning_channels"))
	e.check(s)

	r.stop(t)
	require.False(t, r.c.IsLeader())
	require.EqualValues(t, -1, gather(t, reg, "streamwal_coordinator_leader"), "unregistered when Run returns")
}

// TestLeaseExpiry pins pitfall 10: a node whose keep-alives stop loses its
// channels once its lease expires, within TTL + ReconcileInterval + slack;
// each moves exactly once (term 2) naming the old owner in Previous, and
// the new owners' reports confirm them.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(6)...)
	n1 := e.startNode("n1")
	e.startNode("n2")
	e.startNode("n3")
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	e.startCoordinator("c1", Config{}, nil)
	s := e.waitSettled()
	var lost []string
	for _, ch := range e.channels.get() {
		if s.Assignments[ch].Value.Node == "n1" {
			lost = append(lost, ch)
		}
	}
	require.Len(t, lost, 2)

	start := time.Now()
	n1.kill()
	e.waitFor("n1's channels reassigned", func(s cluster.Snapshot) bool {
		for _, ch := range lost {
			if s.Assignments[ch].Value.Node == "n1" {
				return false
			}
		}
		return true
	})
	moved := time.Since(start)
	s = e.waitSettled()
	settled := time.Since(start)
	t.Logf("lease expiry (TTL %s): channels reassigned after %s, confirmed after %s", testTTL, moved, settled)
	require.Less(t, moved, testTTL+testInterval+2*time.Second)
	e.syncRecorder(s)

	for _, ch := range lost {
		a := s.Assignments[ch].Value
		require.EqualValues(t, 2, a.Term, ch)
		require.NotEqual(t, "n1", a.Node)
		h := e.rec.writes(ch)
		require.Len(t, h, 4, "%s: create, confirm, move, confirm", ch)
		require.Equal(t, []cluster.Owner{{Node: "n1", Term: 1}}, h[2].a.Previous)
		require.Empty(t, h[3].a.Previous, "cleared when the new owner confirms")
	}
	e.check(s)
}

// TestRestartSameID pins pitfall 15: a node that re-registers with the
// same ID before its old lease expired keeps its channels (nothing is
// written, even after the old lease is gone); one that returns after its
// key was gone finds its channels moved once and does not get them back.
func TestRestartSameID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, channelNames(6)...)
	n1 := e.startNode("n1")
	n2 := e.startNode("n2")
	e.startNode("n3")
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	r := e.startCoordinator("c1", Config{}, nil)
	before := e.waitSettled()

	old := n1.restart(t)
	e.waitLeaseGone(old)
	r.waitPasses(t, e.ctx, 3)
	after, err := cluster.Load(e.ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	require.NotEqual(t, int64(old), after.Nodes["n1"].Lease, "registered under the new lease")
	for _, ch := range e.channels.get() {
		require.Equal(t, before.Assignments[ch], after.Assignments[ch], "%s: untouched by a restart before expiry", ch)
	}

	var lost []string
	for _, ch := range e.channels.get() {
		if after.Assignments[ch].Value.Node == "n2" {
			lost = append(lost, ch)
		}
	}
	n2.kill()
	e.waitFor("n2's channels reassigned", func(s cluster.Snapshot) bool {
		_, registered := s.Nodes["n2"]
		return !registered && e.settled(s)
	})
	e.startNode("n2")
	e.waitFor("n2 back", func(s cluster.Snapshot) bool { _, ok := s.Nodes["n2"]; return ok })
	r.waitPasses(t, e.ctx, 2)
	s := e.waitSettled()
	require.Zero(t, owners(s, e.channels.get())["n2"], "no rebalance back to a returning node")
	for _, ch := range lost {
		require.EqualValues(t, 2, s.Assignments[ch].Value.Term, ch)
	}
	e.check(s)
}

// TestMoveDrainUndrain pins the operator requests: a move to a node and to
// "" (least loaded other), an unplaceable move dropped, a drain emptying
// a node and keeping it empty, an undrain making it eligible again.
func TestMoveDrainUndrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, "a", "b", "c", "d", "e", "f")
	for _, id := range []string{"n1", "n2", "n3"} {
		e.startNode(id)
	}
	e.waitFor("3 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 3 })
	reg := prometheus.NewRegistry()
	e.startCoordinator("c1", Config{Registerer: reg}, nil)
	s := e.waitSettled()
	// a,d on n1; b,e on n2; c,f on n3.
	require.Equal(t, "n1", s.Assignments["a"].Value.Node)

	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, "a", "n3"))
	s = e.waitFor("a moved to n3", func(s cluster.Snapshot) bool {
		return s.Assignments["a"].Value.Node == "n3" && len(s.Moves) == 0 && e.settled(s)
	})
	require.EqualValues(t, 2, s.Assignments["a"].Value.Term)

	// n1 has 1 (d), n2 2, n3 3: "" goes to n1.
	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, "c", ""))
	s = e.waitFor("c moved", func(s cluster.Snapshot) bool {
		return s.Assignments["c"].Value.Node != "n3" && len(s.Moves) == 0 && e.settled(s)
	})
	require.Equal(t, "n1", s.Assignments["c"].Value.Node)
	require.EqualValues(t, 2, s.Assignments["c"].Value.Term)

	before := s.Assignments["b"]
	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, "b", "ghost"))
	resp, err := e.cli.Get(e.ctx, e.layout.Move("b"))
	require.NoError(t, err)
	if len(resp.Kvs) == 1 {
		put := resp.Kvs[0].ModRevision
		e.waitFor("unplaceable move dropped", func(s cluster.Snapshot) bool { return len(s.Moves) == 0 && s.Revision > put })
	} // else the leader dropped it already
	now, err := cluster.Load(e.ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	require.Empty(t, now.Moves)
	require.Equal(t, before, now.Assignments["b"])

	require.NoError(t, RequestDrain(e.ctx, e.cli, e.layout, "n1"))
	require.NoError(t, RequestDrain(e.ctx, e.cli, e.layout, "n1"), "idempotent")
	s = e.waitFor("n1 drained", func(s cluster.Snapshot) bool {
		return len(s.Drains) == 1 && owners(s, e.channels.get())["n1"] == 0 && e.settled(s)
	})
	e.channels.add("g")
	s = e.waitFor("g placed", e.settled)
	require.NotEqual(t, "n1", s.Assignments["g"].Value.Node, "a drained node gets nothing")

	require.NoError(t, Undrain(e.ctx, e.cli, e.layout, "n1"))
	e.waitFor("undrained", func(s cluster.Snapshot) bool { return len(s.Drains) == 0 })
	e.channels.add("h")
	s = e.waitFor("h placed", e.settled)
	require.Equal(t, "n1", s.Assignments["h"].Value.Node, "the undrained, empty node is the least loaded")

	require.EqualValues(t, 2, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "request"))
	require.EqualValues(t, 2, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "drain"))
	e.check(s)
}

// TestOpenTimeout pins pitfall 16 (Milvus #50423): a channel whose owner
// reports an open error, or never reports, is moved to another live node
// after OpenTimeout (not before), term+1.
func TestOpenTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, "a", "b", "c", "d")
	e.startNode("n1", behaving(func(ch string) (bool, string) {
		switch ch {
		case "a":
			return true, "disk on fire"
		case "c":
			return false, "" // never opens
		}
		return true, ""
	}))
	e.startNode("n2")
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	reg := prometheus.NewRegistry()
	const timeout = time.Second
	e.startCoordinator("c1", Config{Registerer: reg, OpenTimeout: timeout}, nil)
	s := e.waitFor("a's open error reported", func(s cluster.Snapshot) bool { return s.Opened["a"].Value.Error != "" })
	require.Equal(t, cluster.Assigning, s.Assignments["a"].Value.State, "an open error is not a confirmation")
	s = e.waitSettled()
	e.syncRecorder(s)
	for _, ch := range []string{"a", "c"} {
		a := s.Assignments[ch].Value
		require.Equal(t, "n2", a.Node, ch)
		require.EqualValues(t, 2, a.Term, ch)
		h := e.rec.writes(ch)
		require.GreaterOrEqual(t, h[1].a.Since.Sub(h[0].a.Since), timeout, "%s: not moved before the timeout", ch)
		t.Logf("%s moved %s after its assignment (timeout %s)", ch, h[1].a.Since.Sub(h[0].a.Since), timeout)
	}
	require.EqualValues(t, 2, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "open_timeout"))
	e.check(s)
}

// TestFailover pins pitfall 12: a leader that crashes right after writing
// an Assigning (before the node's report), and one that crashes after the
// report but before writing Assigned: the next leader finishes the move
// without a second term bump.
func TestFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 25*time.Second, channelNames(4)...)
	n1 := e.startNode("n1", holding())
	n2 := e.startNode("n2", holding())
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })

	// A crashes after its first write: an Assigning nobody has opened.
	crashA := make(chan struct{})
	var crashedA atomic.Bool
	var first change
	ra := e.startCoordinator("A", Config{}, func(c *Coordinator) {
		c.hooks.beforeCommit = func(fence, change) error {
			if crashedA.Load() {
				return errCrashed
			}
			return nil
		}
		c.hooks.afterCommit = func(_ fence, ch change, _ int64, applied bool, _ error) {
			if applied && crashedA.CompareAndSwap(false, true) {
				first = ch
				c.hooks.abandon.Store(true)
				close(crashA)
			}
		}
	})
	waitLeader(t, e.ctx, ra)
	// B crashes when it is about to confirm the channel moved in part 2.
	var armB atomic.Bool
	var crashedB atomic.Bool
	crashB := make(chan struct{})
	rb := e.startCoordinator("B", Config{}, func(c *Coordinator) {
		c.hooks.beforeCommit = func(_ fence, ch change) error {
			if crashedB.Load() {
				return errCrashed
			}
			if armB.Load() && ch.kind == changeConfirm {
				crashedB.Store(true)
				c.hooks.abandon.Store(true)
				close(crashB)
				return errCrashed
			}
			return nil
		}
	})
	select {
	case <-crashA:
	case <-e.ctx.Done():
		t.Fatal("A wrote nothing")
	}
	crashAt := time.Now()
	ra.stop(t)
	require.Equal(t, changeAssign, first.kind)
	waitLeader(t, e.ctx, rb)
	t.Logf("part 1: crashed leader replaced after %s (TTL %s)", time.Since(crashAt), testTTL)
	s := e.waitFor("B placed every channel", func(s cluster.Snapshot) bool { return len(s.Assignments) == 4 })
	require.Equal(t, string(cluster.Encode(first.next)), string(cluster.Encode(s.Assignments[first.channel].Value)),
		"B keeps A's pending assignment as written")
	n1.setHold(false)
	n2.setHold(false)
	s = e.waitSettled()
	t.Logf("part 1: all channels confirmed %s after the crash", time.Since(crashAt))
	for _, ch := range e.channels.get() {
		require.EqualValues(t, 1, s.Assignments[ch].Value.Term, ch)
	}

	// Part 2: a move; the node reports it; B crashes before confirming.
	rc := e.startCoordinator("C", Config{}, nil)
	ch := first.channel
	from := s.Assignments[ch].Value.Node
	to := map[string]string{"n1": "n2", "n2": "n1"}[from]
	armB.Store(true)
	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, ch, to))
	select {
	case <-crashB:
	case <-e.ctx.Done():
		t.Fatal("B never tried to confirm the move")
	}
	crashAt = time.Now()
	rb.stop(t)
	waitLeader(t, e.ctx, rc)
	s = e.waitSettled()
	t.Logf("part 2: move confirmed by the next leader %s after the crash", time.Since(crashAt))
	require.Equal(t, to, s.Assignments[ch].Value.Node)
	require.EqualValues(t, 2, s.Assignments[ch].Value.Term)
	e.check(s)
}

// TestCleanStepDown pins Run's teardown: it resigns and revokes, so a
// standby takes over well within the TTL, and nothing of the old leader
// stays in the election. The TTL is longer than the whole test may take,
// so a standby that waited for the lease cannot pass however loaded the
// machine is, and one that did not never races a bound.
func TestCleanStepDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, "a")
	e.startNode("n1")
	cfg := Config{SessionTTL: time.Minute}
	ra := e.startCoordinator("A", cfg, nil)
	waitLeader(t, e.ctx, ra)
	rb := e.startCoordinator("B", cfg, nil)
	e.waitSettled()
	e.waitCandidates(2)

	start := time.Now()
	ra.stop(t)
	waitLeader(t, e.ctx, rb)
	took := time.Since(start)
	t.Logf("clean step-down: standby leads after %s (TTL %s)", took, cfg.SessionTTL)
	require.Less(t, took, cfg.SessionTTL)
	resp, err := e.cli.Get(e.ctx, e.layout.Election(), clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "A's election key is gone")
	// The election is concurrency.Election's: its Leader reads it.
	sess, err := concurrency.NewSession(e.cli, concurrency.WithTTL(testTTLSecond))
	require.NoError(t, err)
	defer func() { _ = sess.Close() }()
	lead, err := concurrency.NewElection(sess, e.layout.Election()).Leader(e.ctx)
	require.NoError(t, err)
	require.Equal(t, "B", string(lead.Kvs[0].Value))
	for _, kv := range resp.Kvs {
		ttl, err := e.cli.TimeToLive(e.ctx, clientv3.LeaseID(kv.Lease))
		require.NoError(t, err)
		require.Positive(t, ttl.TTL, "the remaining key is B's, alive")
	}
}

// commitLog collects every write any coordinator of a test sent.
type commitLog struct {
	mu      sync.Mutex
	commits []commit
}

type commit struct {
	fence   int64
	rev     int64
	ch      change
	applied bool
	err     error
}

func (l *commitLog) hook(f fence, ch change, rev int64, applied bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits = append(l.commits, commit{fence: f.rev, rev: rev, ch: ch, applied: applied, err: err})
}

func (l *commitLog) get() []commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.commits)
}

// checkFences verifies that applied writes, in etcd order, carry
// non-decreasing fences: two leaders' writes never interleave.
func (l *commitLog) checkFences(t *testing.T) (leaders, applied, deposed int) {
	t.Helper()
	var ok []commit
	for _, c := range l.get() {
		if c.applied {
			ok = append(ok, c)
		} else if c.err != nil && c.ch.kind != 0 && isDeposed(c.err) {
			deposed++
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].rev < ok[j].rev })
	fences := map[int64]bool{}
	for i, c := range ok {
		fences[c.fence] = true
		if i > 0 {
			require.GreaterOrEqual(t, c.fence, ok[i-1].fence, "write at %d by leader %d after one by leader %d", c.rev, c.fence, ok[i-1].fence)
		}
	}
	return len(fences), len(ok), deposed
}

// TestDeposedLeader pins pitfall 13: a leader whose session lease is
// revoked while its reconcile loop runs has its next write refused by the
// leader condition (nothing applied); the cluster still converges, the
// move bumping the term once.
func TestDeposedLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, "a", "b", "c", "d")
	e.startNode("n1")
	e.startNode("n2")
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	var log commitLog
	var armed atomic.Bool
	var revoked atomic.Int64
	var revokedAt atomic.Int64
	setup := func(c *Coordinator) {
		c.hooks.beforeCommit = func(f fence, ch change) error {
			if ch.channel != "a" || ch.moveRev == 0 || !armed.CompareAndSwap(true, false) {
				return nil
			}
			// Revoke this leader's lease under its running loop, then let
			// it write.
			resp, err := e.cli.Get(e.ctx, f.key)
			if err != nil || len(resp.Kvs) != 1 {
				t.Errorf("election key %s: %v", f.key, err)
				return nil
			}
			if _, err := e.cli.Revoke(e.ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Errorf("revoke: %v", err)
			}
			revoked.Store(f.rev)
			revokedAt.Store(time.Now().UnixNano())
			return nil
		}
		c.hooks.afterCommit = log.hook
	}
	ra := e.startCoordinator("A", Config{}, setup)
	waitLeader(t, e.ctx, ra)
	rb := e.startCoordinator("B", Config{}, setup)
	s := e.waitSettled()
	from := s.Assignments["a"].Value.Node
	to := map[string]string{"n1": "n2", "n2": "n1"}[from]

	armed.Store(true)
	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, "a", to))
	s = e.waitFor("a moved", func(s cluster.Snapshot) bool {
		return s.Assignments["a"].Value.Node == to && e.settled(s)
	})
	waitLeader(t, e.ctx, ra, rb)
	t.Logf("deposed leader: a leader with a new fence finished the move %s after the revoke",
		time.Since(time.Unix(0, revokedAt.Load())))
	require.EqualValues(t, 2, s.Assignments["a"].Value.Term)

	var stale []commit
	for _, c := range log.get() {
		if c.fence == revoked.Load() && c.ch.channel == "a" && c.ch.moveRev != 0 {
			stale = append(stale, c)
		}
	}
	require.NotEmpty(t, stale, "the deposed leader tried to write")
	for _, c := range stale {
		require.False(t, c.applied, "write of the deposed leader applied: %+v", c)
	}
	require.True(t, isDeposed(stale[0].err), "refused by the leader condition: %v", stale[0].err)
	leaders, applied, deposed := log.checkFences(t)
	t.Logf("%d leaders applied %d writes; %d refused as deposed", leaders, applied, deposed)
	e.check(s)
}

// TestRace pins the invariants under churn: three coordinators, nodes
// dying (lease revoked or left to expire) and joining (new IDs and
// returning ones), leaders deposed by revoking their leases. Every
// assignment value ever written is recorded: per channel, terms only grow,
// by exactly one per change of owner, and applied writes of different
// leaders never interleave.
func TestRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 45*time.Second, channelNames(12)...)
	var log commitLog
	setup := func(c *Coordinator) { c.hooks.afterCommit = log.hook }
	var coords []*runner
	for _, id := range []string{"c1", "c2", "c3"} {
		coords = append(coords, e.startCoordinator(id, Config{}, setup))
	}
	live := []*simNode{e.startNode("n1"), e.startNode("n2"), e.startNode("n3"), e.startNode("n4")}
	waitLeader(t, e.ctx, coords...)
	e.waitSettled()

	start := time.Now()
	var expiring []clientv3.LeaseID
	next := 5
	deposed := 0
	for i := range 10 {
		victim := live[0]
		live = live[1:]
		if i%3 == 2 {
			expiring = append(expiring, victim.kill())
		} else {
			victim.revoke()
		}
		id := victim.id
		if i%4 != 3 {
			id = "n" + itoa(next)
			next++
		}
		live = append(live, e.startNode(id))
		if i%3 == 1 {
			// Depose the leader: revoke the lease behind the first
			// election key while its loop runs.
			resp, err := e.cli.Get(e.ctx, e.layout.Election(), clientv3.WithFirstCreate()...)
			require.NoError(t, err)
			if len(resp.Kvs) == 1 {
				_, err = e.cli.Revoke(e.ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
				require.NoError(t, err)
				deposed++
			}
		}
		if i == 5 {
			// A coordinator process restarts.
			coords[0].stop(t)
			coords[0] = e.startCoordinator("c1", Config{}, setup)
		}
		if i%2 == 1 {
			e.waitSettled()
		}
	}
	for _, l := range expiring {
		e.waitLeaseGone(l)
	}
	ids := map[string]bool{}
	for _, n := range live {
		ids[n.id] = true
	}
	s := e.waitFor("settled on the live nodes", func(s cluster.Snapshot) bool {
		if len(s.Nodes) != len(ids) {
			return false
		}
		for id := range s.Nodes {
			if !ids[id] {
				return false
			}
		}
		return e.settled(s)
	})
	t.Logf("10 node deaths, %d leaders deposed: settled after %s", deposed, time.Since(start))
	moves := e.rec.check(t)
	e.check(s)
	leaders, applied, refused := log.checkFences(t)
	t.Logf("%d moves; %d leaders applied %d writes; %d writes refused as deposed", moves, leaders, applied, refused)
	require.GreaterOrEqual(t, leaders, 2)
	require.Positive(t, moves)
}

func isDeposed(err error) bool { return err != nil && errorsIs(err, errDeposed) }

// TestLostAnswer pins the rule for writes whose answer is lost: they may
// have applied, so the coordinator decides again from a fresh read and
// never resends them: one creation, one term bump.
func TestLostAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, "a", "b")
	e.startNode("n1")
	e.startNode("n2")
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	var log commitLog
	var mu sync.Mutex
	var lost []change
	e.startCoordinator("c1", Config{}, func(c *Coordinator) {
		c.hooks.afterCommit = log.hook
		c.hooks.loseAnswer = func(ch change) bool {
			if ch.kind == changeAssign && (ch.channel == "b" && ch.reason == reasonNew || ch.reason == reasonRequest) {
				mu.Lock()
				lost = append(lost, ch)
				mu.Unlock()
				return true
			}
			return false
		}
	})
	e.waitSettled()
	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, "a", ""))
	s := e.waitFor("a moved", func(s cluster.Snapshot) bool {
		return s.Assignments["a"].Value.Term == 2 && len(s.Moves) == 0 && e.settled(s)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, lost, 2)
	e.check(s)
	require.Len(t, e.rec.writes("b"), 2, "b: one creation, one confirmation")
	require.Len(t, e.rec.writes("a"), 4, "a: created, confirmed, moved once, confirmed")
	for _, l := range lost {
		sent := 0
		for _, c := range log.get() {
			if c.ch.kind == l.kind && c.ch.channel == l.channel && c.ch.rev == l.rev {
				sent++
			}
		}
		require.Equal(t, 1, sent, "%s %s from revision %d sent once, never again", l.kind, l.channel, l.rev)
	}
}

// TestEtcdUnreachable pins what happens when etcd becomes unreachable (a
// proxy cut, like a partition): a standby stopped while campaigning
// returns within about the TTL (it does not wait for etcd to resign), and
// a leader steps down within about two TTLs and returns promptly when
// stopped.
func TestEtcdUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20*time.Second, "a")
	e.startNode("n1")
	start := func(id string, p *proxy) (*Coordinator, context.CancelFunc, chan error) {
		cli := etcdtest.Client(t, []string{p.endpoint()})
		c, err := New(cli, Config{ID: id, Root: e.layout.Root, SessionTTL: testTTL, ReconcileInterval: testInterval,
			Channels: e.channels.source(), Logger: testLogger(t).With("candidate", id)})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return c, cancel, done
	}
	returns := func(what string, done chan error, within time.Duration) time.Duration {
		start := time.Now()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(within):
			t.Fatalf("%s: Run did not return within %s", what, within)
		}
		return time.Since(start)
	}

	p1, p2 := startProxy(t, srv.Endpoints()[0]), startProxy(t, srv.Endpoints()[0])
	leader, stopLeader, leaderDone := start("A", p1)
	select {
	case <-leader.Leading():
	case <-e.ctx.Done():
		t.Fatal("A never led")
	}
	e.waitSettled()
	standby, stopStandby, standbyDone := start("B", p2)
	e.waitCandidates(2)
	p2.cut()
	stopStandby()
	took := returns("standby", standbyDone, testTTL+2*time.Second)
	t.Logf("etcd unreachable: a standby stopped while campaigning returned after %s (TTL %s)", took, testTTL)
	require.False(t, standby.IsLeader())

	cut := time.Now()
	p1.cut()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for leader.IsLeader() {
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			t.Fatal("still leading without etcd")
		}
	}
	took = time.Since(cut)
	t.Logf("etcd unreachable: the leader stepped down after %s (TTL %s)", took, testTTL)
	// The client gives up on its keep-alives about a TTL after the last
	// answer, and retries its stream in between: up to about 2 TTLs.
	require.Less(t, took, 3*testTTL+time.Second)
	stopLeader()
	took = returns("leader", leaderDone, testTTL+2*time.Second)
	t.Logf("etcd unreachable: Run returned %s after its context ended", took)
}

func TestConfigValidate(t *testing.T) {
	ok := Config{ID: "c1", Channels: StaticChannels("a")}
	require.NoError(t, ok.Validate())
	for name, mod := range map[string]func(*Config){
		"no id":                   func(c *Config) { c.ID = "" },
		"bad id":                  func(c *Config) { c.ID = "a b" },
		"bad root":                func(c *Config) { c.Root = "no-slash" },
		"short ttl":               func(c *Config) { c.SessionTTL = 500 * time.Millisecond },
		"negative ttl":            func(c *Config) { c.SessionTTL = -time.Second },
		"no channels":             func(c *Config) { c.Channels = nil },
		"neg interval":            func(c *Config) { c.ReconcileInterval = -1 },
		"neg open time":           func(c *Config) { c.OpenTimeout = -1 },
		"backends without chains": func(c *Config) { c.Backends = []string{"kafka"} },
		"a backend describe does not know": func(c *Config) {
			c.Chains, c.Describe, c.Backends = chain.NewStore(nil, chain.Options{}), testDescribe, []string{"kafka", "nosuch"}
		},
	} {
		c := ok
		mod(&c)
		require.Error(t, c.Validate(), name)
		_, err := New(etcdtest.Client(t, srv.Endpoints()), c)
		require.Error(t, err, name)
	}
	_, err := New(nil, ok)
	require.Error(t, err)

	// What a candidate publishes of the migrations it carries out.
	require.Equal(t, &cluster.MigrationTargets{}, ok.migrationTargets(), "without chains: none")
	with := ok
	with.Chains, with.Describe = chain.NewStore(nil, chain.Options{}), testDescribe
	require.Nil(t, with.migrationTargets(), "chains, entries unsaid: nothing published")
	with.Backends = []string{"pulsar", "kafka", "local", "kafka"}
	require.NoError(t, with.Validate())
	require.Equal(t, &cluster.MigrationTargets{Chains: true, Backends: []string{"kafka", "local", "pulsar"}}, with.migrationTargets())

	d := ok.withDefaults()
	require.Equal(t, cluster.DefaultRoot, d.Root)
	require.Equal(t, DefaultSessionTTL, d.SessionTTL)
	require.Equal(t, DefaultReconcileInterval, d.ReconcileInterval)
	require.Equal(t, DefaultOpenTimeout, d.OpenTimeout)
	require.Equal(t, 5, d.ttlSeconds())
	d.SessionTTL = 1500 * time.Millisecond
	require.Equal(t, 2, d.ttlSeconds(), "rounded up to whole seconds")

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "streamwal_coordinator_leader", Help: "taken"})))
	c, err := New(etcdtest.Client(t, srv.Endpoints()), Config{ID: "c1", Channels: StaticChannels(), Registerer: reg})
	require.NoError(t, err)
	require.Error(t, c.Run(context.Background()), "a registry that refuses the metrics")
	require.False(t, c.running.Load())
}

func TestAdminRequests(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t))
	require.NoError(t, err)

	require.Error(t, RequestMove(ctx, cli, l, "", "n1"))
	require.Error(t, RequestMove(ctx, cli, l, "a/b", "n1"))
	require.Error(t, RequestMove(ctx, cli, l, "a", "n 1"))
	require.Error(t, RequestMove(ctx, cli, cluster.Layout{Root: "x"}, "a", "n1"))
	require.Error(t, RequestDrain(ctx, cli, l, ""))
	require.Error(t, Undrain(ctx, cli, l, "../x"))

	require.NoError(t, RequestMove(ctx, cli, l, "a", ""))
	require.NoError(t, RequestMove(ctx, cli, l, "b", "n2"))
	require.NoError(t, RequestDrain(ctx, cli, l, "n1"))
	s, err := cluster.Load(ctx, cli, l, nil)
	require.NoError(t, err)
	require.Equal(t, cluster.MoveRequest{}, s.Moves["a"].Value)
	require.Equal(t, cluster.MoveRequest{To: "n2"}, s.Moves["b"].Value)
	since := s.Drains["n1"].Value.Since
	require.False(t, since.IsZero())
	require.NoError(t, RequestDrain(ctx, cli, l, "n1"))
	s, err = cluster.Load(ctx, cli, l, nil)
	require.NoError(t, err)
	require.True(t, since.Equal(s.Drains["n1"].Value.Since), "a second drain keeps the first")
	require.NoError(t, Undrain(ctx, cli, l, "n1"))
	require.NoError(t, Undrain(ctx, cli, l, "n1"), "idempotent")
	s, err = cluster.Load(ctx, cli, l, nil)
	require.NoError(t, err)
	require.Empty(t, s.Drains)
}
