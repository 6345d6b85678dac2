package chain_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eachStore runs f as a subtest on bbolt and on etcd, each time on a fresh,
// empty store; each call of open is another process on the same data (on
// bbolt, which one process holds, the same store).
func eachStore(t *testing.T, f func(t *testing.T, open func() meta.Store)) {
	t.Run("bolt", func(t *testing.T) {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		f(t, func() meta.Store { return s })
	})
	t.Run("etcd", func(t *testing.T) {
		prefix := etcdtest.Prefix(t)
		f(t, func() meta.Store {
			s, err := etcdstore.New(etcdtest.Client(t, srv.Endpoints()), etcdstore.Options{Prefix: prefix})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
	})
}

// tickingClock is a fake clock that moves one second per reading, so that
// every time the store records differs from the one before. The mutex makes
// advancing and reading one step for concurrent readers.
type tickingClock struct {
	*clockwork.FakeClock
	mu sync.Mutex
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Advance(time.Second)
	return c.FakeClock.Now()
}

func newStore(kv meta.Store) *chain.Store {
	c := &tickingClock{FakeClock: clockwork.NewFakeClockAt(time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC))}
	return chain.NewStore(kv, chain.Options{Clock: c})
}

var (
	local = chain.Backend{Name: "local", Kind: "local", Channel: "orders", Params: json.RawMessage(`{"dir":"./data"}`)}
	kafka = func(ch string) chain.Backend {
		return chain.Backend{Name: "kafka", Kind: "kafka", Channel: ch, Params: json.RawMessage(`{"seedBrokers":["10.0.0.1:9092"]}`)}
	}
	pulsar = func(ch string) chain.Backend { return chain.Backend{Name: "pulsar", Kind: "pulsar", Channel: ch} }
)

// at is a fixed time for chains built by hand.
var at = time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)

// threeSegments is a valid chain: local (terms 1..4), kafka (4..9),
// pulsar (9..), a migration back to local pending at term 12.
func threeSegments() chain.Chain {
	return chain.Chain{
		Channel: "orders",
		Segments: []chain.Segment{
			{Index: 0, Backend: local, FirstTerm: 1, Created: at, Seal: &chain.Seal{Term: 4, End: "17", TimeTick: 100, At: at}},
			{Index: 1, Backend: kafka("orders-s1"), FirstTerm: 4, Created: at, Seal: &chain.Seal{Term: 9, End: "3", TimeTick: 250, At: at}},
			{Index: 2, Backend: pulsar("orders-s2"), FirstTerm: 9, Created: at},
		},
		Pending: &chain.Migration{Target: chain.Backend{Name: "local", Kind: "local", Channel: "orders-s3"}, Term: 12, By: "walctl@ops-1", At: at},
	}
}
