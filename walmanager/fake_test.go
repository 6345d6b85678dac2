package walmanager

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// fakeBackend is a WALOpener whose WALs count themselves: it records a
// violation whenever two WALs of one channel are open at once. Opens may be
// delayed and fail at random.
type fakeBackend struct {
	mu         sync.Mutex
	rng        *rand.Rand
	failRate   float64
	maxDelay   time.Duration
	live       map[string]int
	liveTerm   map[string]int64
	opens      int
	violations []string
}

func newFakeBackend(seed uint64, failRate float64, maxDelay time.Duration) *fakeBackend {
	return &fakeBackend{
		rng:      rand.New(rand.NewPCG(seed, seed^0x5eed)),
		failRate: failRate,
		maxDelay: maxDelay,
		live:     make(map[string]int),
		liveTerm: make(map[string]int64),
	}
}

func (b *fakeBackend) setFailRate(r float64) {
	b.mu.Lock()
	b.failRate = r
	b.mu.Unlock()
}

// draw picks a delay and whether to fail, for an open or a close.
func (b *fakeBackend) draw() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d time.Duration
	if b.maxDelay > 0 {
		d = time.Duration(b.rng.Int64N(int64(b.maxDelay)))
	}
	return d, b.rng.Float64() < b.failRate
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *fakeBackend) Open(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
	delay, fail := b.draw()
	if err := sleepCtx(ctx, delay); err != nil {
		return nil, err
	}
	if fail {
		return nil, errBoom
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opens++
	b.live[ch.Name]++
	if n := b.live[ch.Name]; n > 1 {
		b.violations = append(b.violations, fmt.Sprintf("channel %s: %d wals open at once (opening term %d, term %d still open)",
			ch.Name, n, ch.Term, b.liveTerm[ch.Name]))
	}
	b.liveTerm[ch.Name] = ch.Term
	return &fakeWAL{b: b, ch: ch, avail: make(chan struct{})}, nil
}

func (b *fakeBackend) liveOf(name string) (int, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live[name], b.liveTerm[name]
}

// fakeWAL is the least adaptor.WAL that can be counted.
type fakeWAL struct {
	b     *fakeBackend
	ch    adaptor.Channel
	avail chan struct{}
	once  sync.Once
}

var errFakeWAL = errors.New("fake wal stores nothing")

func (w *fakeWAL) Channel() adaptor.Channel { return w.ch }
func (w *fakeWAL) Append(context.Context, message.Message) (adaptor.AppendResult, error) {
	return adaptor.AppendResult{}, errFakeWAL
}
func (w *fakeWAL) AppendAsync(_ context.Context, _ message.Message, cb func(adaptor.AppendResult, error)) {
	cb(adaptor.AppendResult{}, errFakeWAL)
}
func (w *fakeWAL) AppendBatch(context.Context, []message.Message) ([]adaptor.AppendResult, error) {
	return nil, errFakeWAL
}
func (w *fakeWAL) Read(context.Context, adaptor.ReadOption) (walimpls.Scanner, error) {
	return nil, errFakeWAL
}
func (w *fakeWAL) ReadBatches(context.Context, adaptor.ReadOption) (walimpls.BatchScanner, error) {
	return nil, errFakeWAL
}
func (w *fakeWAL) Sync(context.Context) error                 { return errFakeWAL }
func (w *fakeWAL) Truncate(context.Context, message.ID) error { return errFakeWAL }
func (w *fakeWAL) Tail(context.Context) (cursor.Checkpoint, error) {
	return cursor.Checkpoint{}, errFakeWAL
}

func (w *fakeWAL) ParseID(string) (message.ID, error) { return message.ID{}, errFakeWAL }

func (w *fakeWAL) ParseCheckpoint(string) (cursor.Checkpoint, error) {
	return cursor.Checkpoint{}, errFakeWAL
}
func (w *fakeWAL) Err() error {
	select {
	case <-w.avail:
		return errFakeWAL
	default:
		return nil
	}
}
func (w *fakeWAL) Available() <-chan struct{} { return w.avail }
func (w *fakeWAL) Close() error {
	w.once.Do(func() {
		close(w.avail)
		w.b.mu.Lock()
		w.b.live[w.ch.Name]--
		w.b.mu.Unlock()
	})
	return nil
}

func TestRemovedChannelsLeaveNoGoroutine(t *testing.T) {
	ctx := context.Background()
	base := runtime.NumGoroutine()
	m, err := New(newFakeBackend(1, 0, 0), Options{})
	require.NoError(t, err)
	for i := range 200 {
		ch := Channel{Name: fmt.Sprintf("ch%d", i), Term: 1}
		require.NoError(t, m.Open(ctx, ch))
	}
	m.mu.Lock()
	require.Equal(t, 200, m.drivers, "an open channel has its driver watching the wal")
	m.mu.Unlock()
	for i := range 200 {
		require.NoError(t, m.Remove(ctx, Channel{Name: fmt.Sprintf("ch%d", i), Term: 1}))
	}
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.drivers == 0 && m.closers == 0
	}, 10*time.Second, time.Millisecond)
	// Polled here, not with require.Eventually, which runs its condition in
	// a goroutine of its own; the deadline is a watchdog.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; {
		require.True(t, time.Now().Before(deadline), "%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, stacks())
		time.Sleep(time.Millisecond) // paces the polling of the condition
	}
	require.Len(t, m.Channels(), 200, "removed channels keep their record (and term)")
	require.NoError(t, m.Close(ctx))
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
