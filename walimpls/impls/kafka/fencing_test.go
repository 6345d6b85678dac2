package kafka

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// TestFencedTruncate pins that a writer fenced by a higher term, or by a
// later open of its own term, cannot truncate: Truncate fails with a
// FencedError before anything is deleted, whether it would delete or is a
// no-op, and every message stays readable. The fence it found is sticky:
// the next Append fails with it, marked as not stored. The fenced WAL can
// still read and ask for Last; the winner truncates.
func TestFencedTruncate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		winTerm int64
	}{
		{"higher term", 2},
		{"same term", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			cfg := testConfig(c)
			a, b := newOpener(t, cfg), newOpener(t, cfg)
			wa := open(t, a, "fenced-truncate", 1, walimpls.ReadWrite)
			var ids []message.ID
			for i := range 4 {
				ids = append(ids, appendOK(t, wa, msg(t, fmt.Sprint(i), nil)))
			}
			wb := open(t, b, "fenced-truncate", tc.winTerm, walimpls.ReadWrite)

			err := wa.Truncate(context.Background(), ids[3])
			require.ErrorIs(t, err, walimpls.ErrFenced)
			var fe *walimpls.FencedError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, walimpls.FencedError{Channel: "fenced-truncate", Term: 1, CurrentTerm: tc.winTerm}, *fe)
			got := readN(t, wb, cursor.All(), len(ids))
			assert.Equal(t, []string{"0", "1", "2", "3"}, payloads(got))

			// Sticky: a no-op truncate and an append fail the same way,
			// and the append certainly stored nothing.
			require.ErrorIs(t, wa.Truncate(context.Background(), ids[0]), walimpls.ErrFenced)
			_, err = walimpls.Append(context.Background(), wa, msg(t, "stale", nil))
			require.ErrorIs(t, err, walimpls.ErrFenced)
			assert.True(t, walimpls.NotStored(err), "an append on a WAL known to be fenced: %v", err)

			// A fenced WAL still reads.
			requireSameID(t, ids[3], last(t, wa))
			got = readN(t, wa, cursor.All(), len(ids))
			assert.Equal(t, []string{"0", "1", "2", "3"}, payloads(got))

			// The winner truncates.
			after := appendOK(t, wb, msg(t, "b", nil))
			require.NoError(t, wb.Truncate(context.Background(), ids[3]))
			got = readN(t, wb, cursor.All(), 2)
			assert.Equal(t, []string{"3", "b"}, payloads(got))
			requireSameID(t, after, last(t, wb))
		})
	}
}

// TestFencedTruncateUnknowing is TestFencedTruncate for a no-op Truncate of
// a writer that has not learned of its fence yet: it reads the claims too.
func TestFencedTruncateUnknowing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	wa := open(t, a, "fenced-noop", 3, walimpls.ReadWrite)
	first := appendOK(t, wa, msg(t, "a", nil))
	open(t, b, "fenced-noop", 4, walimpls.ReadWrite)
	require.ErrorIs(t, wa.Truncate(context.Background(), first), walimpls.ErrFenced)
}

