package pool_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/pool"
)

func names(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(from+i)
	}
	return out
}

func TestOpenRecordsOnceAndCreatesOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		cr := newCountingCreator(nil)
		backend := pool.Backend{Name: "memory", Opener: cr}
		cfg := pool.Config{Size: 4, Prefix: "pch-"}
		p := openPool(t, stores(), backend, cfg, pool.Options{})
		require.Equal(t, []string{"pch-0", "pch-1", "pch-2", "pch-3"}, p.PChannels())
		require.Equal(t, 4, cr.total())
		// Restarts create nothing again.
		for range 3 {
			openPool(t, stores(), backend, cfg, pool.Options{})
		}
		require.Equal(t, 4, cr.total(), "a restart created pchannels again")
	})
}

// Two (or eight) processes open a new pool at once: one pool, every
// pchannel recorded once, and on Kafka one topic each.
func TestConcurrentInitialisers(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		o, c := kafkaOpener(t)
		cr := newCountingCreator(o)
		backend := pool.Backend{Name: "kafka", Opener: cr}
		cfg := pool.Config{Size: 6, Prefix: "race-"}
		const n = 8
		pools := make([]*pool.Pool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			s := stores()
			wg.Add(1)
			go func() {
				defer wg.Done()
				pools[i], errs[i] = pool.Open(testCtx(t), s, backend, cfg, pool.Options{})
			}()
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, pools[0].PChannels(), pools[i].PChannels())
			t.Cleanup(func() { _ = pools[i].Close() })
		}
		adm := kadm.NewClient(kafkaClient(t, c.ListenAddrs()))
		topics, err := adm.ListTopics(testCtx(t))
		require.NoError(t, err)
		for _, pc := range pools[0].PChannels() {
			require.Truef(t, topics.Has("streamwal-"+pc) || topics.Has(pc), "topic of %s missing: %v", pc, topics.Names())
		}
		// Every opener may have called Create; the topics exist once each
		// (Kafka names are unique, and the creator treats "exists" as done).
		require.GreaterOrEqual(t, cr.total(), 6)

		// Allocations from all of them agree.
		var all [][]pool.Allocation
		var mu sync.Mutex
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				as, err := pools[i].Allocate(testCtx(t), names("vc-", 0, 40)...)
				mu.Lock()
				defer mu.Unlock()
				errs[i] = err
				all = append(all, as)
			}()
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
		}
		for i := 1; i < len(all); i++ {
			require.Equal(t, allocations(t, all[0]), allocations(t, all[i]), "two allocators disagree")
		}
	})
}

func kafkaClient(t *testing.T, seeds []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func TestAllocateIsIdempotentPersistedAndRoundRobin(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		backend := pool.Backend{Name: "memory"}
		cfg := pool.Config{Size: 4, Prefix: "rr-"}
		p := openPool(t, stores(), backend, cfg, pool.Options{})
		ctx := testCtx(t)
		first, err := p.Allocate(ctx, names("v", 0, 6)...)
		require.NoError(t, err)
		for i, a := range first {
			require.Equal(t, fmt.Sprintf("rr-%d", i%4), a.PChannel, "round robin from the first pchannel")
			o, err := pool.DecodeWALOptions(a.Options)
			require.NoError(t, err)
			require.Equal(t, pool.WALOptions{Backend: "memory", Pool: "default", PChannel: a.PChannel, VChannel: a.VChannel}, o)
		}
		again, err := p.Allocate(ctx, append(names("v", 0, 6), "v2", "v2")...)
		require.NoError(t, err)
		require.Equal(t, allocations(t, first), allocations(t, again), "allocating again changes nothing")

		// A restart continues the cursor: v6 goes where v6 would have gone.
		p2 := openPool(t, stores(), backend, cfg, pool.Options{})
		require.Equal(t, allocations(t, first), allocations(t, mustLookupAll(t, p2, names("v", 0, 6))))
		next, err := p2.Allocate(ctx, "v6", "v7")
		require.NoError(t, err)
		require.Equal(t, "rr-2", next[0].PChannel)
		require.Equal(t, "rr-3", next[1].PChannel)

		// 1,000 more in batches: within ±1 per pchannel.
		for b := range 5 {
			_, err := p2.Allocate(ctx, names("bulk-", b*200, 200)...)
			require.NoError(t, err)
		}
		counts := map[string]int{}
		for _, pc := range p2.PChannels() {
			counts[pc] = len(p2.VChannels(pc))
		}
		lo, hi := 1<<30, 0
		for _, n := range counts {
			lo, hi = min(lo, n), max(hi, n)
		}
		require.LessOrEqualf(t, hi-lo, 1, "round robin spread %v", counts)
	})
}

