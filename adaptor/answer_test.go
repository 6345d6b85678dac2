package adaptor

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// An answer handed to AnswerAsync is called back like an append's: after
// the callbacks queued before it, one at a time, and Close waits for it.
// Once the WAL is closed, it is called back before AnswerAsync returns.
func TestAnswerAsyncQueuesBehindCallbacks(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "answer", 1, Options{TimeTickInterval: time.Hour})
	refused := errors.New("refused by a wrapper")

	var (
		mu    sync.Mutex
		order []string
	)
	record := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	started, release := make(chan struct{}), make(chan struct{})
	w.AppendAsync(context.Background(), payload(1, 10), func(_ AppendResult, err error) {
		assert.NoError(t, err)
		close(started)
		<-release
		record("append")
	})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("watchdog: the append's callback did not run")
	}
	var closing sync.WaitGroup
	closing.Add(1)
	w.AnswerAsync(func(r AppendResult, err error) {
		defer closing.Done()
		assert.Equal(t, AppendResult{TimeTick: 7}, r)
		assert.ErrorIs(t, err, refused)
		// Runs after Close began, which still waits for it.
		<-w.Available()
		record("answer")
	}, AppendResult{TimeTick: 7}, refused)
	w.AnswerAsync(nil, AppendResult{}, refused) // nothing to call
	close(release)
	require.NoError(t, w.Close())
	mu.Lock()
	require.Equal(t, []string{"append", "answer"}, order, "Close returned before the answer ran, or it ran out of order")
	mu.Unlock()
	closing.Wait()

	var answered bool
	AnswerAsync(w, func(_ AppendResult, err error) {
		require.ErrorIs(t, err, refused)
		answered = true
	}, AppendResult{}, refused)
	require.True(t, answered, "a closed WAL answers on the caller's goroutine")
}

// A WAL that offers no AsyncAnswerer (a wrapper that embeds one, here) is
// answered on the caller's goroutine; one that forwards it keeps the queue.
func TestAnswerAsyncThroughWrappers(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "answer", 1, Options{TimeTickInterval: time.Hour})
	type hiding struct{ WAL }
	var answered bool
	AnswerAsync(hiding{w}, func(AppendResult, error) { answered = true }, AppendResult{}, nil)
	require.True(t, answered)
	AnswerAsync(hiding{w}, nil, AppendResult{}, nil)

	caller := goroutineID()
	called := make(chan string, 1)
	AnswerAsync(forwarding{w}, func(AppendResult, error) { called <- goroutineID() }, AppendResult{}, nil)
	select {
	case gid := <-called:
		require.NotEqual(t, caller, gid, "answered on the caller's goroutine, not the WAL's callback goroutine")
	case <-time.After(30 * time.Second):
		t.Fatal("watchdog: the forwarded answer never ran")
	}
}

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine 42 [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// forwarding embeds a WAL and passes AnswerAsync on, as a WAL that stands
// for another does (see the interface).
type forwarding struct{ WAL }

func (f forwarding) AnswerAsync(cb func(AppendResult, error), r AppendResult, err error) {
	AnswerAsync(f.WAL, cb, r, err)
}
