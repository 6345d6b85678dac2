package vchannel_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls"
)

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine 42 [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// waitClosed waits for ch, failing the test after the watchdog.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(watchdog):
		require.FailNow(t, "watchdog", "waiting for %s", what)
	}
}

// A refused AppendAsync is called back as the pchannel calls back its own
// appends: on its callback goroutine, after the callbacks answered before
// it, never alongside one.
func TestRefusedAppendAsyncIsCalledBackInLine(t *testing.T) {
	w := openWAL(t, backends()[0].open(t), "pch", adaptor.Options{})
	a := view(t, w, "vc-a")
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()

	var (
		mu         sync.Mutex
		order      []string
		gidA, gidR string
		errR       error
	)
	startedA, release, doneR := make(chan struct{}), make(chan struct{}), make(chan struct{})
	// A holds the callback goroutine until released.
	a.AppendAsync(ctx, msg(t, "a"), func(_ adaptor.AppendResult, err error) {
		assert.NoError(t, err)
		mu.Lock()
		gidA = goroutineID()
		mu.Unlock()
		close(startedA)
		<-release
		mu.Lock()
		order = append(order, "A")
		mu.Unlock()
	})
	waitClosed(t, startedA, "the first callback")
	a.AppendAsync(ctx, msg(t, "x").WithVChannel("vc-b"), func(_ adaptor.AppendResult, err error) {
		mu.Lock()
		gidR, errR = goroutineID(), err
		order = append(order, "R")
		mu.Unlock()
		close(doneR)
	})
	close(release)
	waitClosed(t, doneR, "the refused append's callback")
	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, errR, vchannel.ErrWrongVChannel)
	require.True(t, walimpls.NotStored(errR))
	require.Equal(t, gidA, gidR, "the refusal must be called back on the pchannel's callback goroutine")
	require.Equal(t, []string{"A", "R"}, order, "callbacks run one at a time, in answer order")
}

// The pchannel's Close waits for the callback of a refused AppendAsync; once
// it is closed, a refusal is called back before AppendAsync returns.
func TestCloseWaitsForRefusedAppendAsync(t *testing.T) {
	w := openWAL(t, backends()[0].open(t), "pch", adaptor.Options{})
	a := view(t, w, "vc-a")
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()

	var ran atomic.Bool
	a.AppendAsync(ctx, msg(t, "x").WithVChannel("vc-b"), func(_ adaptor.AppendResult, err error) {
		// Runs until Close has begun: Close must still wait for it.
		<-w.Available()
		ran.Store(true)
	})
	require.NoError(t, w.Close())
	require.True(t, ran.Load(), "Close returned before the refused append's callback ran")

	var answered bool
	a.AppendAsync(ctx, msg(t, "x").WithVChannel("vc-b"), func(_ adaptor.AppendResult, err error) {
		require.ErrorIs(t, err, vchannel.ErrWrongVChannel)
		answered = true
	})
	require.True(t, answered, "a closed pchannel answers on the caller's goroutine")
	a.AppendAsync(ctx, msg(t, "x").WithVChannel("vc-b"), nil) // nothing to call
}

// hiding wraps a WAL by embedding it, which hides adaptor.AsyncAnswerer.
type hiding struct{ adaptor.WAL }

// Over a WAL that offers no adaptor.AsyncAnswerer, a refusal is called back
// on the caller's goroutine before AppendAsync returns: nothing is left
// running that nobody waits for.
func TestRefusedAppendAsyncOverAWrapper(t *testing.T) {
	w := openWAL(t, backends()[0].open(t), "pch", adaptor.Options{})
	_, ok := w.(adaptor.AsyncAnswerer)
	require.True(t, ok, "the adaptor's WAL answers for wrappers")
	_, ok = adaptor.WAL(hiding{w}).(adaptor.AsyncAnswerer)
	require.False(t, ok)
	a := view(t, hiding{w}, "vc-a")
	caller := goroutineID()
	var gid string
	a.AppendAsync(context.Background(), msg(t, "x").WithVChannel("vc-b"), func(_ adaptor.AppendResult, err error) {
		require.ErrorIs(t, err, vchannel.ErrWrongVChannel)
		gid = goroutineID()
	})
	require.Equal(t, caller, gid)
}
