package adaptor

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// OnFirstAppend is called once per WAL, by whichever append is
// acknowledged first, with the time since Open returned; refused appends
// do not count.
func TestOnFirstAppendOnce(t *testing.T) {
	for _, first := range []string{"Append", "AppendAsync", "AppendBatch"} {
		t.Run(first, func(t *testing.T) {
			var calls atomic.Int32
			var since atomic.Duration
			opts := Options{TimeTickInterval: time.Hour, OnFirstAppend: func(d time.Duration) {
				calls.Inc()
				since.Store(d)
			}}
			c := memory.NewCluster()
			w := openWAL(t, memOpener(t, c, memory.Config{}), "first", 1, opts)
			ctx := context.Background()
			_, err := w.AppendBatch(ctx, nil)
			require.NoError(t, err)
			require.Zero(t, calls.Load(), "an empty batch acknowledged an append")

			switch first {
			case "Append":
				_, err = w.Append(ctx, payload(1, 10))
				require.NoError(t, err)
			case "AppendAsync":
				done := make(chan struct{})
				w.AppendAsync(ctx, payload(1, 10), func(_ AppendResult, err error) {
					assert.NoError(t, err)
					assert.EqualValues(t, 1, calls.Load(), "the hook runs before the append's callback")
					close(done)
				})
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("watchdog: no callback")
				}
			case "AppendBatch":
				_, err = w.AppendBatch(ctx, []message.Message{payload(1, 10), payload(2, 10)})
				require.NoError(t, err)
			}
			opened, ok := OpenTimesOf(w)
			require.True(t, ok)
			require.EqualValues(t, 1, calls.Load())
			require.Positive(t, since.Load())
			require.LessOrEqual(t, since.Load(), time.Since(opened.Ready))

			_, err = w.Append(ctx, payload(3, 10))
			require.NoError(t, err)
			_, err = w.AppendBatch(ctx, []message.Message{payload(4, 10)})
			require.NoError(t, err)
			require.EqualValues(t, 1, calls.Load(), "called again after the first append")
		})
	}

	t.Run("refused", func(t *testing.T) {
		var calls atomic.Int32
		w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "refused", 1,
			Options{TimeTickInterval: time.Hour, OnFirstAppend: func(time.Duration) { calls.Inc() }})
		require.NoError(t, w.Close())
		_, err := w.Append(context.Background(), payload(1, 10))
		require.Error(t, err)
		_, err = w.AppendBatch(context.Background(), []message.Message{payload(1, 10)})
		require.Error(t, err)
		w.AppendAsync(context.Background(), payload(1, 10), func(_ AppendResult, err error) { assert.Error(t, err) })
		require.Zero(t, calls.Load(), "a refused append counted as acknowledged")
	})
}

// A WAL carries the times of its open: the backend's open returned, then
// Open did.
func TestOpenTimes(t *testing.T) {
	before := time.Now()
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "times", 1, Options{TimeTickInterval: time.Hour})
	after := time.Now()
	got, ok := OpenTimesOf(w)
	require.True(t, ok)
	require.False(t, got.Fenced.Before(before), "fenced %v before the open began (%v)", got.Fenced, before)
	require.False(t, got.Ready.Before(got.Fenced), "ready %v before fenced %v", got.Ready, got.Fenced)
	require.False(t, after.Before(got.Ready), "ready %v after the open returned (%v)", got.Ready, after)

	type hiding struct{ WAL }
	_, ok = OpenTimesOf(hiding{w})
	require.False(t, ok, "a WAL that offers no OpenTimer has no times")
}

// A lent WAL refuses Close and stays open; it is otherwise the WAL, its
// optional interfaces included.
func TestLend(t *testing.T) {
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "lent", 1, Options{TimeTickInterval: time.Hour})
	notYours := errors.New("not yours to close")
	l := Lend(w, func() error { return notYours })
	require.ErrorIs(t, l.Close(), notYours)
	require.NoError(t, w.Err())
	_, err := l.Append(context.Background(), payload(1, 10))
	require.NoError(t, err, "the lent WAL was closed by its borrower")
	require.Equal(t, w.Channel(), l.Channel())

	want, _ := OpenTimesOf(w)
	got, ok := OpenTimesOf(l)
	require.True(t, ok)
	require.Equal(t, want, got)
	_, ok = OpenTimesOf(Lend(struct{ WAL }{w}, func() error { return nil }))
	require.False(t, ok, "lending made up times for a WAL without them")

	caller := goroutineID()
	called := make(chan string, 1)
	AnswerAsync(l, func(AppendResult, error) { called <- goroutineID() }, AppendResult{}, nil)
	select {
	case gid := <-called:
		require.NotEqual(t, caller, gid, "answered on the caller's goroutine, not the WAL's callback goroutine")
	case <-time.After(30 * time.Second):
		t.Fatal("watchdog: the answer never ran")
	}
}
