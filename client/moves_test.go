package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// An append whose owner stalls in the middle of it - its backend append
// of the message blocks, deaf to every context, as in a stopped process -
// is resolved at the new owner as soon as the channel moves there, while
// the stalled owner still holds it: the client abandons the attempt and
// retries with the same key. Stalled after storing the message, the new
// owner finds that copy (a duplicate at the old term); stalled before,
// the new owner stores it, and the old owner, once it runs again, stores
// nothing: its WAL is fenced (or closed by its node, which saw the move). Either way the message is read once.
func TestAppendFollowsMoveAwayFromStalledOwner(t *testing.T) {
	for _, tc := range []struct {
		name       string
		storeFirst bool
	}{
		{"stalled after storing", true},
		{"stalled before storing", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cli := etcdtest.Client(t, srv.Endpoints())
			l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
			require.NoError(t, err)
			mem := memory.NewCluster()
			st := &stall{payload: []byte("stalled"), storeFirst: tc.storeFirst,
				entered: make(chan struct{}), release: make(chan struct{}), result: make(chan error, 1)}
			startStallingNode(t, cli, l.Root, mem, "a", st)
			startNode(t, cli, l.Root, mem, "b")
			assign(t, cli, l, "ch", "a", 1)
			released := false
			t.Cleanup(func() { // before the nodes' shutdown
				if !released {
					close(st.release)
				}
			})

			// No response-header timeout: without following the move, the
			// append would wait for its context.
			c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root, HTTP: &http.Client{Transport: &http.Transport{}}})
			require.NoError(t, err)
			defer c.Close()
			_, err = c.Append(ctx, "ch", client.Message{Payload: []byte("before")}, client.Options{})
			require.NoError(t, err)

			done := make(chan error, 1)
			var res client.Result
			go func() {
				var err error
				res, err = c.Append(ctx, "ch", client.Message{Payload: []byte("stalled")}, client.Options{})
				done <- err
			}()
			select {
			case <-st.entered:
			case err := <-done:
				t.Fatalf("the append ended before its owner stalled: %v", err)
			}
			assign(t, cli, l, "ch", "b", 2)
			require.NoError(t, <-done, "the append did not resolve at the new owner while the old one stalled")
			require.Equal(t, "b", res.Node)
			if tc.storeFirst {
				require.True(t, res.Duplicate, "the new owner stored a second copy")
				require.EqualValues(t, 1, res.Term, "the copy the stalled owner stored")
			} else {
				require.False(t, res.Duplicate)
				require.EqualValues(t, 2, res.Term)
			}

			// The stalled owner runs again.
			close(st.release)
			released = true
			if err := <-st.result; !tc.storeFirst {
				// Fenced, or closed first by its node that saw the move.
				require.Truef(t, errors.Is(err, walimpls.ErrFenced) || errors.Is(err, walimpls.ErrClosed),
					"the old owner's append after the new owner's open: %v", err)
			}
			_, err = c.Append(ctx, "ch", client.Message{Payload: []byte("after")}, client.Options{})
			require.NoError(t, err)
			var got []string
			require.NoError(t, c.Read(ctx, "ch", client.ReadOptions{UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
				got = append(got, string(d.GetPayload()))
				return nil
			}))
			require.Equal(t, []string{"before", "stalled", "after"}, got)
		})
	}
}

// stall makes the backend appends of one payload block until released,
// whatever their context says: a stopped process.
type stall struct {
	payload    []byte
	storeFirst bool // block after storing, else before
	entered    chan struct{}
	release    chan struct{}
	result     chan error // the stalled backend append's error, once released
}

type stallingWAL struct {
	walimpls.WALImpl // only the interface: the adaptor appends through AppendBatch
	s                *stall
}

func (w stallingWAL) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	if len(msgs) != 1 || !bytes.Equal(msgs[0].Payload(), w.s.payload) {
		return w.WALImpl.AppendBatch(ctx, msgs)
	}
	var (
		ids []message.ID
		err error
	)
	if w.s.storeFirst {
		ids, err = w.WALImpl.AppendBatch(ctx, msgs)
	}
	close(w.s.entered)
	<-w.s.release
	if !w.s.storeFirst {
		ids, err = w.WALImpl.AppendBatch(context.Background(), msgs)
	}
	w.s.result <- err
	return ids, err
}

type stallingOpener struct {
	walimpls.Opener
	s *stall
}

func (o stallingOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	w, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	return stallingWAL{WALImpl: w, s: o.s}, nil
}

func startStallingNode(t *testing.T, cli *clientv3.Client, root string, mem *memory.Cluster, id string, s *stall) {
	o, err := memory.New(context.Background(), memory.Config{Cluster: mem})
	require.NoError(t, err)
	n, err := node.New(cli, stallingOpener{Opener: o, s: s}, node.Config{ID: id, Root: root, SessionTTL: 2 * time.Second, Backend: "memory"})
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
}

// A Read that follows the tail while the channel moves between nodes ends
// its stream at each move (the old owner's stream ends with an error
// naming the new owner, or the client abandons it when the view shows the
// move first) and goes on at the new owner after the last checkpoint it
// delivered: every acknowledged append once, in order.
func TestReadFollowsTheTailAcrossMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli := etcdtest.Client(t, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	mem := memory.NewCluster()
	startNode(t, cli, l.Root, mem, "a")
	startNode(t, cli, l.Root, mem, "b")
	assign(t, cli, l, "ch", "a", 1)
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: l.Root})
	require.NoError(t, err)
	defer c.Close()

	got := make(chan string, 100)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	readDone := make(chan error, 1)
	go func() {
		readDone <- c.Read(rctx, "ch", client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
			got <- string(d.GetPayload())
			return nil
		})
	}()
	var want []string
	for term, owner := range []string{"a", "b", "a", "b"} {
		if term > 0 {
			assign(t, cli, l, "ch", owner, int64(term+1))
			_, err := c.View().WaitFor(ctx, func(s cluster.Snapshot) bool { return s.Assignments["ch"].Value.Term == int64(term+1) })
			require.NoError(t, err)
		}
		for range 10 {
			p := fmt.Sprintf("m%02d", len(want))
			r, err := c.Append(ctx, "ch", client.Message{Payload: []byte(p)}, client.Options{})
			require.NoError(t, err)
			require.EqualValues(t, term+1, r.Term)
			want = append(want, p)
		}
	}
	var read []string
	for len(read) < len(want) {
		select {
		case p := <-got:
			read = append(read, p)
		case err := <-readDone:
			t.Fatalf("the read ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("read %d of %d: %v", len(read), len(want), read)
		}
	}
	require.Equal(t, want, read)
	rcancel()
	require.NoError(t, <-readDone)
	require.Empty(t, got, "more than was appended")
}
