package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

// testEntries are the backend entries of the tests' node configuration.
var testEntries = map[string]chain.Backend{
	"local":  {Name: "local", Kind: "local", Params: json.RawMessage(`{"dir":"/data/wal"}`)},
	"kafka":  {Name: "kafka", Kind: "kafka", Params: json.RawMessage(`{"seedBrokers":["k1:9092"]}`)},
	"pulsar": {Name: "pulsar", Kind: "pulsar", Params: json.RawMessage(`{"url":"pulsar://p1:6650"}`)},
}

var errNoEntry = errors.New("test: no such backend entry")

func testDescribe(name string) (chain.Backend, error) {
	b, ok := testEntries[name]
	if !ok {
		return chain.Backend{}, errors.Wrapf(errNoEntry, "backend %q (the entries are kafka, local, pulsar)", name)
	}
	return b, nil
}

// chains returns a chain store in the env's meta store, where walnode
// keeps it: the root without its slash, plus "-meta/".
func (e *env) chains() *chain.Store {
	e.t.Helper()
	kv, err := etcdstore.New(e.cli, etcdstore.Options{Prefix: strings.TrimSuffix(e.layout.Root, "/") + "-meta/"})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = kv.Close() })
	return chain.NewStore(kv, chain.Options{})
}

// migrating is a coordinator config with chains.
func migrating(store *chain.Store, cfg Config) Config {
	cfg.Chains, cfg.Describe = store, testDescribe
	return cfg
}

// chainMode opens a channel as chainwal.Opener does, without a backend:
// create the chain on the default entry, seal a migration pending at or
// below the open's term (nothing to fence), refuse a term below the last
// segment's first.
type chainMode struct {
	store *chain.Store
	def   string
	// opens counts the opens per channel.
	mu    sync.Mutex
	opens map[string]int
}

func chained(store *chain.Store) nodeOpt {
	return func(n *simNode) { n.chains = &chainMode{store: store, def: "local", opens: map[string]int{}} }
}

// open returns the open's error, "" for none.
func (m *chainMode) open(ctx context.Context, ch string, term int64) string {
	m.mu.Lock()
	m.opens[ch]++
	m.mu.Unlock()
	c, err := m.store.Get(ctx, ch)
	if errors.Is(err, chain.ErrNotFound) {
		b := testEntries[m.def]
		b.Channel = ch
		if c, err = m.store.Create(ctx, ch, b, 0); errors.Is(err, chain.ErrExists) {
			c, err = m.store.Get(ctx, ch)
		}
	}
	if err != nil {
		return err.Error()
	}
	if p := c.Pending; p != nil && p.Term <= term {
		var floor uint64
		if n := len(c.Segments); n > 1 {
			floor = c.Segments[n-2].Seal.TimeTick
		}
		if c, err = m.store.Seal(ctx, ch, chain.SealRequest{Segment: c.Last().Index, Term: p.Term, TimeTick: floor}); err != nil {
			return err.Error()
		}
	}
	if last := c.Last(); last.FirstTerm > term {
		return "fenced: segment began at a higher term"
	}
	return ""
}