func mustLookupAll(t *testing.T, p *pool.Pool, vcs []string) []pool.Allocation {
	t.Helper()
	var out []pool.Allocation
	for _, v := range vcs {
		a, err := p.Lookup(testCtx(t), v)
		require.NoError(t, err)
		out = append(out, a)
	}
	return out
}

func TestLeastLoaded(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		backend := pool.Backend{Name: "memory"}
		cfg := pool.Config{Size: 3, Prefix: "ll-", Strategy: pool.LeastLoaded}
		p := openPool(t, stores(), backend, cfg, pool.Options{})
		// Fill ll-0 by hand through round robin's twin: allocate, release
		// the others, so ll-0 holds more.
		as, err := p.Allocate(ctx, names("a", 0, 9)...)
		require.NoError(t, err)
		counts := map[string]int{}
		for _, a := range as {
			counts[a.PChannel]++
		}
		require.Equal(t, map[string]int{"ll-0": 3, "ll-1": 3, "ll-2": 3}, counts, "a batch spreads over the least loaded")
		var release []string
		for _, a := range as {
			if a.PChannel != "ll-0" {
				release = append(release, a.VChannel)
			}
		}
		require.NoError(t, p.Release(ctx, release...))
		more, err := p.Allocate(ctx, names("b", 0, 4)...)
		require.NoError(t, err)
		for _, a := range more {
			require.NotEqual(t, "ll-0", a.PChannel, "the loaded pchannel is avoided")
		}

		// With a reported load, the lightest by load wins, ties to the
		// lowest index.
		load := map[string]float64{"ll-0": 1, "ll-1": 50, "ll-2": 50}
		pl := openPool(t, stores(), backend, cfg, pool.Options{Load: func(pc string) float64 { return load[pc] }})
		got, err := pl.Allocate(ctx, "c0")
		require.NoError(t, err)
		require.Equal(t, "ll-0", got[0].PChannel)
	})
}

func TestGrowShrinkAndMismatch(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		backend := pool.Backend{Name: "memory"}
		p := openPool(t, stores(), backend, pool.Config{Size: 2, Prefix: "g-"}, pool.Options{})
		before, err := p.Allocate(ctx, names("v", 0, 10)...)
		require.NoError(t, err)

		grown := openPool(t, stores(), backend, pool.Config{Size: 5, Prefix: "g-"}, pool.Options{})
		require.Len(t, grown.PChannels(), 5)
		require.Equal(t, allocations(t, before), allocations(t, mustLookupAll(t, grown, names("v", 0, 10))), "growing moved a vchannel")
		after, err := grown.Allocate(ctx, names("w", 0, 10)...)
		require.NoError(t, err)
		used := map[string]bool{}
		for _, a := range after {
			used[a.PChannel] = true
		}
		require.True(t, used["g-2"] || used["g-3"] || used["g-4"], "new pchannels are used: %v", used)
		// The first pool sees the growth when it reads the store again.
		require.NoError(t, p.Refresh(ctx))
		require.Len(t, p.PChannels(), 5)

		_, err = pool.Open(ctx, stores(), backend, pool.Config{Size: 3, Prefix: "g-"}, pool.Options{})
		require.ErrorIs(t, err, pool.ErrShrink)
		_, err = pool.Open(ctx, stores(), backend, pool.Config{Size: 5, Prefix: "other-"}, pool.Options{})
		require.ErrorIs(t, err, pool.ErrConfigMismatch)
		require.Contains(t, err.Error(), `"g-"`)
		_, err = pool.Open(ctx, stores(), pool.Backend{Name: "kafka"}, pool.Config{Size: 5, Prefix: "g-"}, pool.Options{})
		require.ErrorIs(t, err, pool.ErrConfigMismatch)
		// Chained pchannels record their own backends: a node whose
		// default changed opens the pool, whose record stays.
		chained, err := pool.Open(ctx, stores(), pool.Backend{Name: "kafka", Chained: true}, pool.Config{Size: 5, Prefix: "g-"}, pool.Options{})
		require.NoError(t, err)
		require.NoError(t, chained.Close())
		_, err = pool.Open(ctx, stores(), pool.Backend{Name: "kafka"}, pool.Config{Size: 5, Prefix: "g-"}, pool.Options{})
		require.ErrorIs(t, err, pool.ErrConfigMismatch, "the chained open rewrote the pool's backend")
	})
}

func TestBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		s := stores()
		backend := pool.Backend{Name: "memory"}
		for _, cfg := range []pool.Config{{Size: -1}, {Size: pool.MaxSize + 1}, {Prefix: "bad prefix"}, {Strategy: "random"}, {Name: "a/b"}} {
			_, err := pool.Open(ctx, s, backend, cfg, pool.Options{})
			require.ErrorIsf(t, err, pool.ErrInvalidConfig, "%+v", cfg)
		}
		_, err := pool.Open(ctx, s, pool.Backend{}, pool.Config{}, pool.Options{})
		require.ErrorIs(t, err, pool.ErrInvalidConfig, "no backend name")

		p := openPool(t, s, backend, pool.Config{Size: 2}, pool.Options{})
		_, err = p.Allocate(ctx, "ok", "not ok")
		require.ErrorIs(t, err, pool.ErrInvalidVChannel)
		require.Contains(t, err.Error(), `"not ok"`)
		_, err = p.Lookup(ctx, "ok")
		require.ErrorIs(t, err, pool.ErrNotAllocated, "a refused batch allocates nothing")
		_, err = p.Allocate(ctx, names("x", 0, pool.MaxBatch+1)...)
		require.ErrorIs(t, err, pool.ErrBatchTooLarge)

		for _, bad := range []string{"", "{", `{"v":2,"backend":"x","pool":"p","pchannel":"a","vchannel":"b"}`, `{"v":1,"pool":"p","pchannel":"a","vchannel":"b"}`, `{"v":1,"backend":"x","pool":"p","pchannel":"a b","vchannel":"b"}`} {
			_, err := pool.DecodeWALOptions(bad)
			require.ErrorIsf(t, err, pool.ErrCorruptWALOptions, "%q", bad)
		}

		// A corrupt stored value is an error naming its key.
		_, err = s.Put(ctx, "pool/default/config", []byte("not json"), meta.Any)
		require.NoError(t, err)
		_, err = pool.Open(ctx, s, backend, pool.Config{Size: 2}, pool.Options{})
		require.ErrorIs(t, err, meta.ErrCorrupt)
		require.Contains(t, err.Error(), "pool/default/config")
		_, err = s.Put(ctx, "pool/default/config", []byte(`{"v":7}`), meta.Any)
		require.NoError(t, err)
		_, err = pool.Open(ctx, s, backend, pool.Config{Size: 2}, pool.Options{})
		require.ErrorIs(t, err, meta.ErrCorrupt)
		require.Contains(t, err.Error(), "format version 7")
	})
}

func TestBackendRefusesCreation(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		cr := newCountingCreator(nil)
		cr.refuse["pch-2"] = errors.New("broker says no")
		backend := pool.Backend{Name: "kafka", Opener: cr}
		_, err := pool.Open(ctx, stores(), backend, pool.Config{Size: 4, Prefix: "pch-"}, pool.Options{})
		require.Error(t, err)
		require.Contains(t, err.Error(), `"pch-2"`)
		require.Contains(t, err.Error(), "broker says no")
		delete(cr.refuse, "pch-2")
		p := openPool(t, stores(), backend, pool.Config{Size: 4, Prefix: "pch-"}, pool.Options{})
		require.Len(t, p.PChannels(), 4)
		require.Equal(t, 1, cr.count("pch-0"), "a recorded pchannel is not created again")
		require.Equal(t, 2, cr.count("pch-2"), "the refused one is tried again")
	})
}

// flakyStore applies a commit and then reports it failed, as a store whose
// answer was lost with its connection.
type flakyStore struct {
	meta.Store
	mu       sync.Mutex
	loseNext int // commits to apply and report failed
	failNext int // commits to refuse without applying
}

func (s *flakyStore) Commit(ctx context.Context, txn meta.Txn) (int64, error) {
	s.mu.Lock()
	lose, fail := s.loseNext > 0, s.failNext > 0 && s.loseNext == 0
	if lose {
		s.loseNext--
	} else if fail {
		s.failNext--
	}
	s.mu.Unlock()
	if fail {
		return 0, errors.Wrap(meta.ErrUnavailable, "injected: connection refused")
	}
	rev, err := s.Store.Commit(ctx, txn)
	if lose && err == nil {
		return 0, errors.Wrap(meta.ErrUnavailable, "injected: answer lost")
	}
	return rev, err
}

func TestLostCommitAnswerAllocatesOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		s := &flakyStore{Store: stores()}
		backend := pool.Backend{Name: "memory"}
		p := openPool(t, s, backend, pool.Config{Size: 3}, pool.Options{})
		other := openPool(t, stores(), backend, pool.Config{Size: 3}, pool.Options{})

		s.failNext = 1
		_, err := p.Allocate(ctx, names("f", 0, 5)...)
		require.ErrorIs(t, err, meta.ErrUnavailable)
		for _, v := range names("f", 0, 5) {
			_, err := other.Lookup(ctx, v)
			require.ErrorIs(t, err, pool.ErrNotAllocated, "a failed batch allocates nothing")
		}

		s.loseNext = 1
		_, err = p.Allocate(ctx, names("v", 0, 5)...)
		require.ErrorIs(t, err, meta.ErrUnavailable)
		// Meanwhile another allocator moves the cursor on.
		_, err = other.Allocate(ctx, "w0", "w1")
		require.NoError(t, err)
		// The retry finds what the lost commit applied: the same pchannels,
		// never a second allocation.
		retried, err := p.Allocate(ctx, names("v", 0, 5)...)
		require.NoError(t, err)
		seen, err := other.Allocate(ctx, names("v", 0, 5)...)
		require.NoError(t, err)
		require.Equal(t, allocations(t, seen), allocations(t, retried))
		total := 0
		for _, pc := range other.PChannels() {
			total += len(other.VChannels(pc))
		}
		require.Equal(t, 7, total, "each vchannel allocated once")
	})
}

func TestReleaseFreesAndClose(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		p := openPool(t, stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 2}, pool.Options{})
		_, err := p.Allocate(ctx, "a", "b", "c")
		require.NoError(t, err)
		require.NoError(t, p.Release(ctx, "b", "unknown"))
		_, err = p.Lookup(ctx, "b")
		require.ErrorIs(t, err, pool.ErrNotAllocated)
		p2 := openPool(t, stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 2}, pool.Options{})
		_, err = p2.Lookup(ctx, "b")
		require.ErrorIs(t, err, pool.ErrNotAllocated, "the release is persisted")
		_, err = p2.Lookup(ctx, "c")
		require.NoError(t, err)

		require.NoError(t, p.Close())
		_, err = p.Allocate(ctx, "d")
		require.ErrorIs(t, err, pool.ErrClosed)
		_, err = p.Lookup(ctx, "zzz")
		require.ErrorIs(t, err, pool.ErrClosed)
	})
}

// A restart from disk: the bbolt file closed and opened again by a new
// process's pool finds every allocation, checkpoint and the cursor.
func TestRestartFromDisk(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "meta.db")
	backend := pool.Backend{Name: "memory"}
	cfg := pool.Config{Size: 3, Prefix: "disk-"}
	s, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	p, err := pool.Open(ctx, s, backend, cfg, pool.Options{})
	require.NoError(t, err)
	first, err := p.Allocate(ctx, "a", "b")
	require.NoError(t, err)
	cp := cursor.Checkpoint{Position: message.NewSeqID("memory", 7), TimeTick: 7}
	require.NoError(t, p.SaveCheckpoint(ctx, "a", 2, cp))
	require.NoError(t, p.Close())
	require.NoError(t, s.Close())

	s2, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, s2.Close()) }()
	p2, err := pool.Open(ctx, s2, backend, cfg, pool.Options{})
	require.NoError(t, err)
	defer func() { _ = p2.Close() }()
	require.Equal(t, allocations(t, first), allocations(t, mustLookupAll(t, p2, []string{"a", "b"})))
	next, err := p2.Allocate(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, "disk-2", next[0].PChannel, "the round-robin cursor survived")
	text, term, err := p2.Checkpoint(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 2, term)
	require.Equal(t, cp.Marshal(), text)
}

// A closed store, and an etcd that went away, are clear errors and change
// nothing.
func TestStoreClosedOrUnreachable(t *testing.T) {
	ctx := testCtx(t)
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
	require.NoError(t, err)
	p := openPool(t, s, pool.Backend{Name: "memory"}, pool.Config{Size: 2}, pool.Options{})
	require.NoError(t, s.Close())
	_, err = p.Allocate(ctx, "a")
	require.ErrorIs(t, err, meta.ErrClosed)
	_, err = pool.Open(ctx, s, pool.Backend{Name: "memory"}, pool.Config{Size: 2}, pool.Options{})
	require.ErrorIs(t, err, meta.ErrClosed)

	own := etcdtest.Start(t)
	cli := etcdtest.Client(t, own.Endpoints())
	es, err := etcdstore.New(cli, etcdstore.Options{Prefix: etcdtest.Prefix(t), RequestTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = es.Close() })
	pe := openPool(t, es, pool.Backend{Name: "memory"}, pool.Config{Size: 2}, pool.Options{})
	_, err = pe.Allocate(ctx, "before")
	require.NoError(t, err)
	own.Close()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = pe.Allocate(short, "after")
	require.ErrorIs(t, err, meta.ErrUnavailable)
	_, err = pe.Lookup(short, "after")
	require.ErrorIs(t, err, meta.ErrUnavailable, "nothing allocated, and still unreachable")
}
