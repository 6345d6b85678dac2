package claimown

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

type req struct {
	n     int
	reply chan int
}

func newReq(n int) *req { return &req{n: n, reply: make(chan int, 1)} }

func closedErr() error { return errors.Join(walimpls.ErrClosed, errors.New("test writer")) }

func newBox(capacity int) *Mailbox[*req, int] {
	return NewMailbox[*req, int](capacity, closedErr)
}

// echo is a loop that answers every request with its n doubled, and
// drains the queue with -1 when it stops.
func echo(m *Mailbox[*req, int]) func() {
	return func() {
		for {
			select {
			case <-m.Stopping():
				m.Drain(func(r *req) { r.reply <- -1 })
				return
			case r := <-m.Requests():
				r.reply <- 2 * r.n
			}
		}
	}
}

func submit(ctx context.Context, m *Mailbox[*req, int], n int) (int, error) {
	r := newReq(n)
	return m.Submit(ctx, r, r.reply)
}

func TestMailboxAnswered(t *testing.T) {
	m := newBox(4)
	m.Go(echo(m))
	defer m.Close()
	for i := range 10 {
		got, err := submit(context.Background(), m, i)
		require.NoError(t, err)
		require.Equal(t, 2*i, got)
	}
}

func TestMailboxRefusedBeforeQueued(t *testing.T) {
	t.Run("ctx ended", func(t *testing.T) {
		m := newBox(0) // no room, nobody takes
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := submit(ctx, m, 1)
		require.ErrorIs(t, err, context.Canceled)
		assert.True(t, walimpls.NotStored(err))
		m.Close()
	})
	t.Run("loop returned", func(t *testing.T) {
		m := newBox(0)
		m.Go(func() {})
		m.Close()
		_, err := submit(context.Background(), m, 1)
		require.ErrorIs(t, err, walimpls.ErrClosed)
		assert.True(t, walimpls.NotStored(err), "never queued")
	})
}

func TestMailboxCtxEndsAfterQueued(t *testing.T) {
	m := newBox(1)
	taken := make(chan *req, 1)
	m.Go(func() {
		r := <-m.Requests()
		taken <- r
		<-m.Stopping()
		r.reply <- 7 // answered after its caller left: nobody blocks
	})
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := submit(ctx, m, 1)
		res <- err
	}()
	<-taken
	cancel()
	err := <-res
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, walimpls.NotStored(err), "a queued request may be in flight")
	m.Close()
}

func TestMailboxLoopReturnsUnanswered(t *testing.T) {
	m := newBox(1)
	queued := make(chan struct{})
	m.Go(func() {
		<-queued
		<-m.Stopping() // returns leaving the request unanswered
	})
	res := make(chan error, 1)
	go func() {
		_, err := submit(context.Background(), m, 1)
		res <- err
	}()
	require.Eventually(t, func() bool { return len(m.reqs) == 1 }, 10*time.Second, time.Millisecond)
	close(queued)
	m.Close()
	err := <-res
	require.ErrorIs(t, err, walimpls.ErrClosed)
	assert.True(t, walimpls.NotStored(err), "never taken")
}

func TestMailboxDrainAnswersQueued(t *testing.T) {
	m := newBox(8)
	stopped := make(chan struct{})
	m.Go(func() {
		<-stopped
		<-m.Stopping()
		m.Drain(func(r *req) { r.reply <- -r.n })
	})
	res := make(chan int, 8)
	for i := 1; i <= 8; i++ {
		go func() {
			got, err := submit(context.Background(), m, i)
			assert.NoError(t, err)
			res <- got
		}()
	}
	require.Eventually(t, func() bool { return len(m.reqs) == 8 }, 10*time.Second, time.Millisecond)
	close(stopped)
	m.Close()
	sum := 0
	for range 8 {
		sum += <-res
	}
	assert.Equal(t, -36, sum, "every queued request got the drain's answer")
}

