package pool_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
)

const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// storeKind makes the stores of one test: each call of the function it
// returns is another process on the same data (on bbolt, which one process
// holds, the same store).
type storeKind struct {
	name  string
	store func(t testing.TB) func() meta.Store
}

var storeKinds = []storeKind{
	{"bolt", func(t testing.TB) func() meta.Store {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return func() meta.Store { return s }
	}},
	{"etcd", func(t testing.TB) func() meta.Store {
		prefix := etcdtest.Prefix(t)
		return func() meta.Store {
			cli := etcdtest.Client(t, srv.Endpoints())
			s, err := etcdstore.New(cli, etcdstore.Options{Prefix: prefix})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}},
}

// eachStore runs f as a subtest per store kind.
func eachStore(t *testing.T, f func(t *testing.T, stores func() meta.Store)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.store(t)) })
	}
}

// countingCreator counts Create calls per channel and can refuse them.
type countingCreator struct {
	walimpls.Opener // nil: only Create is used
	inner           walimpls.Creator

	mu     sync.Mutex
	calls  map[string]int
	refuse map[string]error
}

func newCountingCreator(inner walimpls.Creator) *countingCreator {
	return &countingCreator{inner: inner, calls: map[string]int{}, refuse: map[string]error{}}
}

func (c *countingCreator) Create(ctx context.Context, name string) error {
	c.mu.Lock()
	c.calls[name]++
	err := c.refuse[name]
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if c.inner != nil {
		return c.inner.Create(ctx, name)
	}
	return nil
}

func (c *countingCreator) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func (c *countingCreator) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}

func openPool(t *testing.T, s meta.Store, backend pool.Backend, cfg pool.Config, opts pool.Options) *pool.Pool {
	t.Helper()
	p, err := pool.Open(testCtx(t), s, backend, cfg, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// kafkaOpener starts kfake and returns an opener on it.
func kafkaOpener(t *testing.T) (*kafka.Opener, *kfake.Cluster) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	o, err := kafka.New(testCtx(t), kafka.Config{
		SeedBrokers:    c.ListenAddrs(),
		MetadataMinAge: 10 * time.Millisecond,
		RetryBackoff:   10 * time.Millisecond,
		CreateTimeout:  10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o, c
}

// allocations maps vchannel → pchannel.
func allocations(t *testing.T, as []pool.Allocation) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range as {
		out[a.VChannel] = a.PChannel
	}
	return out
}