// refusal returns the refusal recorded for channel, if any.
func (e *env) refusal(channel string) (cluster.MoveRefusal, bool) {
	e.t.Helper()
	resp, err := e.cli.Get(e.ctx, e.layout.Refusal(channel))
	require.NoError(e.t, err)
	if len(resp.Kvs) == 0 {
		return cluster.MoveRefusal{}, false
	}
	r, err := cluster.Decode[cluster.MoveRefusal](string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	require.NoError(e.t, err)
	return r, true
}

// awaitRefusal waits until the migrate request written at rev is gone and
// returns the refusal recorded for it; the test fails if it was not
// refused.
func (e *env) awaitRefusal(channel string, rev int64) string {
	e.t.Helper()
	e.waitFor("migrate request of "+channel+" decided", func(s cluster.Snapshot) bool {
		_, ok := s.Migrations[channel]
		return s.Revision >= rev && !ok
	})
	r, ok := e.refusal(channel)
	require.True(e.t, ok, "the request of %s was refused", channel)
	// The leader may have written the request again (its Term) before it
	// refused it.
	require.GreaterOrEqual(e.t, r.Request, rev, "the refusal is the request's")
	require.Equal(e.t, cluster.RefusedMigrate, r.Kind)
	return r.Reason
}

// awaitMigrated waits until the migrate request of channel written at rev
// is gone and every channel settled.
func (e *env) awaitMigrated(channel string, rev int64) cluster.Snapshot {
	e.t.Helper()
	return e.waitFor(channel+" migrated", func(s cluster.Snapshot) bool {
		_, pending := s.Migrations[channel]
		return s.Revision >= rev && !pending && e.settled(s)
	})
}

// TestMigrate pins a planned migration: the intent at term+1, the same
// owner assigned at exactly that term, its open sealing the old segment
// and opening the new one, the request deleted once the chain ends on the
// target; asking again for the same backend is refused.
func TestMigrate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a", "b")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.startNode("n2", chained(store))
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	reg := prometheus.NewRegistry()
	r := e.startCoordinator("c1", migrating(store, Config{Registerer: reg}), nil)
	s := e.waitSettled()
	owner := s.Assignments["a"].Value.Node
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "local", c.Last().Backend.Name, "the first open created the chain on the default entry")

	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "walctl@test")
	require.NoError(t, err)
	s = e.awaitMigrated("a", rev)
	if _, refused := e.refusal("a"); refused {
		t.Fatalf("refused: %+v", s.Migrations)
	}
	a := s.Assignments["a"].Value
	require.Equal(t, owner, a.Node, "the same owner opens the new segment")
	require.EqualValues(t, 2, a.Term)
	require.Equal(t, []cluster.Owner(nil), a.Previous, "cleared by the confirmation")
	c, err = store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Len(t, c.Segments, 2)
	require.Nil(t, c.Pending)
	require.EqualValues(t, 2, c.Segments[0].Seal.Term, "sealed at the migration's term")
	last := c.Last()
	require.Equal(t, "kafka", last.Backend.Name)
	require.Equal(t, "a-s1", last.Backend.Channel, "the segment's channel on its backend")
	require.JSONEq(t, string(testEntries["kafka"].Params), string(last.Backend.Params))
	require.EqualValues(t, 2, last.FirstTerm)
	cb, err := store.Get(e.ctx, "b")
	require.NoError(t, err)
	require.Len(t, cb.Segments, 1, "b untouched")
	require.EqualValues(t, 1, s.Assignments["b"].Value.Term)

	// Once more to the same backend: nothing to do, refused.
	rev, err = RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "walctl@test")
	require.NoError(t, err)
	require.Equal(t, "the channel is on backend kafka already (segment 1, since term 2)", e.awaitRefusal("a", rev))

	r.waitPasses(t, e.ctx, 1) // the metrics count after the writes
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "started"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "finished"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "refused"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_moves_total", "reason", "migrate"))
	e.check(e.waitSettled())
}

