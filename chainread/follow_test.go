package chainread_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// follower is a test's Config.Follow: the chain the test published last
// (or an error), and how often it was asked.
type follower struct {
	mu    sync.Mutex
	c     chain.Chain
	err   error
	asked int
}

func (f *follower) follow(context.Context) (chain.Chain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.c.Clone(), f.err
}

func (f *follower) set(c chain.Chain, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c, f.err = c.Clone(), err
}

func (f *follower) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

// followReader is a Reader of bl's chain that asks follow on clock.
func followReader(t testing.TB, bl *builder, follow func(context.Context) (chain.Chain, error), clock clockwork.Clock, log *slog.Logger) *chainread.Reader {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := chainread.New(chainread.Config{Chain: bl.c, Openers: bl.b.openers, Options: adaptor.Options{Logger: log},
		Follow: follow, Clock: clock})
	require.NoError(t, err)
	return r
}

// tick makes a live scanner ask Follow: it waits until the scanner's
// timer is armed (it follows a last segment live, and asked before if it
// did), then fires it.
func tick(t testing.TB, clock *clockwork.FakeClock) {
	t.Helper()
	tickAll(t, clock, 1)
}

// tickAll is tick for n scanners on one clock.
func tickAll(t testing.TB, clock *clockwork.FakeClock, n int) {
	t.Helper()
	require.NoError(t, clock.BlockUntilContext(testCtx(t), n), "fewer scanners follow a live segment")
	clock.Advance(chainread.DefaultFollowInterval)
}

// asked waits until a scanner that was ticked has asked Follow and armed
// its timer again: it follows a live segment still.
func asked(t testing.TB, clock *clockwork.FakeClock) {
	t.Helper()
	require.NoError(t, clock.BlockUntilContext(testCtx(t), 1))
}

// TestFollowsMigrations: a scanner started on a chain of one segment
// follows it live, learns from the chain store that it was sealed (two
// hops: memory → local → memory, the chain in a chain.Store over bbolt),
// delivers each sealed segment up to its End — also what its writer
// appended last, which no watermark released before the seal — and goes
// on with the next, live: every acknowledged append once, in timetick
// order, with no restart. The fenced writers' late appends fail, and
// nothing of them is delivered.
func TestFollowsMigrations(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "follow", "memory")
	store := bl.withStore()
	clock := clockwork.NewFakeClock()
	r := followReader(t, bl, func(ctx context.Context) (chain.Chain, error) { return store.Get(ctx, "follow") }, clock, nil)
	s, err := r.Read(ctx, chainread.ReadOption{Name: "follower"})
	require.NoError(t, err)
	defer s.Close()

	bl.append(50, 2)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted(), recv(t, s, 50))
	tick(t, clock) // nothing sealed yet: it goes on following
	asked(t, clock)

	n := len(bl.acked)
	for hop, next := range []string{"local", "memory2"} {
		// Appends no watermark released: the scanner holds them when the
		// seal comes.
		bl.append(30, 3)
		old := bl.w
		bl.migrate(next, int64(hop+2))
		m, _ := message.New([]byte("zombie"), nil)
		_, err := old.Append(ctx, m)
		require.ErrorIs(t, err, walimpls.ErrFenced, "the seal fenced the old writer")
		bl.append(40, 2)
		require.NoError(t, bl.w.Sync(ctx))

		tick(t, clock)
		check(t, bl.sorted()[n:], recv(t, s, len(bl.acked)-n))
		n = len(bl.acked)
	}
	// Live on the third segment.
	bl.append(10, 1)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted()[n:], recv(t, s, 10))
	asked(t, clock)
	require.NoError(t, s.Close())
	require.NoError(t, s.Error())
	require.Equal(t, bl.c.Segments[0].Backend, r.Chain().Last().Backend, "the Reader's chain is the one it was given")
}

