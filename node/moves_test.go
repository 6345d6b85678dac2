package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// Planned moves under load, on backends several nodes of one process
// share: one appender per channel writes through the client while the
// channels are moved 100 times (walctl move). Every move's latency - from
// the request to the first append the new owner acknowledges - is
// reported, and every acknowledged append is read back once, in order.
func TestPlannedMovesUnderLoad(t *testing.T) {
	backends := []struct {
		name    string
		openers func(t *testing.T) func() walimpls.Opener
	}{
		{"memory", func(t *testing.T) func() walimpls.Opener {
			mem := memory.NewCluster()
			return func() walimpls.Opener {
				o, err := memory.New(context.Background(), memory.Config{Cluster: mem})
				require.NoError(t, err)
				return o
			}
		}},
		{"local", func(t *testing.T) func() walimpls.Opener {
			s, err := local.New(context.Background(), local.Config{Dir: t.TempDir(), Sync: local.SyncNone})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return func() walimpls.Opener { return s.NewOpener() }
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { plannedMoves(t, b.openers(t)) })
	}
}

func plannedMoves(t *testing.T, newOpener func() walimpls.Opener) {
	const (
		channels = 4
		moves    = 100
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	layout, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	for i := range 3 {
		o := newOpener()
		n, err := node.New(cli, o, node.Config{ID: fmt.Sprintf("m%d", i), Root: layout.Root, SessionTTL: 2 * time.Second})
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
			defer scancel()
			require.NoError(t, n.Shutdown(sctx))
			_ = o.Close()
		})
	}
	var names []string
	for i := range channels {
		names = append(names, fmt.Sprintf("mv-%d", i))
	}
	co, err := coordinator.New(cli, coordinator.Config{ID: "coord", Root: layout.Root, SessionTTL: 2 * time.Second,
		Channels: coordinator.StaticChannels(names...)})
	require.NoError(t, err)
	cctx, ccancel := context.WithCancel(context.Background())
	coDone := make(chan error, 1)
	go func() { coDone <- co.Run(cctx) }()
	defer func() { ccancel(); require.NoError(t, <-coDone) }()

	c, err := client.New(ctx, client.Config{Etcd: cli, Root: layout.Root, Retry: backoff.Config{Initial: time.Millisecond, Max: 10 * time.Millisecond}})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.View().WaitFor(ctx, func(s cluster.Snapshot) bool {
		n := 0
		for _, a := range s.Assignments {
			if a.Value.State == cluster.Assigned {
				n++
			}
		}
		return n == channels
	})
	require.NoError(t, err)

	type ack struct {
		at   time.Time
		term int64
	}
	var (
		mu    sync.Mutex
		acks  = map[string][]ack{}
		acked = map[string][]string{}
		wg    sync.WaitGroup
	)
	actx, stopAppends := context.WithCancel(ctx)
	for _, ch := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; actx.Err() == nil; i++ {
				p := fmt.Sprintf("%s-%06d", ch, i)
				r, err := c.Append(actx, ch, client.Message{Payload: []byte(p)}, client.Options{})
				if err != nil {
					return
				}
				mu.Lock()
				acks[ch] = append(acks[ch], ack{at: time.Now(), term: r.Term})
				acked[ch] = append(acked[ch], p)
				mu.Unlock()
			}
		}()
	}
	var latencies []time.Duration
	for i := range moves {
		ch := names[i%channels]
		s, _ := c.View().Snapshot()
		term := s.Assignments[ch].Value.Term
		start := time.Now()
		require.NoError(t, coordinator.RequestMove(ctx, cli, layout, ch, ""))
		var first time.Time
		require.Eventuallyf(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, a := range acks[ch] {
				if a.term > term && !a.at.Before(start) {
					first = a.at
					return true
				}
			}
			return false
		}, time.Minute, time.Millisecond, "move %d of %s never acknowledged on the new owner", i, ch)
		latencies = append(latencies, first.Sub(start))
	}
	stopAppends()
	wg.Wait()
	slices.Sort(latencies)
	t.Logf("%d planned moves under load: request → first append acknowledged by the new owner: p50 %s, p99 %s, max %s",
		moves, latencies[moves/2].Round(100*time.Microsecond), latencies[moves*99/100].Round(100*time.Microsecond), latencies[moves-1].Round(100*time.Microsecond))

	for _, ch := range names {
		mu.Lock()
		want := slices.Clone(acked[ch])
		mu.Unlock()
		var got []string
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		err := c.Read(rctx, ch, client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
			got = append(got, string(d.GetPayload()))
			if string(d.GetPayload()) == want[len(want)-1] {
				rcancel()
			}
			return nil
		})
		rcancel()
		require.NoError(t, err)
		if i := slices.Index(got, want[len(want)-1]); i >= 0 {
			got = got[:i+1]
		}
		require.Equalf(t, want, got, "channel %s: acknowledged appends once, in order", ch)
	}
}