// TestMigrateRefusals pins the refusals a leader records: an unknown
// backend entry, another migration pending, a channel its owner opened
// without a chain, and every request of a coordinator without chains.
func TestMigrateRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a", "b")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.waitFor("n1", func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	reg := prometheus.NewRegistry()
	r := e.startCoordinator("c1", migrating(store, Config{Registerer: reg}), nil)
	s := e.waitSettled()
	// "plain" goes to n2, the least loaded, which runs without chains.
	e.startNode("n2")
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	e.channels.add("plain")
	s = e.waitSettled()
	require.Equal(t, "n2", s.Assignments["plain"].Value.Node)

	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "nosuch", "ops")
	require.NoError(t, err)
	why := e.awaitRefusal("a", rev)
	require.Contains(t, why, `backend "nosuch"`)
	require.Contains(t, why, "the entries are kafka, local, pulsar")

	// Another migration pending (at a term no open has reached): refused,
	// the chain untouched.
	{
		cb, err := store.Get(e.ctx, "b")
		require.NoError(t, err)
		target := testEntries["pulsar"]
		target.Channel = "b-s1"
		_, err = store.BeginMigration(e.ctx, "b", chain.MigrationRequest{Segment: cb.Last().Index, Target: target, Term: 100, By: "someone"})
		require.NoError(t, err)
		rev, err = RequestMigrate(e.ctx, e.cli, e.layout, "b", "kafka", "ops")
		require.NoError(t, err)
		require.Equal(t, `another migration (to pulsar at term 100, requested by "someone") is pending: cancel it first`, e.awaitRefusal("b", rev))
		cb, err = store.Get(e.ctx, "b")
		require.NoError(t, err)
		require.EqualValues(t, 100, cb.Pending.Term, "the pending one stays")
		require.NoError(t, CancelMigrate(e.ctx, e.cli, e.layout, store, "b"), "no request, an intent: cancelled")
		cb, err = store.Get(e.ctx, "b")
		require.NoError(t, err)
		require.Nil(t, cb.Pending)
		require.ErrorIs(t, CancelMigrate(e.ctx, e.cli, e.layout, store, "b"), chain.ErrNoMigration)
	}

	rev, err = RequestMigrate(e.ctx, e.cli, e.layout, "plain", "kafka", "ops")
	require.NoError(t, err)
	require.Equal(t, "the channel has no chain: its owner n2 opened it at term 1 without one (its nodes run without chains)", e.awaitRefusal("plain", rev))
	// With a chain its owner does not open (a node without chains): the
	// migration is assigned once, found unsealed, cancelled and refused,
	// not begun again at every term.
	local := testEntries["local"]
	local.Channel = "plain"
	_, err = store.Create(e.ctx, "plain", local, 0)
	require.NoError(t, err)
	rev, err = RequestMigrate(e.ctx, e.cli, e.layout, "plain", "kafka", "ops")
	require.NoError(t, err)
	require.Equal(t, "its owner n2 opened the channel at term 2 without sealing the migration's segment: the node runs without chains", e.awaitRefusal("plain", rev))
	cp, err := store.Get(e.ctx, "plain")
	require.NoError(t, err)
	require.Nil(t, cp.Pending, "the intent cancelled")
	require.Len(t, cp.Segments, 1)
	s = e.waitSettled()
	require.EqualValues(t, 2, s.Assignments["plain"].Value.Term)

	rev, err = RequestMigrate(e.ctx, e.cli, e.layout, "unmanaged", "kafka", "ops")
	require.NoError(t, err)
	require.Equal(t, "channel is not managed", e.awaitRefusal("unmanaged", rev))
	r.waitPasses(t, e.ctx, 1) // the metrics count after the writes
	require.EqualValues(t, 5, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "refused"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "started"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "cancelled"))

	// A coordinator without chains refuses every request, saying so.
	r.stop(t)
	e.startCoordinator("c2", Config{}, nil)
	rev, err = RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	require.Equal(t, noChains, e.awaitRefusal("a", rev))
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Len(t, c.Segments, 1)
	require.Nil(t, c.Pending)
	e.check(e.waitSettled())
}

// TestMigrateCrashedLeader pins the finish of a migration whose leader
// crashed between the intent and the assignment: the next leader assigns
// the channel at the intent's term (not one above), and its open seals.
func TestMigrateCrashedLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.waitFor("n1", func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	var crashed atomic.Bool
	crash := make(chan struct{})
	ra := e.startCoordinator("A", migrating(store, Config{}), func(c *Coordinator) {
		c.hooks.beforeCommit = func(_ fence, ch change) error {
			if crashed.Load() {
				return errCrashed
			}
			if ch.kind == changeAssign && ch.reason == reasonMigrate {
				crashed.Store(true)
				c.hooks.abandon.Store(true)
				close(crash)
				return errCrashed
			}
			return nil
		}
	})
	waitLeader(t, e.ctx, ra)
	e.waitSettled()
	rb := e.startCoordinator("B", migrating(store, Config{}), nil)
	e.waitCandidates(2)

	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	select {
	case <-crash:
	case <-e.ctx.Done():
		t.Fatal("A never tried to assign the migration")
	}
	ra.stop(t)
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.NotNil(t, c.Pending, "A recorded the intent before it crashed")
	require.EqualValues(t, 2, c.Pending.Term)
	s, _ := e.view.Snapshot()
	require.EqualValues(t, 1, s.Assignments["a"].Value.Term, "but did not assign")

	waitLeader(t, e.ctx, rb)
	s = e.awaitMigrated("a", rev)
	require.EqualValues(t, 2, s.Assignments["a"].Value.Term, "assigned at the intent's term")
	c, err = store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "kafka", c.Last().Backend.Name)
	require.EqualValues(t, 2, c.Last().FirstTerm)
	e.check(s)
}