// TestFollowLatestAndBatches: cursor.Latest with Follow starts at the end
// of the chain as Follow tells it, not as the Reader was given it; what
// the last segment's writer appends after Read and before the seal is
// delivered, released or not, and nothing from before, also by a scanner
// that delivered nothing before the seal; ReadBatches follows as Read
// does.
func TestFollowLatestAndBatches(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "latest", "local")
	bl.append(20, 2)
	f := &follower{}
	f.set(bl.c, nil)
	clock := clockwork.NewFakeClock()
	r := followReader(t, bl, f.follow, clock, nil)

	bl.migrate("memory", 2) // the Reader does not know it
	bl.append(20, 2)
	require.NoError(t, bl.w.Sync(ctx))
	f.set(bl.c, nil)
	s, err := r.ReadBatches(ctx, chainread.ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer s.Close()
	n := len(bl.acked)
	bl.append(5, 1)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted()[n:], recvBatches(t, s, 5))

	// Appends the writer never released, a seal, the next segment.
	quiet, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer quiet.Close()
	bl.append(15, 3)
	bl.migrate("local2", 3)
	bl.append(10, 2)
	require.NoError(t, bl.w.Sync(ctx))
	f.set(bl.c, nil)
	tickAll(t, clock, 2)
	check(t, bl.sorted()[n+5:], recvBatches(t, s, 25))
	check(t, bl.sorted()[n+5:], recv(t, quiet, 25))
}

// TestFollowFromTheStart: a scanner that delivered nothing of the segment
// when it learns the seal reads it from where its policy started (a
// checkpoint, and a filter), up to the End.
func TestFollowFromTheStart(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "fromstart", "memory")
	bl.append(20, 1)
	require.NoError(t, bl.w.Sync(ctx))
	pre, err := bl.reader(t).Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	cp, err := cursor.CheckpointOf(recv(t, pre, 10)[9])
	require.NoError(t, err)
	require.NoError(t, pre.Close())

	f := &follower{}
	f.set(bl.c, nil)
	clock := clockwork.NewFakeClock()
	r := followReader(t, bl, f.follow, clock, nil)
	// Nothing stored yet passes the filter.
	s, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(cp), Filter: adaptor.Filter{TimeTickAbove: bl.sorted()[19].res.TimeTick}})
	require.NoError(t, err)
	defer s.Close()
	bl.append(10, 2) // held back: no watermark
	bl.migrate("local", 2)
	bl.append(5, 1)
	require.NoError(t, bl.w.Sync(ctx))
	f.set(bl.c, nil)
	tick(t, clock)
	check(t, bl.sorted()[20:], recv(t, s, 15))
}

// TestFollowZombieWithoutFencing: on a backend that cannot fence, the old
// writer's appends after the seal are acknowledged. Those the scanner had
// not delivered when it learned the seal are never delivered; those a
// watermark released to it before it learned the seal end it with
// ErrTimeTickOrder (the seal excludes what it delivered) rather than go on
// out of order.
func TestFollowZombieWithoutFencing(t *testing.T) {
	ctx := testCtx(t)
	zombie := func(w adaptor.WAL, n int) {
		for range n {
			m, _ := message.New([]byte("zombie"), nil)
			_, err := w.Append(ctx, m)
			require.NoError(t, err, "nothing fences a writer of this backend")
		}
	}
	b := newBackends(t)

	t.Run("unreleased", func(t *testing.T) {
		bl := newChain(t, b, "zombie1", "nofence")
		f := &follower{}
		f.set(bl.c, nil)
		clock := clockwork.NewFakeClock()
		s, err := followReader(t, bl, f.follow, clock, nil).Read(ctx, chainread.ReadOption{})
		require.NoError(t, err)
		defer s.Close()
		bl.append(20, 2) // held back
		old := bl.w
		bl.migrate("memory", 2)
		zombie(old, 5)
		bl.append(10, 1)
		require.NoError(t, bl.w.Sync(ctx))
		f.set(bl.c, nil)
		tick(t, clock)
		check(t, bl.sorted(), recv(t, s, 30))
		// The zombie's watermark now releases nothing to the scanner,
		// which reads the next segment: the next message is the next
		// segment's.
		require.NoError(t, old.Sync(ctx))
		bl.append(1, 1)
		require.NoError(t, bl.w.Sync(ctx))
		check(t, bl.sorted()[30:], recv(t, s, 1))
	})

	t.Run("released", func(t *testing.T) {
		bl := newChain(t, b, "zombie2", "nofence")
		f := &follower{}
		f.set(bl.c, nil)
		clock := clockwork.NewFakeClock()
		s, err := followReader(t, bl, f.follow, clock, nil).Read(ctx, chainread.ReadOption{})
		require.NoError(t, err)
		defer s.Close()
		bl.append(10, 1)
		old := bl.w
		bl.migrate("memory", 2)
		zombie(old, 3)
		require.NoError(t, old.Sync(ctx))
		got := recv(t, s, 13) // the scanner does not know of the seal yet
		check(t, bl.sorted(), got[:10])
		f.set(bl.c, nil)
		tick(t, clock)
		require.Empty(t, drain(t, s))
		require.ErrorIs(t, s.Error(), chainread.ErrTimeTickOrder)
	})
}

