package vchannel_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/atomic"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watchdog bounds every wait of a test: it fails the test, it never
// decides an outcome.
const watchdog = 30 * time.Second

// backend makes a fresh opener of one backend for a test.
type backend struct {
	name string
	open func(t *testing.T) walimpls.Opener
}

func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T) walimpls.Opener {
			o, err := memory.New(context.Background(), memory.Config{Cluster: memory.NewCluster()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = o.Close() })
			return o
		}},
		{"local", func(t *testing.T) walimpls.Opener {
			s, err := local.New(context.Background(), local.Config{Dir: t.TempDir(), Sync: local.SyncNone})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"kafka", kafkaOpener},
	}
}

// kafkaOpener starts a one-broker kfake cluster on loopback and returns an
// opener talking to it over the wire, both closed at the end of the test.
func kafkaOpener(t *testing.T) walimpls.Opener {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := kafka.New(ctx, kafka.Config{
		SeedBrokers:    c.ListenAddrs(),
		MetadataMinAge: 10 * time.Millisecond,
		RetryBackoff:   10 * time.Millisecond,
		CreateTimeout:  10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// forEachBackend runs f as a subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openWAL opens a pchannel's WAL, closed at the end of the test. Frequent
// watermarks release appends to scanners without Sync.
func openWAL(t *testing.T, o walimpls.Opener, name string, opts adaptor.Options) adaptor.WAL {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	if opts.TimeTickInterval == 0 {
		opts.TimeTickInterval = 5 * time.Millisecond
	}
	term := int64(1)
	if opts.ReadOnly {
		term = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	w, err := adaptor.Open(ctx, o, adaptor.Channel{Name: name, Term: term}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func view(t *testing.T, w adaptor.WAL, name string) *vchannel.WAL {
	t.Helper()
	v, err := vchannel.New(w, name)
	require.NoError(t, err)
	return v
}

func msg(t testing.TB, payload string) message.Message {
	t.Helper()
	m, err := message.New([]byte(payload), nil)
	require.NoError(t, err)
	return m
}

func vcName(i int) string { return fmt.Sprintf("vc-%03d", i) }

// recvN receives n messages from s, failing if it ends first.
func recvN(t testing.TB, s walimpls.Scanner, n int) []message.Immutable {
	t.Helper()
	out := make([]message.Immutable, 0, n)
	timer := time.NewTimer(watchdog)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				require.FailNowf(t, "scanner ended", "after %d of %d: %v", len(out), n, s.Error())
			}
			out = append(out, m)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "received %d of %d", len(out), n)
		}
	}
	return out
}

// drain receives until s ends and returns what it delivered and its error.
func drain(t testing.TB, s walimpls.Scanner) ([]message.Immutable, error) {
	t.Helper()
	var out []message.Immutable
	timer := time.NewTimer(watchdog)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				<-s.Done()
				return out, s.Error()
			}
			out = append(out, m)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "scanner did not end after %d messages", len(out))
		}
	}
}

// payloads returns the payloads of msgs, checking on the way that every
// message belongs to vc, that timeticks strictly increase and that each
// carries a checkpoint.
func payloads(t testing.TB, vc string, msgs []message.Immutable) []string {
	t.Helper()
	out := make([]string, len(msgs))
	var last uint64
	for i, m := range msgs {
		require.Equal(t, vc, m.VChannel(), "message %d", i)
		tt, ok := m.TimeTick()
		require.True(t, ok)
		require.Greater(t, tt, last, "message %d: timeticks must strictly increase", i)
		last = tt
		_, err := cursor.CheckpointOf(m)
		require.NoError(t, err, "message %d", i)
		out[i] = string(m.Payload())
	}
	return out
}

// nothingBefore proves that s delivers nothing more of vc until a marker
// appended now: the next message it delivers is the marker.
func nothingBefore(t *testing.T, w adaptor.WAL, s walimpls.Scanner, vc string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	_, err := w.Append(ctx, msg(t, "marker").WithVChannel(vc))
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))
	got := recvN(t, s, 1)
	require.Equal(t, "marker", string(got[0].Payload()), "an extra message was delivered before the marker")
}

