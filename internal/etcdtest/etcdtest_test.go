package etcdtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServer(t *testing.T) {
	srv := etcdtest.Start(t)
	require.NotEmpty(t, srv.Endpoints())
	cli := etcdtest.Client(t, srv.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := cli.Put(ctx, "/k", "v")
	require.NoError(t, err)
	resp, err := cli.Get(ctx, "/k")
	require.NoError(t, err)
	require.Equal(t, "v", string(resp.Kvs[0].Value))

	// Short leases are possible with the fast timings.
	lease, err := cli.Grant(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), lease.TTL)

	// Once the server is closed, clients fail by their deadline.
	srv.Close()
	srv.Close() // idempotent
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	_, err = cli.Get(short, "/k")
	require.Error(t, err)
}

func TestPrefix(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		p := etcdtest.Prefix(t)
		require.True(t, strings.HasSuffix(p, "/"))
		for q := range seen {
			require.False(t, strings.HasPrefix(p, q) || strings.HasPrefix(q, p), "%q and %q", p, q)
		}
		seen[p] = true
	}
}