// captured counts a logger's records by message.
type captured struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msgs == nil {
		c.msgs = make(map[string]int)
	}
	c.msgs[r.Message]++
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

func (c *captured) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs[msg]
}

// TestFollowErrors: a Follow that fails (or returns a chain that does not
// validate) is asked again at the next interval, logged once while it
// fails alike; the scanner goes on delivering. A chain that does not
// continue the scanner's ends it: its segment on another backend
// (ErrChainChanged), dropped (ErrPositionGone).
func TestFollowErrors(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "errs", "memory")
	f := &follower{}
	f.set(bl.c, errors.New("store unreachable"))
	clock := clockwork.NewFakeClock()
	logs := &captured{}
	r := followReader(t, bl, f.follow, clock, slog.New(logs))
	s, err := r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	for range 3 {
		tick(t, clock)
		asked(t, clock)
	}
	require.Equal(t, 3, f.count())
	const failing = "chainread: cannot learn the chain; asking again at the next interval"
	require.Equal(t, 1, logs.count(failing))
	bad := bl.c.Clone()
	bad.Segments = nil
	f.set(bad, nil)
	tick(t, clock)
	asked(t, clock)
	require.Equal(t, 2, logs.count(failing), "another error")
	bl.append(10, 1)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted(), recv(t, s, 10))

	// Learned again, sealed.
	bl.append(5, 1)
	bl.migrate("local", 2)
	bl.append(5, 1)
	require.NoError(t, bl.w.Sync(ctx))
	f.set(bl.c, nil)
	tick(t, clock)
	check(t, bl.sorted()[10:], recv(t, s, 10))
	asked(t, clock)
	require.Equal(t, 1, logs.count("chainread: learns the chain again"))

	// Segment 1 on another backend: the chain was created again.
	other := bl.c.Clone()
	other.Segments[1].Backend = backend("memory2", "errs-s1")
	f.set(other, nil)
	tick(t, clock)
	require.Empty(t, drain(t, s))
	require.ErrorIs(t, s.Error(), chainread.ErrChainChanged)

	// Segment 1 dropped under a scanner reading it. The Reader's chain
	// ends at segment 0: the scanner starts on the chain Follow tells.
	f.set(bl.c, nil)
	s, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.StartFrom(cursor.IDOf(cursor.Position{Segment: 1, ID: bl.acked[15].res.ID.Marshal()}))})
	require.NoError(t, err)
	defer s.Close()
	check(t, bl.sorted()[15:], recv(t, s, 5))
	tick(t, clock)
	asked(t, clock) // segment 1 is still the last: nothing to learn
	bl.migrate("memory", 3)
	dropped := bl.c.Clone()
	dropped.Segments = dropped.Segments[2:]
	f.set(dropped, nil)
	tick(t, clock)
	require.Empty(t, drain(t, s))
	require.ErrorIs(t, s.Error(), walimpls.ErrPositionGone)
}