// TestMigrateStrayIntent pins the deposed leader's race: an intent written
// after the owner opened the channel at or above its term (a leader that
// read the assignment before it was deposed, and wrote late) is never
// sealed by that open, and would be by a later one at a term another
// owner already used. The leader cancels it and migrates at a fresh term.
func TestMigrateStrayIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.startNode("n2", chained(store))
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	reg := prometheus.NewRegistry()
	e.startCoordinator("c1", migrating(store, Config{Registerer: reg}), nil)
	s := e.waitSettled()
	from := s.Assignments["a"].Value.Node
	to := map[string]string{"n1": "n2", "n2": "n1"}[from]
	require.NoError(t, RequestMove(e.ctx, e.cli, e.layout, "a", to))
	s = e.waitFor("a moved to term 2", func(s cluster.Snapshot) bool {
		return s.Assignments["a"].Value.Term == 2 && e.settled(s)
	})

	// The deposed leader's intent lands: term 2, which the owner opened.
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	target := testEntries["kafka"]
	target.Channel = "a-s1"
	_, err = store.BeginMigration(e.ctx, "a", chain.MigrationRequest{Segment: c.Last().Index, Target: target, Term: 2, By: "ops"})
	require.NoError(t, err)
	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	s = e.awaitMigrated("a", rev)
	_, refused := e.refusal("a")
	require.False(t, refused)
	require.EqualValues(t, 3, s.Assignments["a"].Value.Term, "a fresh term for the migration")
	c, err = store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Len(t, c.Segments, 2)
	require.EqualValues(t, 3, c.Segments[0].Seal.Term, "sealed at the fresh term, not the stray one")
	require.Equal(t, "kafka", c.Last().Backend.Name)
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "cancelled"))
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "started"))
	e.check(s)
}

// TestMigrateConcurrentRequests pins one migration at a time: of two
// requests to different backends at once, one is taken and the other
// refused, and the chain gets exactly one new segment.
func TestMigrateConcurrentRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.waitFor("n1", func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	e.startCoordinator("c1", migrating(store, Config{}), nil)
	e.waitSettled()

	targets := []string{"kafka", "pulsar"}
	errs := make([]error, len(targets))
	revs := make([]int64, len(targets))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, to := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			revs[i], errs[i] = RequestMigrate(e.ctx, e.cli, e.layout, "a", to, "ops-"+to)
		}()
	}
	close(start)
	wg.Wait()
	winner, rev := "", int64(0)
	for i, err := range errs {
		if err == nil {
			require.Empty(t, winner, "both requests taken")
			winner, rev = targets[i], revs[i]
			continue
		}
		require.ErrorIs(t, err, ErrMigrateRequested)
		require.Contains(t, err.Error(), "cancel it first")
	}
	require.NotEmpty(t, winner)
	s := e.awaitMigrated("a", rev)
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Len(t, c.Segments, 2, "one new segment")
	require.Equal(t, winner, c.Last().Backend.Name)
	require.Nil(t, c.Pending)
	e.check(s)
}

