package walmanager_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	mock_adaptor "github.com/streamwal/streamwal/mocks/adaptor"
	mock_walmanager "github.com/streamwal/streamwal/mocks/walmanager"
	"github.com/streamwal/streamwal/walmanager"
)

// A mock built with NewMockX(t) meets a call the test set no expectation
// for with t.Errorf (naming the call) and t.FailNow, which ends the calling
// goroutine with runtime.Goexit. When that goroutine was the manager's
// driver, holding its lock, every later call hung until go test's timeout
// and the message naming the call was never seen. These tests run such a
// test (the inner test) against a recording testing.TB and prove that it
// now fails promptly, naming the call.

// failFast bounds how long an inner test may take to fail: a watchdog,
// generous for a loaded machine. The managers' close grace period
// (innerGrace) is far longer, so that no case passes by waiting it out.
const (
	failFast   = 10 * time.Second
	innerGrace = time.Hour
)

// recordingT is a testing.TB for the inner test: it records what the mocks
// and require report, and its FailNow ends the calling goroutine like
// testing.T's.
type recordingT struct {
	mu       sync.Mutex
	errs     []string
	failed   bool
	cleanups []func()
}

func (r *recordingT) Logf(format string, args ...any) {}
func (r *recordingT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.failed = true
}
func (r *recordingT) FailNow() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recordingT) Helper() {}
func (r *recordingT) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

// reports is every error recorded.
func (r *recordingT) reports() ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs), r.failed
}

// runInner runs inner on its own goroutine, as testing runs a test, then
// its cleanups, and fails t unless both end within failFast (waiting for
// them to end, not for a fixed time). It then checks that the inner test
// failed, and that its only failures were the mocks' reports of an
// unexpected call to each of calls, in order.
func runInner(t *testing.T, inner func(rt *recordingT), calls ...string) {
	t.Helper()
	rt := &recordingT{}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer func() { // cleanups run last first, after a FailNow too
			rt.mu.Lock()
			cs := rt.cleanups
			rt.mu.Unlock()
			for i := len(cs) - 1; i >= 0; i-- {
				cs[i]()
			}
		}()
		inner(rt)
	}()
	timer := time.NewTimer(failFast)
	defer timer.Stop()
	select {
	case <-ended:
	case <-timer.C:
		errs, _ := rt.reports()
		t.Fatalf("the inner test hangs after %s; it reported so far:\n%s", failFast, strings.Join(errs, "\n"))
	}
	errs, failed := rt.reports()
	require.True(t, failed, "the inner test must fail")
	require.Len(t, errs, len(calls), "reports:\n%s", strings.Join(errs, "\n"))
	for i, call := range calls {
		require.Contains(t, errs[i], "mock: I don't know what to return because the method call was unexpected")
		require.Contains(t, errs[i], "\t\t"+call, "the report names the call")
	}
}

// newInnerManager is newManager for the inner test: Close runs at its
// cleanup, with a deadline.
func newInnerManager(rt *recordingT, opener walmanager.WALOpener) *walmanager.Manager {
	m, err := walmanager.New(opener, walmanager.Options{CloseGracePeriod: innerGrace})
	require.NoError(rt, err)
	rt.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failFast)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

