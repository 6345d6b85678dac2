package client_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
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

const testTimeout = 60 * time.Second

func startNode(t *testing.T, cli *clientv3.Client, root string, mem *memory.Cluster, id string) *node.Node {
	o, err := memory.New(context.Background(), memory.Config{Cluster: mem})
	require.NoError(t, err)
	n, err := node.New(cli, o, node.Config{ID: id, Root: root, SessionTTL: 2 * time.Second, Backend: "memory"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
		_ = o.Close()
	})
	return n
}

func assign(t testing.TB, cli *clientv3.Client, l cluster.Layout, channel, nodeID string, term int64) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	a := cluster.Assignment{Channel: channel, Node: nodeID, Term: term, State: cluster.Assigning}
	_, err := cli.Put(ctx, l.Assignment(channel), string(cluster.Encode(a)))
	require.NoError(t, err)
}

// Appenders write through the client while the channel moves between two
// nodes three times; a reader follows the owner. Every acknowledged append
// is read exactly once, each appender's in its order.
func TestAppendAndReadAcrossMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	mem := memory.NewCluster()
	startNode(t, cli, l.Root, mem, "a")
	startNode(t, cli, l.Root, mem, "b")
	assign(t, cli, l, "orders", "a", 1)

	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root})
	require.NoError(t, err)
	defer c.Close()

	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		errs  = make(chan error, 4)
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("g%d-%05d", g, i)
				_, err := c.Append(ctx, "orders", client.Message{Payload: []byte(p)}, client.Options{})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", p, err)
					return
				}
				mu.Lock()
				acked[p] = true
				mu.Unlock()
			}
		}()
	}
	waitAcked := func(n int) {
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= n
		}, testTimeout, time.Millisecond)
	}
	for i, owner := range []string{"b", "a", "b"} {
		waitAcked(100 * (i + 1))
		assign(t, cli, l, "orders", owner, int64(i+2))
	}
	waitAcked(400)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	mu.Lock()
	want := len(acked)
	mu.Unlock()
	seen := map[string]int{}
	last := map[string]string{}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	err = c.Read(rctx, "orders", client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
		p := string(d.GetPayload())
		seen[p]++
		g := p[:strings.Index(p, "-")]
		if prev := last[g]; prev >= p {
			return errors.Newf("%s delivered after %s", p, prev)
		}
		last[g] = p
		if len(seen) >= want {
			rcancel()
		}
		return nil
	})
	require.NoError(t, err)
	for p := range acked {
		require.Equalf(t, 1, seen[p], "acknowledged %s delivered %d times", p, seen[p])
	}
	for p, n := range seen {
		require.Equalf(t, 1, n, "%s delivered %d times", p, n)
	}
}

// Read with UntilCaughtUp returns once it delivered what was acknowledged
// before it started, across a move of the channel too; Last delivers only
// the last messages, and a Position starts a read at its message.
func TestReadUntilCaughtUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	mem := memory.NewCluster()
	startNode(t, cli, l.Root, mem, "a")
	startNode(t, cli, l.Root, mem, "b")
	assign(t, cli, l, "orders", "a", 1)
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root})
	require.NoError(t, err)
	defer c.Close()
	var want []string
	for i := range 20 {
		p := fmt.Sprintf("m%02d", i)
		_, err := c.Append(ctx, "orders", client.Message{Payload: []byte(p)}, client.Options{})
		require.NoError(t, err)
		want = append(want, p)
		if i == 9 {
			assign(t, cli, l, "orders", "b", 2) // the appends follow the owner
		}
	}
	read := func(opts client.ReadOptions) (got []string, ds []*streamwalv1.Delivered) {
		require.NoError(t, c.Read(ctx, "orders", opts, func(d *streamwalv1.Delivered) error {
			got = append(got, string(d.GetPayload()))
			ds = append(ds, d)
			return nil
		}))
		return got, ds
	}
	got, ds := read(client.ReadOptions{UntilCaughtUp: true})
	require.Equal(t, want, got)
	got, _ = read(client.ReadOptions{UntilCaughtUp: true, Last: 5})
	require.Equal(t, want[15:], got)
	got, _ = read(client.ReadOptions{UntilCaughtUp: true, After: ds[12].GetPosition()})
	require.Equal(t, want[12:], got)
	got, _ = read(client.ReadOptions{UntilCaughtUp: true, Last: 3, After: ds[12].GetPosition()})
	require.Equal(t, want[17:], got)

	// A read that cannot catch up before its context ends says so.
	short, scancel := context.WithCancel(ctx)
	scancel()
	err = c.Read(short, "orders", client.ReadOptions{UntilCaughtUp: true}, func(*streamwalv1.Delivered) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	// Refusals, for the standard errors.Is and cockroachdb's alike.
	err = c.Read(ctx, "orders", client.ReadOptions{Last: -1}, nil)
	errmarktest.Is(t, err, client.ErrRefused)
	err = c.Read(ctx, "orders", client.ReadOptions{Last: 20000}, nil)
	errmarktest.Is(t, err, client.ErrRefused)
}