// TestCancelMigrate pins the cancel of a migration: before its seal the
// request goes and the intent with it, and the channel stays where it
// was; after the seal it is refused.
func TestCancelMigrate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a")
	store := e.chains()
	n1 := e.startNode("n1", chained(store))
	e.waitFor("n1", func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	e.startCoordinator("c1", migrating(store, Config{}), nil)
	e.waitSettled()

	n1.setHold(true)
	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	e.waitFor("the migration's assignment", func(s cluster.Snapshot) bool {
		if s.Revision < rev {
			return false
		}
		return s.Assignments["a"].Value.Term == 2 && s.Migrations["a"].Value.Term == 2
	})
	require.NoError(t, CancelMigrate(e.ctx, e.cli, e.layout, store, "a"))
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Nil(t, c.Pending)
	s := e.waitFor("request gone", func(s cluster.Snapshot) bool { _, ok := s.Migrations["a"]; return s.Revision > rev && !ok })
	_, refused := e.refusal("a")
	require.False(t, refused, "withdrawn, not refused (request %d)", rev)
	n1.setHold(false)
	s = e.waitSettled()
	require.EqualValues(t, 2, s.Assignments["a"].Value.Term)
	c, err = store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Len(t, c.Segments, 1, "the channel stays on its backend")
	require.Equal(t, "local", c.Last().Backend.Name)
	require.ErrorIs(t, CancelMigrate(e.ctx, e.cli, e.layout, store, "a"), chain.ErrNoMigration)
	e.check(s)
}

func TestRequestMigrateArgs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := newEnv(t, 10*time.Second)
	_, err := RequestMigrate(ctx, e.cli, e.layout, "", "kafka", "ops")
	require.Error(t, err)
	_, err = RequestMigrate(ctx, e.cli, e.layout, "a", "", "ops")
	require.Error(t, err)
	_, err = RequestMigrate(ctx, e.cli, e.layout, "a", "a/b", "ops")
	require.Error(t, err)
	_, err = RequestMigrate(ctx, e.cli, cluster.Layout{Root: "x"}, "a", "kafka", "ops")
	require.Error(t, err)
	require.Error(t, CancelMigrate(ctx, e.cli, e.layout, nil, "a"), "no chain store")
	rev, err := RequestMigrate(ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	again, err := RequestMigrate(ctx, e.cli, e.layout, "a", "kafka", "ops2")
	require.NoError(t, err, "the same backend again: the request there")
	require.Equal(t, rev, again)
	_, err = RequestMigrate(ctx, e.cli, e.layout, "a", "pulsar", "ops")
	require.ErrorIs(t, err, ErrMigrateRequested)
	s, err := cluster.Load(ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	m := s.Migrations["a"]
	require.Equal(t, rev, m.Revision)
	require.Equal(t, "kafka", m.Value.To)
	require.Equal(t, "ops", m.Value.By)
	require.False(t, m.Value.At.IsZero())
	// Without a chain, a request not begun is withdrawn.
	store := e.chains()
	require.NoError(t, CancelMigrate(ctx, e.cli, e.layout, store, "a"))
	s, err = cluster.Load(ctx, e.cli, e.layout, nil)
	require.NoError(t, err)
	require.Empty(t, s.Migrations)

	// Sealed: a request the leader has not deleted yet, its chain on the
	// target already.
	target := testEntries["kafka"]
	target.Channel = "x-s1"
	local := testEntries["local"]
	local.Channel = "x"
	_, err = store.Create(ctx, "x", local, 0)
	require.NoError(t, err)
	_, err = store.BeginMigration(ctx, "x", chain.MigrationRequest{Segment: 0, Target: target, Term: 4, By: "ops"})
	require.NoError(t, err)
	_, err = store.Seal(ctx, "x", chain.SealRequest{Segment: 0, Term: 4})
	require.NoError(t, err)
	_, err = e.cli.Put(ctx, e.layout.Migrate("x"), string(cluster.Encode(cluster.MigrateRequest{To: "kafka", By: "ops", Term: 4})))
	require.NoError(t, err)
	err = CancelMigrate(ctx, e.cli, e.layout, store, "x")
	require.ErrorIs(t, err, ErrMigrationSealed)
	require.Contains(t, err.Error(), "migrate back to undo it")
}

// TestMigrateMany pins a migration of more channels than one pass reads
// one by one (the leader lists the chains): each once, at term+1.
func TestMigrateMany(t *testing.T) {
	t.Parallel()
	names := channelNames(2*maxCommitsInFlight + 3)
	e := newEnv(t, 40*time.Second, names...)
	store := e.chains()
	e.startNode("n1", chained(store))
	e.startNode("n2", chained(store))
	e.waitFor("2 nodes", func(s cluster.Snapshot) bool { return len(s.Nodes) == 2 })
	reg := prometheus.NewRegistry()
	r := e.startCoordinator("c1", migrating(store, Config{Registerer: reg}), nil)
	e.waitSettled()
	var last int64
	for _, ch := range names {
		rev, err := RequestMigrate(e.ctx, e.cli, e.layout, ch, "pulsar", "ops")
		require.NoError(t, err)
		last = max(last, rev)
	}
	s := e.waitFor("every channel migrated", func(s cluster.Snapshot) bool {
		return s.Revision >= last && len(s.Migrations) == 0 && e.settled(s)
	})
	for _, ch := range names {
		require.EqualValues(t, 2, s.Assignments[ch].Value.Term, ch)
		c, err := store.Get(e.ctx, ch)
		require.NoError(t, err)
		require.Equal(t, "pulsar", c.Last().Backend.Name, ch)
		require.EqualValues(t, 2, c.Last().FirstTerm, ch)
	}
	r.waitPasses(t, e.ctx, 1) // the metrics count after the writes
	require.EqualValues(t, len(names), gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "finished"))
	e.check(s)
}

