package walmanager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor"
	mock_adaptor "github.com/streamwal/streamwal/mocks/adaptor"
	mock_walmanager "github.com/streamwal/streamwal/mocks/walmanager"
	"github.com/streamwal/streamwal/walmanager"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBoom = errors.New("boom")

// mockWAL is a mocked adaptor.WAL of ch whose Available channel the test
// closes to simulate a fence. Close is expected exactly once unless the
// test says otherwise.
func mockWAL(t *testing.T, ch walmanager.Channel) (*mock_adaptor.MockWAL, chan struct{}) {
	w := mock_adaptor.NewMockWAL(t)
	avail := make(chan struct{})
	w.EXPECT().Available().Return((<-chan struct{})(avail)).Maybe()
	w.EXPECT().Channel().Return(ch).Maybe()
	return w, avail
}

func newManager(t *testing.T, opener walmanager.WALOpener, opts walmanager.Options) *walmanager.Manager {
	t.Helper()
	m, err := walmanager.New(opener, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

func statusOf(m *walmanager.Manager, name string) (walmanager.ChannelStatus, bool) {
	for _, st := range m.Channels() {
		if st.Name == name {
			return st, true
		}
	}
	return walmanager.ChannelStatus{}, false
}

func TestOpenGetRemove(t *testing.T) {
	ctx := context.Background()
	ch := walmanager.Channel{Name: "ch", Term: 5}
	w, _ := mockWAL(t, ch)
	opener := mock_walmanager.NewMockWALOpener(t)
	opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
	m := newManager(t, opener, walmanager.Options{})

	_, err := m.GetAvailableWAL(ch)
	require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable)
	require.Empty(t, m.Channels(), "Get must not create a record")

	require.NoError(t, m.Open(ctx, ch))
	require.NoError(t, m.Open(ctx, ch), "a retried open is idempotent")
	got, err := m.GetAvailableWAL(ch)
	require.NoError(t, err)
	require.Equal(t, ch, got.Channel())
	require.ErrorIs(t, got.Close(), walmanager.ErrNotOwner, "users cannot close a managed wal")
	_, err = m.GetAvailableWAL(walmanager.Channel{Name: "ch", Term: 4})
	require.ErrorIs(t, err, walmanager.ErrTermMismatch)
	st, _ := statusOf(m, "ch")
	require.Equal(t, walmanager.ChannelStatus{Name: "ch", Term: 5, State: walmanager.StateAvailable}, st)

	require.ErrorIs(t, m.Open(ctx, walmanager.Channel{Name: "ch", Term: 4}), walmanager.ErrStaleTerm)

	w.EXPECT().Close().Return(nil).Once()
	require.NoError(t, m.Remove(ctx, ch))
	require.NoError(t, m.Remove(ctx, ch), "a retried remove is idempotent")
	_, err = m.GetAvailableWAL(ch)
	require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable)
	st, _ = statusOf(m, "ch")
	require.Equal(t, walmanager.StateRemoved, st.State)
	require.ErrorIs(t, m.Open(ctx, ch), walmanager.ErrStaleTerm, "a removed term stays refused")

	require.Error(t, m.Open(ctx, walmanager.Channel{Name: "bad/name", Term: 1}))
	require.Error(t, m.Open(ctx, walmanager.Channel{Name: "ch", Term: -1}))
}