// TestFollowStops: Close stops a scanner that waits for Follow, whose
// context it cancels.
func TestFollowStops(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "stops", "memory")
	clock := clockwork.NewFakeClock()
	entered := make(chan struct{})
	var once sync.Once
	follow := func(ctx context.Context) (chain.Chain, error) {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return chain.Chain{}, ctx.Err()
	}
	s, err := followReader(t, bl, follow, clock, nil).Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	tick(t, clock)
	<-entered
	require.NoError(t, s.Close())
	require.NoError(t, s.Error())
	_, ok := <-s.Chan()
	require.False(t, ok)
}

// failingOpener opens WALs whose scanners the test can end with an error
// (fail), as a broker that drops its readers for good, or fences them,
// ends them: every scanner of the WALs opened so far ends, and their
// later reads fail alike. WALs opened later read.
type failingOpener struct {
	walimpls.Opener
	mu   sync.Mutex
	wals []*failingWAL
}

func (o *failingOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	w, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	fw := &failingWAL{WALImpl: w, o: o}
	o.mu.Lock()
	o.wals = append(o.wals, fw)
	o.mu.Unlock()
	return fw, nil
}

// fail ends the scanners of every WAL opened so far with err, and fails
// their later reads.
func (o *failingOpener) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.wals {
		w.failed = err
		for _, s := range w.live {
			s.Stop(err)
		}
		w.live = nil
	}
	o.wals = nil
}

// failingWAL hides the backend's BatchReader: the adaptor reads through
// Read, whose scanners the opener ends.
type failingWAL struct {
	walimpls.WALImpl
	o *failingOpener
	// Guarded by o.mu.
	failed error
	live   []*failingScanner
}

func (w *failingWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.failed != nil {
		return nil, w.failed
	}
	in, err := w.WALImpl.Read(ctx, opt)
	if err != nil {
		return nil, err
	}
	s := &failingScanner{Run: lifecycle.NewRun(), in: in, out: make(chan message.Immutable)}
	w.live = append(w.live, s)
	go s.run()
	return s, nil
}

// failingScanner hands on what the backend's scanner delivers until it is
// stopped: its Error is then the stop's reason.
type failingScanner struct {
	*lifecycle.Run
	in  walimpls.Scanner
	out chan message.Immutable
}

func (s *failingScanner) Chan() <-chan message.Immutable { return s.out }

func (s *failingScanner) run() {
	var err error
	defer func() {
		_ = s.in.Close()
		s.End(err)
		close(s.out)
	}()
	for {
		select {
		case m, ok := <-s.in.Chan():
			if !ok {
				err = s.in.Error()
				return
			}
			select {
			case s.out <- m:
			case <-s.Stopping():
				return
			}
		case <-s.Stopping():
			return
		}
	}
}

