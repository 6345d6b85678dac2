package etcdstore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/meta/metatest"
)

// srv is the package's etcd server; each test works under its own prefix.
var srv *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdtest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(etcdtest.Main(m, srv))
}

// factory makes stores under fresh prefixes of srv, each on a client of
// its own; Restart opens the prefix again on a new client.
type factory struct {
	opts     etcdstore.Options
	mu       sync.Mutex
	prefixes map[meta.Store]string
}

func newFactory(opts etcdstore.Options) *factory {
	return &factory{opts: opts, prefixes: map[meta.Store]string{}}
}

func (f *factory) open(t *testing.T, prefix string) meta.Store {
	opts := f.opts
	opts.Prefix = prefix
	s, err := etcdstore.New(etcdtest.Client(t, srv.Endpoints()), opts)
	require.NoError(t, err)
	f.mu.Lock()
	f.prefixes[s] = prefix
	f.mu.Unlock()
	return s
}

func (f *factory) New(t *testing.T) meta.Store { return f.open(t, etcdtest.Prefix(t)) }

func (f *factory) Restart(t *testing.T, s meta.Store) meta.Store {
	f.mu.Lock()
	prefix := f.prefixes[s]
	f.mu.Unlock()
	require.NoError(t, s.Close())
	return f.open(t, prefix)
}

func TestConformance(t *testing.T) {
	metatest.Run(t, newFactory(etcdstore.Options{}))
}

// TestConformancePaged runs the suite with List reading three keys per
// request, so that every List of more keys is paged.
func TestConformancePaged(t *testing.T) {
	metatest.Run(t, newFactory(etcdstore.Options{ListPageSize: 3}))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns a store on cli under prefix, closed at the end of the
// test (before cli, whose cleanup was registered first).
func newStore(t *testing.T, cli *clientv3.Client, opts etcdstore.Options) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(cli, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestOptionsValidate(t *testing.T) {
	require.NoError(t, etcdstore.Options{}.Validate())
	require.Error(t, etcdstore.Options{RequestTimeout: -1}.Validate())
	require.Error(t, etcdstore.Options{ListPageSize: -1}.Validate())
	_, err := etcdstore.New(nil, etcdstore.Options{})
	require.ErrorIs(t, err, meta.ErrInvalid)
	_, err = etcdstore.New(etcdtest.Client(t, srv.Endpoints()), etcdstore.Options{RequestTimeout: -1})
	require.ErrorIs(t, err, meta.ErrInvalid)
}

func TestPrefixIsolation(t *testing.T) {
	ctx := ctxT(t)
	cli := etcdtest.Client(t, srv.Endpoints())
	base := etcdtest.Prefix(t)
	a := newStore(t, cli, etcdstore.Options{Prefix: base + "a/"})
	b := newStore(t, cli, etcdstore.Options{Prefix: base + "b/"})

	ra, err := a.Put(ctx, "k", []byte("in a"), meta.Absent)
	require.NoError(t, err)
	_, err = b.Get(ctx, "k")
	require.ErrorIs(t, err, meta.ErrNotFound, "b sees a's key")
	rb, err := b.Put(ctx, "k", []byte("in b"), meta.Absent)
	require.NoError(t, err, "a's key blocks b's")
	_, err = a.Put(ctx, "k", []byte("x"), meta.Absent)
	require.ErrorIs(t, err, meta.ErrConflict)
	_, err = b.Commit(ctx, meta.Txn{Conds: []meta.Cond{{Key: "only-a", Revision: meta.Absent}}, Puts: []meta.KV{{Key: "only-b"}}})
	require.NoError(t, err)
	_, err = a.Put(ctx, "only-a", nil, meta.Absent)
	require.NoError(t, err)
	require.NoError(t, b.Delete(ctx, "only-a", meta.Absent), "b sees a's only-a")

	kvs, _, err := a.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []meta.KV{{Key: "k", Value: []byte("in a"), Revision: ra}, {Key: "only-a", Revision: kvs[1].Revision}}, kvs)
	kvs, _, err = b.List(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, []meta.KV{{Key: "k", Value: []byte("in b"), Revision: rb}}, kvs)

	// In etcd, the keys are under the prefixes.
	resp, err := cli.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var raw []string
	for _, kv := range resp.Kvs {
		raw = append(raw, string(kv.Key))
	}
	require.Equal(t, []string{base + "a/k", base + "a/only-a", base + "b/k", base + "b/only-b"}, raw)
}

func TestCloseLeavesClientOpen(t *testing.T) {
	ctx := ctxT(t)
	cli := etcdtest.Client(t, srv.Endpoints())
	s := newStore(t, cli, etcdstore.Options{Prefix: etcdtest.Prefix(t)})
	require.NoError(t, s.Close())
	_, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, meta.ErrClosed)
	_, err = cli.Get(ctx, "k")
	require.NoError(t, err, "Close closed the caller's client")
}

func TestTooLarge(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, etcdtest.Client(t, srv.Endpoints()), etcdstore.Options{Prefix: etcdtest.Prefix(t)})
	for _, n := range []int{1600 << 10, 3 << 20} { // above the server's, then the client's limit
		_, err := s.Put(ctx, "big", make([]byte, n), meta.Any)
		require.ErrorIs(t, err, meta.ErrInvalid, "a value of %d bytes", n)
	}
	_, err := s.Get(ctx, "big")
	require.ErrorIs(t, err, meta.ErrNotFound)
}

// TestListSurvivesCompaction lists in pages of two keys while another
// client writes and compacts the history away under it: a List whose
// first page's revision is compacted starts over, and every List is
// complete and right.
func TestListSurvivesCompaction(t *testing.T) {
	ctx := ctxT(t)
	cli := etcdtest.Client(t, srv.Endpoints())
	prefix := etcdtest.Prefix(t)
	s := newStore(t, cli, etcdstore.Options{Prefix: prefix, ListPageSize: 2})
	const keys = 20
	for i := range keys {
		_, err := s.Put(ctx, fmt.Sprintf("k%02d", i), []byte("v"), meta.Absent)
		require.NoError(t, err)
	}
	other := etcdtest.Client(t, srv.Endpoints())
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			resp, err := other.Put(ctx, prefix+"x/churn", fmt.Sprint(i))
			if err == nil {
				_, err = other.Compact(ctx, resp.Header.Revision)
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	for range 30 {
		kvs, rev, err := s.List(ctx, "k")
		require.NoError(t, err)
		require.Len(t, kvs, keys)
		for i, kv := range kvs {
			require.Equal(t, fmt.Sprintf("k%02d", i), kv.Key)
			require.LessOrEqual(t, kv.Revision, rev)
		}
	}
	close(stop)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the compacting goroutine did not stop")
	}
}