// TestSameTermLaterOpenWins runs appenders on a writer while a second node
// opens the same term and appends too. From the moment the second Open
// returned, no append that the first writer starts is acknowledged (each
// fails with ErrFenced), every append of the first acknowledged at all is
// below every append of the second, and every acknowledged append of either
// is read back exactly once.
func TestSameTermLaterOpenWins(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	const name = "same-term"
	wa := open(t, a, name, 7, walimpls.ReadWrite)

	var (
		mu       sync.Mutex
		acked    = map[int64]string{} // offset → payload, both writers
		ackedA   []int64
		ackedB   []int64
		unknown  = map[string]bool{} // payloads whose append may have been stored
		returned atomic.Bool         // the second Open has returned
		firstAck = make(chan struct{})
		ackOnce  sync.Once
		wg       sync.WaitGroup
	)
	appender := func(w walimpls.WALImpl, tag string, forA bool, n int) {
		defer wg.Done()
		for i := range n {
			p := fmt.Sprintf("%s-%d", tag, i)
			startedAfter := returned.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			id, err := walimpls.Append(ctx, w, msg(t, p, nil))
			cancel()
			mu.Lock()
			switch {
			case err == nil:
				off := seq(t, id)
				acked[off] = p
				if forA {
					ackedA = append(ackedA, off)
					assert.False(t, startedAfter, "append %s started after the same-term open returned and was acknowledged at %d", p, off)
					ackOnce.Do(func() { close(firstAck) })
				} else {
					ackedB = append(ackedB, off)
				}
			case !walimpls.NotStored(err):
				unknown[p] = true
			}
			mu.Unlock()
			if err == nil {
				continue
			}
			if forA && errors.Is(err, walimpls.ErrFenced) {
				var fe *walimpls.FencedError
				assert.True(t, errors.As(err, &fe))
				assert.Equal(t, fe.Term, fe.CurrentTerm, "fenced by the same term")
				return
			}
			if forA && startedAfter {
				assert.ErrorIs(t, err, walimpls.ErrFenced, "append %s started after the same-term open returned", p)
				return
			}
			// The second writer's producer may be fenced once by the
			// first one re-acquiring its producer before it learns that
			// it lost (see TestReacquireAfterStaleOpen): retryable.
			assert.True(t, walimpls.IsRetryable(err), "append %s: %v", p, err)
		}
	}
	const perAppender = 1 << 20 // the first writer's appenders stop when fenced
	for g := range 4 {
		wg.Add(1)
		go appender(wa, fmt.Sprintf("a%d", g), true, perAppender)
	}
	select {
	case <-firstAck:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the first writer acknowledged nothing")
	}
	wb := open(t, b, name, 7, walimpls.ReadWrite)
	returned.Store(true)
	for g := range 4 {
		wg.Add(1)
		go appender(wb, fmt.Sprintf("b%d", g), false, 25)
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, ackedA)
	require.NotEmpty(t, ackedB)
	maxA, minB, lastB := slices.Max(ackedA), slices.Min(ackedB), slices.Max(ackedB)
	require.Less(t, maxA, minB, "an append of the fenced writer is after one of the winner")
	// Read up to the winner's last acknowledged append: every
	// acknowledged append once, nothing else but appends whose outcome
	// was unknown.
	s, err := wb.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	seen := map[string]int{}
	for {
		m := collect(t, s, 1, 10*time.Second)[0]
		p := string(m.Payload())
		seen[p]++
		if want, ok := acked[seq(t, m.ID())]; ok {
			require.Equal(t, want, p, "message at %s", m.ID())
		} else {
			require.True(t, unknown[p], "read %q at %s, which was never acknowledged and whose append failed as not stored", p, m.ID())
		}
		if seq(t, m.ID()) == lastB {
			break
		}
	}
	for _, p := range acked {
		require.Equal(t, 1, seen[p], "copies of acknowledged %s", p)
	}
	t.Logf("first writer: %d acknowledged before the takeover; winner: %d acknowledged; %d of unknown outcome",
		len(ackedA), len(ackedB), len(unknown))
}

// TestNotStoredMarks pins which append refusals are marked as certainly
// not stored: a closed WAL, a context done before the call, a read-only
// WAL; with transactions on and off.
func TestNotStoredMarks(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, disable bool) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.DisableTransactions = disable
		o := newOpener(t, cfg)
		w := open(t, o, "marks", 1, walimpls.ReadWrite)
		appendOK(t, w, msg(t, "one", nil))

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := walimpls.Append(ctx, w, msg(t, "cancelled", nil))
		require.ErrorIs(t, err, context.Canceled)
		assert.True(t, walimpls.NotStored(err), "context done before the call: %v", err)

		ro := open(t, o, "marks", 1, walimpls.ReadOnly)
		_, err = walimpls.Append(context.Background(), ro, msg(t, "ro", nil))
		require.ErrorIs(t, err, walimpls.ErrReadOnly)
		assert.True(t, walimpls.NotStored(err))

		require.NoError(t, w.Close())
		_, err = walimpls.Append(context.Background(), w, msg(t, "closed", nil))
		require.ErrorIs(t, err, walimpls.ErrClosed)
		assert.True(t, walimpls.NotStored(err), "append after Close: %v", err)

		got := readN(t, ro, cursor.All(), 1)
		assert.Equal(t, []string{"one"}, payloads(got))
		s, err := ro.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartAfter(got[0].ID())})
		require.NoError(t, err)
		defer s.Close()
		nothingMore(t, s, 200*time.Millisecond)
	})
}

// TestNotStoredAfterFence pins that once a writer knows it is fenced, its
// appends are refused before they reach the broker, and say so.
func TestNotStoredAfterFence(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	wa := open(t, a, "marks-fenced", 1, walimpls.ReadWrite)
	appendOK(t, wa, msg(t, "a", nil))
	open(t, b, "marks-fenced", 2, walimpls.ReadWrite)
	// The first append learns of the fence; its transaction was under
	// way, so it says nothing about whether it was stored.
	_, err := walimpls.Append(context.Background(), wa, msg(t, "learns", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	for range 3 {
		_, err = walimpls.Append(context.Background(), wa, msg(t, "refused", nil))
		require.ErrorIs(t, err, walimpls.ErrFenced)
		assert.True(t, walimpls.NotStored(err), "%v", err)
	}
}