// readCounter counts the messages backend scanners hand out, per scanner
// name and per message: what the layers above read from storage.
type readCounter struct {
	mu     sync.Mutex
	byName map[string]*atomic.Int64
	perID  map[string]int // "name|channel|id" → reads; nil when not tracked
}

func newReadCounter(trackIDs bool) *readCounter {
	c := &readCounter{byName: map[string]*atomic.Int64{}}
	if trackIDs {
		c.perID = map[string]int{}
	}
	return c
}

// wrap returns o with every scanner of every WAL it opens counted.
func (c *readCounter) wrap(o walimpls.Opener) walimpls.Opener { return countingOpener{Opener: o, c: c} }

// tailOrRecovery reports whether a scanner name is one the adaptor opens
// for itself: the tail reader and the recovery read of Open.
func tailOrRecovery(name string) bool { return name == "wal-tail" || name == "recovery" }

// reads returns the messages handed out by scanners whose name passes keep.
func (c *readCounter) reads(keep func(name string) bool) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for name, v := range c.byName {
		if keep(name) {
			n += v.Load()
		}
	}
	return n
}

// readsOf returns the messages handed out by scanners of one name.
func (c *readCounter) readsOf(name string) int64 {
	return c.reads(func(n string) bool { return n == name })
}

// timesRead returns, for every message read by scanners whose name passes
// keep, how many times it was read.
func (c *readCounter) timesRead(keep func(name string) bool) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, n := range c.perID {
		name, id, _ := cut(k)
		if keep(name) {
			out[id] += n
		}
	}
	return out
}

func cut(k string) (name, rest string, ok bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '|' {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}

func (c *readCounter) counter(name string) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.byName[name]
	if v == nil {
		v = atomic.NewInt64(0)
		c.byName[name] = v
	}
	return v
}

func (c *readCounter) note(name, channel string, id message.ID) {
	if c.perID == nil {
		return
	}
	c.mu.Lock()
	c.perID[name+"|"+channel+"|"+id.String()]++
	c.mu.Unlock()
}

type countingOpener struct {
	walimpls.Opener
	c *readCounter
}

func (o countingOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	w, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	return countingWAL{WALImpl: w, c: o.c}, nil
}

type countingWAL struct {
	walimpls.WALImpl
	c *readCounter
}

func (w countingWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	s, err := w.WALImpl.Read(ctx, opt)
	if err != nil {
		return nil, err
	}
	cs := &countingScanner{
		inner: s, name: opt.Name, channel: w.Channel().Name, c: w.c, n: w.c.counter(opt.Name),
		out: make(chan message.Immutable), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go cs.run()
	return cs, nil
}

// countingScanner forwards a backend scanner's messages, counting each as
// it is handed over.
type countingScanner struct {
	inner         walimpls.Scanner
	name, channel string
	c             *readCounter
	n             *atomic.Int64
	out           chan message.Immutable
	stop          chan struct{}
	stopOnce      sync.Once
	done          chan struct{}
}

func (s *countingScanner) run() {
	defer close(s.done)
	defer close(s.out)
	for {
		select {
		case m, ok := <-s.inner.Chan():
			if !ok {
				<-s.inner.Done()
				return
			}
			select {
			case s.out <- m:
				s.n.Inc()
				s.c.note(s.name, s.channel, m.ID())
			case <-s.stop:
				return
			}
		case <-s.stop:
			return
		}
	}
}

func (s *countingScanner) Chan() <-chan message.Immutable { return s.out }
func (s *countingScanner) Done() <-chan struct{}          { return s.done }
func (s *countingScanner) Error() error {
	select {
	case <-s.done:
		return s.inner.Error()
	default:
		return nil
	}
}

func (s *countingScanner) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	_ = s.inner.Close()
	<-s.done
	return nil
}