func TestMissingExpectationFailsFast(t *testing.T) {
	ctx := context.Background()
	ch := walmanager.Channel{Name: "ch", Term: 1}

	t.Run("WAL.Available", func(t *testing.T) {
		// The case: this test hung in GetAvailableWAL. The WAL
		// whose Available did not return is not used, and is closed.
		var openErr, getErr, closeErr error
		runInner(t, func(rt *recordingT) {
			w := mock_adaptor.NewMockWAL(rt) // no Available expectation
			w.EXPECT().Close().Return(nil).Once()
			opener := mock_walmanager.NewMockWALOpener(rt)
			opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
			m := newInnerManager(rt, opener)
			openErr = m.Open(ctx, ch)
			_, getErr = m.GetAvailableWAL(ch)
			closeErr = m.Close(ctx)
		}, "Available()")
		require.ErrorContains(t, openErr, `channel "ch" at term 1: the WAL's Available() did not return`)
		require.ErrorIs(t, getErr, walmanager.ErrChannelNotAvailable)
		require.NoError(t, closeErr)
	})

	t.Run("WALOpener.Open", func(t *testing.T) {
		// Open used to wait for ever: the driver died before resolving it.
		var openErr error
		runInner(t, func(rt *recordingT) {
			opener := mock_walmanager.NewMockWALOpener(rt) // no Open expectation
			m := newInnerManager(rt, opener)
			openErr = m.Open(ctx, ch)
		}, "Open(")
		require.ErrorContains(t, openErr, "the opener's Open did not return")
	})

	t.Run("WAL.Close", func(t *testing.T) {
		// Remove used to wait out the close grace period, and Close the
		// grace period again for the close still counted.
		var removeErr, closeErr error
		var st walmanager.ChannelStatus
		runInner(t, func(rt *recordingT) {
			w := mock_adaptor.NewMockWAL(rt) // no Close expectation
			w.EXPECT().Available().Return(make(chan struct{})).Once()
			opener := mock_walmanager.NewMockWALOpener(rt)
			opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
			m := newInnerManager(rt, opener)
			require.NoError(rt, m.Open(ctx, ch))
			removeErr = m.Remove(ctx, ch)
			st = m.Channels()[0]
			closeErr = m.Close(ctx)
		}, "Close()")
		require.NoError(t, removeErr, "the WAL is gone for the manager whatever its Close says")
		require.Equal(t, walmanager.StateRemoved, st.State)
		require.ErrorContains(t, st.LastError, "the WAL's Close() did not return")
		require.NoError(t, closeErr)
	})

	t.Run("WAL.Err", func(t *testing.T) {
		// A fence whose Err() did not return used to leave the driver
		// counted: Close waited for it until its context ended.
		var st walmanager.ChannelStatus
		var closeErr error
		runInner(t, func(rt *recordingT) {
			w := mock_adaptor.NewMockWAL(rt) // no Err expectation
			avail := make(chan struct{})
			w.EXPECT().Available().Return(avail).Once()
			w.EXPECT().Close().Return(nil).Once()
			opener := mock_walmanager.NewMockWALOpener(rt)
			opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
			m := newInnerManager(rt, opener)
			require.NoError(rt, m.Open(ctx, ch))
			close(avail)
			require.Eventually(rt, func() bool {
				return m.Channels()[0].State == walmanager.StateUnavailable
			}, failFast, time.Millisecond)
			st = m.Channels()[0]
			closeErr = m.Close(ctx)
		}, "Err()")
		require.ErrorContains(t, st.LastError, "the WAL's Err() did not return")
		require.NoError(t, closeErr)
	})

	t.Run("WALManager", func(t *testing.T) {
		// User code against the manager's mock fails on the call itself.
		reached := false
		runInner(t, func(rt *recordingT) {
			mgr := mock_walmanager.NewMockWALManager(rt) // no expectation
			_, _ = mgr.GetAvailableWAL(ch)
			reached = true
		}, "GetAvailableWAL(")
		require.False(t, reached, "the unexpected call ends the test")
	})
}

// innerEnv makes the test binary run TestMissingExpectationInGoTest's inner
// test, the case under a real testing.T.
const innerEnv = "WALMANAGER_INNER_MISSING_EXPECTATION"

// TestMissingExpectationInGoTest runs the case as go test does,
// in a child process of this test binary, and checks that go test reports
// the failure with the unexpected call named, promptly, instead of
// panicking at its timeout.
func TestMissingExpectationInGoTest(t *testing.T) {
	if os.Getenv(innerEnv) == "1" {
		ch := walmanager.Channel{Name: "ch", Term: 1}
		w := mock_adaptor.NewMockWAL(t) // no Available expectation
		w.EXPECT().Close().Return(nil).Maybe()
		opener := mock_walmanager.NewMockWALOpener(t)
		opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
		m := newManager(t, opener, walmanager.Options{CloseGracePeriod: innerGrace})
		_ = m.Open(context.Background(), ch)
		_, _ = m.GetAvailableWAL(ch)
		return
	}
	if testing.Short() {
		t.Skip("runs a child test binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*failFast)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMissingExpectationInGoTest$", "-test.timeout=60s", "-test.v")
	cmd.Env = append(os.Environ(), innerEnv+"=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "the child test hung:\n%s", out)
	require.Error(t, err, "the child test must fail:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestMissingExpectationInGoTest")
	require.Contains(t, string(out), "mock: I don't know what to return because the method call was unexpected")
	require.Contains(t, string(out), "\t\tAvailable()", "the report names the call")
	require.NotContains(t, string(out), "test timed out")
	require.Less(t, took, 2*failFast)
}