// TestMailboxReplyRaces: an answer given just before the loop returns, or
// just as ctx ends, comes back or leaves an allowed outcome, never
// anything else.
func TestMailboxReplyRaces(t *testing.T) {
	t.Run("loop answers and returns", func(t *testing.T) {
		for i := range 200 {
			m := newBox(1)
			m.Go(func() {
				r := <-m.Requests()
				r.reply <- r.n
			})
			got, err := submit(context.Background(), m, i)
			require.NoError(t, err, "an answer given before the loop returned is never lost")
			require.Equal(t, i, got)
			m.Close()
		}
	})
	t.Run("ctx ends as the answer comes", func(t *testing.T) {
		answered, cancelled := 0, 0
		for i := range 200 {
			m := newBox(1)
			ctx, cancel := context.WithCancel(context.Background())
			m.Go(func() {
				r := <-m.Requests()
				r.reply <- r.n
				cancel()
			})
			got, err := submit(ctx, m, i)
			switch {
			case err == nil:
				require.Equal(t, i, got)
				answered++
			default:
				require.ErrorIs(t, err, context.Canceled)
				require.False(t, walimpls.NotStored(err))
				cancelled++
			}
			cancel()
			m.Close()
		}
		t.Logf("answered %d, cancelled %d", answered, cancelled)
	})
	t.Run("Close races Submit", func(t *testing.T) {
		for i := range 200 {
			m := newBox(4)
			m.Go(echo(m))
			res := make(chan error, 1)
			go func() {
				got, err := submit(context.Background(), m, i)
				if err == nil && got != 2*i && got != -1 {
					err = errors.New("unexpected answer")
				}
				res <- err
			}()
			m.Close()
			err := <-res
			if err != nil {
				require.ErrorIs(t, err, walimpls.ErrClosed)
				require.True(t, walimpls.NotStored(err))
			}
		}
	})
}

func TestMailboxLifecycle(t *testing.T) {
	m := newBox(1)
	assert.False(t, m.Started())
	m.Close() // no loop: returns at once
	m.Close()
	assert.ErrorIs(t, m.Context().Err(), context.Canceled)
	assert.True(t, closed(m.Stopping()))

	n := newBox(1)
	n.Go(echo(n))
	assert.True(t, n.Started())
	assert.Panics(t, func() { n.Go(func() {}) })
	n.Close()
	n.Close()
}

// Every request Post queued is answered exactly once, by the loop or, when
// the loop returned without taking it, by the orphans function; a request
// Post refused is answered by no one. Posters race Close, and the loop
// leaves its queue behind.
func TestMailboxPostAnswersEveryQueuedRequestOnce(t *testing.T) {
	for range 50 {
		m := newBox(2)
		var orphaned, answered, refused, queued atomic.Int64
		counts := make([]atomic.Int32, 200)
		m.SetOrphans(func(r *req) { counts[r.n].Add(1); orphaned.Add(1) })
		m.Go(func() {
			for {
				select {
				case <-m.Stopping():
					return // leaves the queue to the orphans function
				case r := <-m.Requests():
					counts[r.n].Add(1)
					answered.Add(1)
				}
			}
		})
		var wg sync.WaitGroup
		for p := range 4 {
			wg.Go(func() {
				for i := p; i < len(counts); i += 4 {
					if err := m.Post(context.Background(), &req{n: i}); err != nil {
						require.True(t, walimpls.NotStored(err))
						counts[i].Add(100) // marks it refused
						refused.Add(1)
						continue
					}
					queued.Add(1)
				}
			})
		}
		m.Close()
		wg.Wait()
		for i := range counts {
			n := counts[i].Load()
			require.Truef(t, n == 1 || n == 100, "request %d answered %d times (100: refused)", i, n)
		}
		require.Equal(t, queued.Load(), answered.Load()+orphaned.Load())
		require.EqualValues(t, len(counts), queued.Load()+refused.Load())
	}
}