// TestMigrateDeposedLeader pins the intent of a leader deposed while it
// records it (its lease revoked between its check and its write): it
// notices after the write and assigns nothing; the next leader finds the
// intent and finishes it at its term, and the deposed leader's writes
// never apply.
func TestMigrateDeposedLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.waitFor("n1", func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	var log commitLog
	var armed atomic.Bool
	var deposed atomic.Int64
	setup := func(c *Coordinator) {
		c.hooks.afterCommit = log.hook
		c.hooks.beforeIntent = func(f fence, ch string, _ int64) {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			resp, err := e.cli.Get(e.ctx, f.key)
			if err != nil || len(resp.Kvs) != 1 {
				t.Errorf("election key %s: %v", f.key, err)
				return
			}
			if _, err := e.cli.Revoke(e.ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Errorf("revoke: %v", err)
			}
			deposed.Store(f.rev)
		}
	}
	reg := prometheus.NewRegistry()
	ra := e.startCoordinator("A", migrating(store, Config{}), setup)
	waitLeader(t, e.ctx, ra)
	e.waitSettled()
	rb := e.startCoordinator("B", migrating(store, Config{Registerer: reg}), setup)
	e.waitCandidates(2)

	armed.Store(true)
	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	s := e.awaitMigrated("a", rev)
	require.NotZero(t, deposed.Load(), "a leader was deposed while recording the intent")
	require.EqualValues(t, 2, s.Assignments["a"].Value.Term, "the deposed leader's intent, finished at its term")
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Len(t, c.Segments, 2)
	require.EqualValues(t, 2, c.Segments[0].Seal.Term)
	require.Equal(t, "kafka", c.Last().Backend.Name)
	for _, cm := range log.get() {
		if cm.fence == deposed.Load() && cm.ch.reason == reasonMigrate {
			require.False(t, cm.applied, "the deposed leader's migrate assignment applied: %+v", cm)
		}
	}
	rb.waitPasses(t, e.ctx, 1) // the metrics count after the writes
	// B drove A's intent, or, when it read the chain before A's write
	// landed, recorded the same one (same target, term and requester: a
	// no-op for the chain, whichever came second).
	require.LessOrEqual(t, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "started"), 1.0)
	require.EqualValues(t, 1, gather(t, reg, "streamwal_coordinator_migrations_total", "outcome", "finished"))
	e.check(s)
}

