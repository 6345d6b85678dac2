package walmanager_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walmanager"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is one streaming node: its own backend client and its own manager.
type node struct {
	name    string
	backend walimpls.Opener
	mgr     *walmanager.Manager
}

func newNode(t *testing.T, name string, backend walimpls.Opener) *node {
	t.Helper()
	open := walmanager.WALOpenerFunc(func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
		return adaptor.Open(ctx, backend, ch, adaptor.Options{Logger: quiet})
	})
	mgr, err := walmanager.New(open, walmanager.Options{CloseGracePeriod: 5 * time.Second})
	require.NoError(t, err)
	return &node{name: name, backend: backend, mgr: mgr}
}

// appendRecord is one Append of an appender: when it was called, when it
// returned, and how.
type appendRecord struct {
	call, ret time.Time
	err       error
}

// runAppenders appends to w from n goroutines until their first failure
// (the owner is fenced) or stop, and returns what happened.
func runAppenders(w adaptor.WAL, n int, stop <-chan struct{}) func() []appendRecord {
	var mu sync.Mutex
	var recs []appendRecord
	var wg sync.WaitGroup
	ctx := context.Background()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				m, _ := message.New([]byte(fmt.Sprintf("%d-%d", i, seq)), nil)
				r := appendRecord{call: time.Now()}
				_, r.err = w.Append(ctx, m)
				r.ret = time.Now()
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
				if r.err != nil {
					return
				}
				// Keep the load light: the machine is shared.
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	return func() []appendRecord {
		wg.Wait()
		return recs
	}
}

// TestTwoNodeTakeoverMemory: node A owns a channel with 4 appenders
// running; node B opens the next term. From the moment B's Open returns no
// append of A is acknowledged, and no scanner on either node delivers a
// message of A after B's term-begin. Repeated 50 times, alternating owners;
// the takeover time (B's Open call) is reported.
func TestTwoNodeTakeoverMemory(t *testing.T) {
	const takeovers = 50
	cluster := memory.NewCluster()
	nodes := [2]*node{}
	for i, name := range []string{"A", "B"} {
		op, err := memory.NewOpener(cluster, memory.Config{})
		require.NoError(t, err)
		nodes[i] = newNode(t, name, op)
	}
	ctx := context.Background()
	const chName = "takeover"

	require.NoError(t, nodes[0].mgr.Open(ctx, walmanager.Channel{Name: chName, Term: 1}))
	var took []time.Duration
	for i := range takeovers {
		owner, next := nodes[i%2], nodes[(i+1)%2]
		term := int64(i + 1)
		w, err := owner.mgr.GetAvailableWAL(walmanager.Channel{Name: chName, Term: term})
		require.NoError(t, err)
		stop := make(chan struct{})
		wait := runAppenders(w, 4, stop)
		time.Sleep(5 * time.Millisecond) // let the appenders get going

		start := time.Now()
		require.NoError(t, next.mgr.Open(ctx, walmanager.Channel{Name: chName, Term: term + 1}))
		returned := time.Now()
		took = append(took, returned.Sub(start))

		// Appenders end at their first failure; stop the ones that were
		// between appends when the fence came, after a moment.
		time.Sleep(2 * time.Millisecond)
		close(stop)
		for _, r := range wait() {
			if r.call.After(returned) {
				require.Error(t, r.err, "takeover %d: an append of term %d started after term %d opened was acknowledged", i, term, term+1)
			}
			if r.err != nil {
				require.True(t, errors.Is(r.err, walimpls.ErrFenced) || errors.Is(r.err, walimpls.ErrClosed),
					"takeover %d: append failed with %v", i, r.err)
			}
		}
		// The old owner's manager notices the fence on its own.
		require.Eventually(t, func() bool {
			st, _ := statusOf(owner.mgr, chName)
			return st.State == walmanager.StateUnavailable && st.LastError != nil
		}, 10*time.Second, time.Millisecond, "takeover %d: node %s did not notice the fence", i, owner.name)
		_, err = owner.mgr.GetAvailableWAL(walmanager.Channel{Name: chName, Term: term})
		require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable)
		// The coordinator tells the old owner to let go.
		require.NoError(t, owner.mgr.Remove(ctx, walmanager.Channel{Name: chName, Term: term}))
	}

	// Scanners on both nodes, over the whole log: no data message of a term
	// is delivered after a term-begin of a higher term.
	last := nodes[takeovers%2]
	w, err := last.mgr.GetAvailableWAL(walmanager.Channel{Name: chName, Term: takeovers + 1})
	require.NoError(t, err)
	end, _ := message.New([]byte("end"), nil)
	_, err = w.Append(ctx, end)
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))
	for _, n := range nodes {
		ro, err := adaptor.Open(ctx, n.backend, adaptor.Channel{Name: chName, Term: takeovers + 1}, adaptor.Options{ReadOnly: true, Logger: quiet})
		require.NoError(t, err)
		s, err := ro.Read(ctx, adaptor.ReadOption{Name: "check", Filter: adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTermBegin}}})
		require.NoError(t, err)
		var fence int64 = -1
		data := 0
		timeout := time.After(30 * time.Second)
	read:
		for {
			select {
			case m, ok := <-s.Chan():
				require.True(t, ok, "node %s: scanner ended: %v", n.name, s.Error())
				mt, _ := m.Term()
				if m.Kind() == message.KindTermBegin {
					fence = max(fence, mt)
					continue
				}
				data++
				require.GreaterOrEqual(t, mt, fence, "node %s: data of term %d delivered after the term-begin of %d", n.name, mt, fence)
				if string(m.Payload()) == "end" {
					break read
				}
			case <-timeout:
				t.Fatalf("node %s: scanner did not reach the end marker", n.name)
			}
		}
		require.NoError(t, s.Close())
		require.NoError(t, ro.Close())
		t.Logf("node %s: %d data messages read in term order up to term %d", n.name, data, fence)
	}

	for _, n := range nodes {
		require.NoError(t, n.mgr.Close(ctx))
		require.NoError(t, n.backend.Close())
	}
	slices.Sort(took)
	t.Logf("memory backend: takeover (B's Open) over %d takeovers: p50 %s, p99 %s, max %s",
		takeovers, took[len(took)/2], took[len(took)*99/100], took[len(took)-1])
}
