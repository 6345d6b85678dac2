package etcdstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

// slack is how much later than its deadline a call may return on a
// loaded machine.
const slack = 2 * time.Second

// TestUnavailable stops a dedicated server under a store: every call then
// fails with ErrUnavailable by its deadline (the caller's, or the store's
// RequestTimeout), keeping the cause; a caller's cancel is its own error;
// Close ends a blocked call with ErrClosed.
func TestUnavailable(t *testing.T) {
	own := etcdtest.Start(t)
	cli := etcdtest.Client(t, own.Endpoints())
	s := newStore(t, cli, etcdstore.Options{RequestTimeout: 400 * time.Millisecond})
	rev, err := s.Put(ctxT(t), "k", []byte("v"), meta.Absent)
	require.NoError(t, err)
	own.Close()

	calls := map[string]func(ctx context.Context) error{
		"Get": func(ctx context.Context) error { _, err := s.Get(ctx, "k"); return err },
		"List": func(ctx context.Context) error {
			_, _, err := s.List(ctx, "")
			return err
		},
		"Put":    func(ctx context.Context) error { _, err := s.Put(ctx, "k", []byte("w"), rev); return err },
		"Delete": func(ctx context.Context) error { return s.Delete(ctx, "k", rev) },
		"Commit": func(ctx context.Context) error {
			_, err := s.Commit(ctx, meta.Txn{Puts: []meta.KV{{Key: "x"}}})
			return err
		},
	}
	t.Run("calls", func(t *testing.T) {
		for name, call := range calls {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				// The caller's deadline, shorter than RequestTimeout.
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				start := time.Now()
				err := call(ctx)
				took := time.Since(start)
				cancel()
				require.ErrorIs(t, err, meta.ErrUnavailable, "with a deadline")
				require.ErrorIs(t, err, context.DeadlineExceeded, "the cause is kept")
				require.Less(t, took, 200*time.Millisecond+slack, "returned long after its deadline")

				// No deadline: RequestTimeout.
				start = time.Now()
				err = call(context.Background())
				took = time.Since(start)
				require.ErrorIs(t, err, meta.ErrUnavailable, "without a deadline")
				require.Less(t, took, 400*time.Millisecond+slack, "returned long after RequestTimeout")

				// The caller cancels: its own error, not "unavailable".
				ctx, cancel = context.WithCancel(context.Background())
				stop := time.AfterFunc(50*time.Millisecond, cancel)
				err = call(ctx)
				stop.Stop()
				cancel()
				require.ErrorIs(t, err, context.Canceled, "cancelled")
				require.NotErrorIs(t, err, meta.ErrUnavailable, "cancelled by its caller")
			})
		}
	})

	// Close ends a call waiting for the server.
	s2 := newStore(t, cli, etcdstore.Options{RequestTimeout: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, err := s2.Get(context.Background(), "k")
		errc <- err
	}()
	time.AfterFunc(50*time.Millisecond, func() { _ = s2.Close() })
	select {
	case err := <-errc:
		require.ErrorIs(t, err, meta.ErrClosed)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Close did not end a call waiting for a stopped server")
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, etcdstore.Config{Endpoints: []string{"http://127.0.0.1:2379"}}.Validate())
	for name, c := range map[string]etcdstore.Config{
		"no endpoints":      {},
		"empty endpoint":    {Endpoints: []string{""}},
		"negative timeout":  {Endpoints: []string{"x"}, DialTimeout: -1},
		"negative keep":     {Endpoints: []string{"x"}, KeepAliveTime: -1},
		"user, no password": {Endpoints: []string{"x"}, Username: "u"},
	} {
		require.Error(t, c.Validate(), name)
		_, err := etcdstore.Dial(context.Background(), c)
		require.ErrorIs(t, err, meta.ErrInvalid, name)
	}
}

func TestDial(t *testing.T) {
	ctx := ctxT(t)
	cli, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: srv.Endpoints()})
	require.NoError(t, err)
	defer func() { require.NoError(t, cli.Close()) }()
	s := newStore(t, cli, etcdstore.Options{Prefix: etcdtest.Prefix(t)})
	_, err = s.Put(ctx, "k", nil, meta.Absent)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestDialUnreachable(t *testing.T) {
	// A loopback port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	start := time.Now()
	cli, err := etcdstore.Dial(context.Background(), etcdstore.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 300 * time.Millisecond})
	if cli != nil {
		_ = cli.Close()
	}
	require.ErrorIs(t, err, meta.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 300*time.Millisecond+slack)

	// The caller's context ends first.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	cli, err = etcdstore.Dial(ctx, etcdstore.Config{Endpoints: []string{"http://" + addr}})
	if cli != nil {
		_ = cli.Close()
	}
	require.ErrorIs(t, err, meta.ErrUnavailable)
	require.Less(t, time.Since(start), 100*time.Millisecond+slack)
}
