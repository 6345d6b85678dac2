package walimplstest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// testAppendBatch checks AppendBatch: batches from concurrent appenders are
// stored in slice order and read back whole; an empty batch stores nothing;
// a batch with a message above the limit stores nothing of it; read-only
// and closed WALs refuse batches.
func testAppendBatch(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("batch"), 1, walimpls.ReadWrite)

	ids, err := within(e, "AppendBatch of nothing", func(ctx context.Context) ([]message.ID, error) { return w.AppendBatch(ctx, nil) })
	require.NoError(t, err, "an empty batch")
	require.Empty(t, ids)
	last, err := e.last(w)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "an empty batch stored %s", last)

	const (
		writers = 4
		batches = 30
	)
	var (
		mu       sync.Mutex
		acked    = map[string]message.Message{}
		wg       sync.WaitGroup
		errs     = make(chan error, writers)
		start    = make(chan struct{})
		progress atomic.Int64
	)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for b := range batches {
				msgs := make([]message.Message, 1+(b*7+g)%16)
				for i := range msgs {
					msgs[i] = mustMessage(t, []byte(fmt.Sprintf("w%d-b%d-m%d", g, b, i)), map[string]string{"w": fmt.Sprint(g), "b": fmt.Sprint(b), "i": fmt.Sprint(i)})
					if i%2 == 0 {
						// Stamps at the edges of their types, each pair
						// in some batch.
						term, tt := edgeStamp((b*writers+g)*8 + i/2)
						msgs[i] = msgs[i].Stamp(message.KindData, term, tt)
					}
				}
				ctx, cancel := e.call()
				ids, err := w.AppendBatch(ctx, msgs)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("writer %d batch %d: %w", g, b, err)
					return
				}
				if len(ids) != len(msgs) {
					errs <- fmt.Errorf("writer %d batch %d: %d ids for %d messages", g, b, len(ids), len(msgs))
					return
				}
				for i := 1; i < len(ids); i++ {
					if !ids[i-1].LT(ids[i]) {
						errs <- fmt.Errorf("writer %d batch %d: id %s of message %d does not follow %s", g, b, ids[i], i, ids[i-1])
						return
					}
				}
				progress.Inc()
				mu.Lock()
				for i, id := range ids {
					acked[id.Marshal()] = msgs[i]
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	e.waitProgress(&wg, &progress, "batch appenders")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := e.recv(e.read(w, cursor.All()), len(acked))
	for i, m := range got {
		want, ok := acked[m.ID().Marshal()]
		require.Truef(t, ok, "delivered %s which no batch stored", m.ID())
		sameMessage(t, want, m.Message, fmt.Sprintf("message %s", m.ID()))
		if i > 0 {
			require.True(t, got[i-1].ID().LT(m.ID()))
		}
	}

	// A batch with one message too large stores nothing of it.
	if limit := e.caps.MaxMessageBytes; limit > 0 {
		before, err := e.last(w)
		require.NoError(t, err)
		bad := []message.Message{
			mustMessage(t, []byte("fine-0"), nil),
			mustMessage(t, make([]byte, limit+1), nil),
			mustMessage(t, []byte("fine-2"), nil),
		}
		_, err = within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) { return w.AppendBatch(ctx, bad) })
		require.ErrorIs(t, err, walimpls.ErrTooLarge, "a batch with a message above the limit")
		require.True(t, walimpls.NotStored(err), "a refused batch is NotStored: %v", err)
		after, err := e.last(w)
		require.NoError(t, err)
		require.Truef(t, after.EQ(before), "a refused batch stored something: Last moved from %s to %s", before, after)
	}
	s := e.read(w, cursor.Latest())
	next := []message.Message{mustMessage(t, []byte("after-1"), nil), mustMessage(t, []byte("after-2"), nil)}
	ids, err = within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) { return w.AppendBatch(ctx, next) })
	require.NoError(t, err)
	checkSequence(t, ids, next, e.recv(s, 2))
	e.quiet(s)

	ro := e.open(e.opener(), w.Channel().Name, 0, walimpls.ReadOnly)
	_, err = within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) { return ro.AppendBatch(ctx, next) })
	require.ErrorIs(t, err, walimpls.ErrReadOnly)
	require.NoError(t, w.Close())
	_, err = within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) { return w.AppendBatch(ctx, next) })
	require.ErrorIs(t, err, walimpls.ErrClosed, "a batch after Close")
}