// TestCancelDuringIntent pins a cancel that comes while the leader
// records the intent (after it planned on the request, before its write):
// the cancel finds nothing pending yet, and the leader, finding its
// request withdrawn once its intent is recorded, cancels the intent
// itself: nothing is left for a later open to seal.
func TestCancelDuringIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30*time.Second, "a")
	store := e.chains()
	e.startNode("n1", chained(store))
	e.waitFor("n1", func(s cluster.Snapshot) bool { return len(s.Nodes) == 1 })
	var armed atomic.Bool
	cancelled := make(chan error, 1)
	r := e.startCoordinator("c1", migrating(store, Config{}), func(c *Coordinator) {
		c.hooks.beforeIntent = func(_ fence, ch string, _ int64) {
			if armed.CompareAndSwap(true, false) {
				cancelled <- CancelMigrate(e.ctx, e.cli, e.layout, store, ch)
			}
		}
	})
	e.waitSettled()
	armed.Store(true)
	rev, err := RequestMigrate(e.ctx, e.cli, e.layout, "a", "kafka", "ops")
	require.NoError(t, err)
	select {
	case err := <-cancelled:
		require.NoError(t, err, "the request withdrawn, nothing pending yet")
	case <-e.ctx.Done():
		t.Fatal("the leader never recorded the intent")
	}
	e.waitFor("request gone", func(s cluster.Snapshot) bool { _, ok := s.Migrations["a"]; return s.Revision > rev && !ok })
	r.waitPasses(t, e.ctx, 2)
	c, err := store.Get(e.ctx, "a")
	require.NoError(t, err)
	require.Nil(t, c.Pending, "the leader cancelled its intent")
	require.Len(t, c.Segments, 1)
	s := e.waitSettled()
	require.EqualValues(t, 1, s.Assignments["a"].Value.Term, "nothing assigned for it")
	_, refused := e.refusal("a")
	require.False(t, refused)
	e.check(s)
}

// sealOnRead is a meta store that runs seal just before its nth read of
// key: a leader that seals between a canceller's reads of the chain.
type sealOnRead struct {
	meta.Store
	key   string
	nth   int
	reads int
	seal  func()
}

func (s *sealOnRead) Get(ctx context.Context, key string) (meta.KV, error) {
	if key == s.key {
		if s.reads++; s.reads == s.nth {
			s.seal()
		}
	}
	return s.Store.Get(ctx, key)
}

// TestCancelMigrateSealedMeanwhile: a cancel that read the migration
// pending, but whose cancelling write finds it sealed, is
// ErrMigrationSealed (for the standard errors.Is too), with the chain's
// mismatch as its cause.
func TestCancelMigrateSealedMeanwhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 10*time.Second)
	kv, err := etcdstore.New(e.cli, etcdstore.Options{Prefix: strings.TrimSuffix(e.layout.Root, "/") + "-meta/"})
	require.NoError(t, err)
	defer func() { _ = kv.Close() }()
	leader := chain.NewStore(kv, chain.Options{})
	local, target := testEntries["local"], testEntries["kafka"]
	local.Channel, target.Channel = "x", "x-s1"
	_, err = leader.Create(e.ctx, "x", local, 0)
	require.NoError(t, err)
	_, err = leader.BeginMigration(e.ctx, "x", chain.MigrationRequest{Segment: 0, Target: target, Term: 4, By: "ops"})
	require.NoError(t, err)
	// The cancel reads the chain once to decide (read 1), then once more
	// to cancel it (read 2): the leader seals in between.
	racing := &sealOnRead{Store: kv, key: chain.Key("x"), nth: 2, seal: func() {
		_, err := leader.Seal(e.ctx, "x", chain.SealRequest{Segment: 0, Term: 4})
		require.NoError(t, err)
	}}
	err = CancelMigrate(e.ctx, e.cli, e.layout, chain.NewStore(racing, chain.Options{}), "x")
	require.Equal(t, 2, racing.reads)
	errmarktest.Is(t, err, ErrMigrationSealed, chain.ErrSegmentMismatch)
	require.Contains(t, err.Error(), "migrate back to undo it")
}