func TestOpenFailureReachesCallerAndRemoveAfterIt(t *testing.T) {
	ctx := context.Background()
	ch := walmanager.Channel{Name: "ch", Term: 3}
	opener := mock_walmanager.NewMockWALOpener(t)
	opener.EXPECT().Open(mock.Anything, ch).Return(nil, errBoom).Once()
	m := newManager(t, opener, walmanager.Options{})

	err := m.Open(ctx, ch)
	require.ErrorIs(t, err, errBoom)
	st, ok := statusOf(m, "ch")
	require.True(t, ok, "a failed open is kept in Channels")
	require.Equal(t, walmanager.StateFailed, st.State)
	require.ErrorIs(t, st.LastError, errBoom)
	_, err = m.GetAvailableWAL(ch)
	require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable)
	require.ErrorIs(t, err, errBoom)

	// Retrying the same term opens again.
	w, _ := mockWAL(t, ch)
	opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
	require.NoError(t, m.Open(ctx, ch))
	w.EXPECT().Close().Return(nil).Once()
	require.NoError(t, m.Remove(ctx, ch))

	// Remove right after a failed open needs no I/O.
	ch2 := walmanager.Channel{Name: "ch2", Term: 1}
	opener.EXPECT().Open(mock.Anything, ch2).Return(nil, errBoom).Once()
	require.ErrorIs(t, m.Open(ctx, ch2), errBoom)
	require.NoError(t, m.Remove(ctx, ch2))
	st, _ = statusOf(m, "ch2")
	require.Equal(t, walmanager.StateRemoved, st.State)
	require.ErrorIs(t, st.LastError, errBoom, "the cause stays reported")
}

// blockingOpen returns an opener behaviour that reports its start on started
// and returns once ctx ends and gate is closed.
func blockingOpen(started chan<- struct{}, gate <-chan struct{}) func(context.Context, adaptor.Channel) (adaptor.WAL, error) {
	return func(ctx context.Context, _ adaptor.Channel) (adaptor.WAL, error) {
		close(started)
		<-ctx.Done()
		<-gate
		return nil, ctx.Err()
	}
}

func TestConcurrentTermsCoalesce(t *testing.T) {
	ctx := context.Background()
	opener := mock_walmanager.NewMockWALOpener(t)
	started, gate := make(chan struct{}), make(chan struct{})
	opener.EXPECT().Open(mock.Anything, walmanager.Channel{Name: "ch", Term: 1}).RunAndReturn(blockingOpen(started, gate)).Once()
	w7, _ := mockWAL(t, walmanager.Channel{Name: "ch", Term: 7})
	w7.EXPECT().Close().Return(nil).Once()
	// Terms 5 and 6 are never opened: the mock fails the test if they are.
	opener.EXPECT().Open(mock.Anything, walmanager.Channel{Name: "ch", Term: 7}).Return(w7, nil).Once()
	m := newManager(t, opener, walmanager.Options{})

	first := make(chan error, 1)
	go func() { first <- m.Open(ctx, walmanager.Channel{Name: "ch", Term: 1}) }()
	<-started

	var wg sync.WaitGroup
	results := make([]error, 8)
	for term := int64(5); term <= 7; term++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[term] = m.Open(ctx, walmanager.Channel{Name: "ch", Term: term})
		}()
	}
	// Opens 5 and 6 end once overtaken (superseded, or stale if 7 came
	// first), while term 1 is still stuck: they all arrived together.
	require.Eventually(t, func() bool {
		st, _ := statusOf(m, "ch")
		return st.Term == 7
	}, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, <-first, walmanager.ErrSuperseded)
	close(gate)
	wg.Wait()
	for _, term := range []int{5, 6} {
		err := results[term]
		require.True(t, errors.Is(err, walmanager.ErrSuperseded) || errors.Is(err, walmanager.ErrStaleTerm), "term %d: %v", term, err)
	}
	require.NoError(t, results[7])
	_, err := m.GetAvailableWAL(walmanager.Channel{Name: "ch", Term: 7})
	require.NoError(t, err)
}