// TestFollowWhenTheSegmentScannerEnds: a live segment's scanner that ends
// makes the scanner ask Follow at once, without waiting for the interval:
// the segment sealed, it reads the rest and goes on; not sealed, it ends
// with the segment scanner's error; fenced while a migration is pending,
// it waits for the seal (asking every interval).
func TestFollowWhenTheSegmentScannerEnds(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	fo := &failingOpener{Opener: b.mem}
	b.openers["failing"] = fo
	broken := errors.New("connection reset")

	t.Run("sealed", func(t *testing.T) {
		bl := newChain(t, b, "ends1", "failing")
		f := &follower{}
		f.set(bl.c, nil)
		clock := clockwork.NewFakeClock()
		s, err := followReader(t, bl, f.follow, clock, nil).Read(ctx, chainread.ReadOption{})
		require.NoError(t, err)
		defer s.Close()
		bl.append(10, 1)
		require.NoError(t, bl.w.Sync(ctx))
		check(t, bl.sorted(), recv(t, s, 10))
		bl.append(10, 2) // held back
		bl.migrate("local", 2)
		bl.append(5, 1)
		require.NoError(t, bl.w.Sync(ctx))
		f.set(bl.c, nil)
		fo.fail(broken)
		check(t, bl.sorted()[10:], recv(t, s, 15)) // the clock never moved
	})

	t.Run("not sealed", func(t *testing.T) {
		bl := newChain(t, b, "ends2", "failing")
		f := &follower{}
		f.set(bl.c, nil)
		s, err := followReader(t, bl, f.follow, clockwork.NewFakeClock(), nil).Read(ctx, chainread.ReadOption{})
		require.NoError(t, err)
		defer s.Close()
		bl.append(3, 1)
		require.NoError(t, bl.w.Sync(ctx))
		check(t, bl.sorted(), recv(t, s, 3))
		fo.fail(broken)
		require.Empty(t, drain(t, s))
		require.ErrorIs(t, s.Error(), broken)
		require.Equal(t, 1, f.count())
	})

	t.Run("fenced", func(t *testing.T) {
		bl := newChain(t, b, "ends3", "failing")
		f := &follower{}
		f.set(bl.c, nil)
		clock := clockwork.NewFakeClock()
		r := followReader(t, bl, f.follow, clock, nil)
		s, err := r.Read(ctx, chainread.ReadOption{})
		require.NoError(t, err)
		defer s.Close()
		bl.append(3, 1)
		require.NoError(t, bl.w.Sync(ctx))
		check(t, bl.sorted(), recv(t, s, 3))

		pending := bl.c.Clone()
		pending.Pending = &chain.Migration{Target: backend("local", "ends3-s1"), Term: 2, By: "test", At: at}
		f.set(pending, nil)
		fenced := &walimpls.FencedError{Channel: "ends3", Term: 1, CurrentTerm: 2}
		fo.fail(fenced)
		tick(t, clock) // it waits for the seal, asking every interval
		asked(t, clock)
		bl.append(4, 2) // held back
		bl.migrate("local", 2)
		bl.append(2, 1)
		require.NoError(t, bl.w.Sync(ctx))
		f.set(bl.c, nil)
		tick(t, clock)
		check(t, bl.sorted()[3:], recv(t, s, 6))
	})

	t.Run("fenced, nothing pending", func(t *testing.T) {
		bl := newChain(t, b, "ends4", "failing")
		f := &follower{}
		f.set(bl.c, nil)
		s, err := followReader(t, bl, f.follow, clockwork.NewFakeClock(), nil).Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.Latest()})
		require.NoError(t, err)
		defer s.Close()
		fo.fail(&walimpls.FencedError{Channel: "ends4", Term: 1, CurrentTerm: 2})
		require.Empty(t, drain(t, s))
		require.ErrorIs(t, s.Error(), walimpls.ErrFenced)
	})
}

// TestFollowWithWriter: a Reader given its last segment's writer
// (Config.Writer) reads that segment through it until the seal is
// learned, then the segment's rest read-only, and the next segment, which
// that writer does not write, read-only and live.
func TestFollowWithWriter(t *testing.T) {
	ctx := testCtx(t)
	b := newBackends(t)
	bl := newChain(t, b, "writer", "memory")
	f := &follower{}
	f.set(bl.c, nil)
	clock := clockwork.NewFakeClock()
	r, err := chainread.New(chainread.Config{Chain: bl.c, Openers: b.openers, Options: adaptor.Options{Logger: slog.New(slog.DiscardHandler)},
		Writer: bl.w, Follow: f.follow, Clock: clock})
	require.NoError(t, err)
	s, err := r.Read(ctx, chainread.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	bl.append(20, 2) // released by the writer itself: no watermark needed
	check(t, bl.sorted(), recv(t, s, 20))

	bl.append(10, 2)
	bl.migrate("local", 2)
	bl.append(10, 1)
	require.NoError(t, bl.w.Sync(ctx))
	f.set(bl.c, nil)
	tick(t, clock)
	check(t, bl.sorted()[20:], recv(t, s, 20))
	bl.append(5, 1)
	require.NoError(t, bl.w.Sync(ctx))
	check(t, bl.sorted()[40:], recv(t, s, 5))
}