func TestCloseRacesBlockedOpen(t *testing.T) {
	t.Run("opener honours its context", func(t *testing.T) {
		opener := mock_walmanager.NewMockWALOpener(t)
		started, gate := make(chan struct{}), make(chan struct{})
		close(gate)
		opener.EXPECT().Open(mock.Anything, mock.Anything).RunAndReturn(blockingOpen(started, gate)).Once()
		m, err := walmanager.New(opener, walmanager.Options{})
		require.NoError(t, err)
		res := make(chan error, 1)
		go func() { res <- m.Open(context.Background(), walmanager.Channel{Name: "ch", Term: 1}) }()
		<-started
		require.NoError(t, m.Close(context.Background()))
		require.ErrorIs(t, <-res, walmanager.ErrManagerClosed)
		require.ErrorIs(t, m.Open(context.Background(), walmanager.Channel{Name: "ch", Term: 2}), walmanager.ErrManagerClosed)
		require.ErrorIs(t, m.Remove(context.Background(), walmanager.Channel{Name: "ch", Term: 2}), walmanager.ErrManagerClosed)
		_, err = m.GetAvailableWAL(walmanager.Channel{Name: "ch", Term: 1})
		require.ErrorIs(t, err, walmanager.ErrManagerClosed)
		require.NoError(t, m.Close(context.Background()), "Close is idempotent")
	})
	t.Run("opener ignores its context", func(t *testing.T) {
		ch := walmanager.Channel{Name: "ch", Term: 1}
		w, _ := mockWAL(t, ch)
		opener := mock_walmanager.NewMockWALOpener(t)
		started, gate := make(chan struct{}), make(chan struct{})
		opener.EXPECT().Open(mock.Anything, ch).RunAndReturn(func(context.Context, adaptor.Channel) (adaptor.WAL, error) {
			close(started)
			<-gate
			return w, nil // opened anyway, after the manager closed
		}).Once()
		m, err := walmanager.New(opener, walmanager.Options{})
		require.NoError(t, err)
		res := make(chan error, 1)
		go func() { res <- m.Open(context.Background(), ch) }()
		<-started

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		require.ErrorIs(t, m.Close(ctx), context.DeadlineExceeded, "Close is bounded by its context")
		require.Less(t, time.Since(start), 10*time.Second, "watchdog")
		require.ErrorIs(t, <-res, walmanager.ErrManagerClosed, "waiters are released at once")

		// The late WAL must be closed by the manager, not leaked.
		w.EXPECT().Close().Return(nil).Once()
		close(gate)
		require.NoError(t, m.Close(context.Background()))
	})
}

func TestContextCancellation(t *testing.T) {
	ch := walmanager.Channel{Name: "ch", Term: 1}
	w, _ := mockWAL(t, ch)
	opener := mock_walmanager.NewMockWALOpener(t)
	started, gate := make(chan struct{}), make(chan struct{})
	opener.EXPECT().Open(mock.Anything, ch).RunAndReturn(func(context.Context, adaptor.Channel) (adaptor.WAL, error) {
		close(started)
		<-gate
		return w, nil
	}).Once()
	m := newManager(t, opener, walmanager.Options{})

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, m.Open(canceled, walmanager.Channel{Name: "other", Term: 1}), context.Canceled)
	require.Empty(t, m.Channels(), "a caller already gone records nothing")

	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- m.Open(ctx, ch) }()
	<-started
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)
	close(gate)
	// The request stays recorded: the channel opens anyway.
	require.Eventually(t, func() bool {
		_, err := m.GetAvailableWAL(ch)
		return err == nil
	}, 10*time.Second, time.Millisecond)

	// Remove is bounded by its context even when the wal close hangs.
	closeGate := make(chan struct{})
	w.EXPECT().Close().RunAndReturn(func() error { <-closeGate; return nil }).Once()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.Remove(ctx, ch), context.DeadlineExceeded)
	close(closeGate)
	require.NoError(t, m.Remove(context.Background(), ch))
}

func TestHungCloseIsAbandoned(t *testing.T) {
	ctx := context.Background()
	opts := walmanager.Options{CloseGracePeriod: 30 * time.Millisecond}
	opener := mock_walmanager.NewMockWALOpener(t)
	gate := make(chan struct{})
	defer close(gate) // let the abandoned closes finish before goleak looks
	hung := func(name string, term int64) {
		ch := walmanager.Channel{Name: name, Term: term}
		w, _ := mockWAL(t, ch)
		w.EXPECT().Close().RunAndReturn(func() error { <-gate; return nil }).Once()
		opener.EXPECT().Open(mock.Anything, ch).Return(w, nil).Once()
	}
	hung("a", 1)
	hung("a", 2)
	hung("b", 1)
	m, err := walmanager.New(opener, opts)
	require.NoError(t, err)

	require.NoError(t, m.Open(ctx, walmanager.Channel{Name: "a", Term: 1}))
	// The new term opens after the old close is abandoned.
	require.NoError(t, m.Open(ctx, walmanager.Channel{Name: "a", Term: 2}))
	st, _ := statusOf(m, "a")
	require.Equal(t, walmanager.StateAvailable, st.State)
	require.ErrorIs(t, st.LastError, walmanager.ErrCloseAbandoned)

	require.NoError(t, m.Open(ctx, walmanager.Channel{Name: "b", Term: 1}))
	require.NoError(t, m.Remove(ctx, walmanager.Channel{Name: "b", Term: 1}))
	st, _ = statusOf(m, "b")
	require.Equal(t, walmanager.StateRemoved, st.State)
	require.ErrorIs(t, st.LastError, walmanager.ErrCloseAbandoned)

	// Shutdown does not hang on the stuck backend either.
	start := time.Now()
	require.ErrorIs(t, m.Close(ctx), walmanager.ErrCloseAbandoned)
	require.Less(t, time.Since(start), 10*time.Second, "watchdog")
}

// errWAL is a WAL that says why it stopped being available.
type errWAL struct {
	*mock_adaptor.MockWAL
	err error
}

func (w errWAL) Err() error { return w.err }

func TestFencedWALReportsUnavailable(t *testing.T) {
	ctx := context.Background()
	ch5, ch6 := walmanager.Channel{Name: "ch", Term: 5}, walmanager.Channel{Name: "ch", Term: 6}
	w5, avail5 := mockWAL(t, ch5)
	w6, _ := mockWAL(t, ch6)
	errFenced := errors.New("fenced by term 9")
	opener := mock_walmanager.NewMockWALOpener(t)
	opener.EXPECT().Open(mock.Anything, ch5).Return(errWAL{w5, errFenced}, nil).Once()
	opener.EXPECT().Open(mock.Anything, ch6).Return(w6, nil).Once()
	m := newManager(t, opener, walmanager.Options{})

	require.NoError(t, m.Open(ctx, ch5))
	close(avail5)
	require.Eventually(t, func() bool {
		st, _ := statusOf(m, "ch")
		return st.State == walmanager.StateUnavailable
	}, 10*time.Second, time.Millisecond)
	st, _ := statusOf(m, "ch")
	require.ErrorIs(t, st.LastError, errFenced)
	_, err := m.GetAvailableWAL(ch5)
	require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable)
	require.ErrorIs(t, err, errFenced)
	require.ErrorIs(t, m.Open(ctx, ch5), walmanager.ErrChannelNotAvailable)

	// Moving on closes the fenced WAL, then opens the next term.
	w5.EXPECT().Close().Return(nil).Once()
	w6.EXPECT().Close().Return(nil).Once()
	require.NoError(t, m.Open(ctx, ch6))
	_, err = m.GetAvailableWAL(ch6)
	require.NoError(t, err)
}

func TestOptions(t *testing.T) {
	opener := mock_walmanager.NewMockWALOpener(t)
	_, err := walmanager.New(nil, walmanager.Options{})
	require.Error(t, err)
	_, err = walmanager.New(opener, walmanager.Options{CloseGracePeriod: -time.Second})
	require.Error(t, err)
	require.NoError(t, walmanager.Options{}.Validate())

	reg := prometheus.NewRegistry()
	m, err := walmanager.New(opener, walmanager.Options{Registerer: reg})
	require.NoError(t, err)
	_, err = walmanager.New(opener, walmanager.Options{Registerer: reg})
	require.Error(t, err, "two managers cannot share metric names on one registry")
	require.NoError(t, m.Close(context.Background()))
	m, err = walmanager.New(opener, walmanager.Options{Registerer: reg})
	require.NoError(t, err, "Close unregisters the metrics")
	require.NoError(t, m.Close(context.Background()))
}

func TestStateStrings(t *testing.T) {
	for s := walmanager.StateOpening; s <= walmanager.StateClosed; s++ {
		assert.NotContains(t, s.String(), "state(")
	}
	assert.Equal(t, "state(99)", walmanager.ChannelState(99).String())
}
