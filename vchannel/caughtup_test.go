package vchannel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls"
)

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func caughtUp(t *testing.T, r *vchannel.Replayer, vc string) <-chan struct{} {
	t.Helper()
	ch, ok := r.CaughtUp(vc)
	require.True(t, ok, "no caught-up signal for %s", vc)
	return ch
}

// readCatchingUp reads the n messages s owes before the tail one at a time,
// checking before each receive that the consumer is not told it caught up
// yet, then waits (without reading more) for the signal, and returns what
// it read.
func readCatchingUp(t testing.TB, s walimpls.Scanner, up <-chan struct{}, vc string, n int) []message.Immutable {
	t.Helper()
	var got []message.Immutable
	for len(got) < n {
		if closed(up) {
			require.FailNowf(t, "caught up early", "vchannel %s: told it caught up after %d of its %d messages before the tail", vc, len(got), n)
		}
		got = append(got, recvN(t, s, 1)...)
	}
	select {
	case <-up:
	case <-time.After(watchdog):
		require.FailNowf(t, "watchdog", "vchannel %s: not told it caught up after its %d messages before the tail", vc, n)
	}
	return got
}

// gate holds back, in every backend scanner of the WALs opened through it
// but their open's recovery read, each watermark at or above a timetick
// until it is opened: a reader of those WALs cannot reach that watermark
// before the test says so.
type gate struct {
	tt     atomic.Uint64 // 0 holds back nothing
	opened chan struct{}
	once   sync.Once
}

func newGate() *gate { return &gate{opened: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }

func (g *gate) holds(m message.Immutable) bool {
	limit := g.tt.Load()
	if limit == 0 || m.Kind() != message.KindTimeTick {
		return false
	}
	tt, _ := m.TimeTick()
	return tt >= limit
}

func (g *gate) wrap(o walimpls.Opener) walimpls.Opener { return gatedOpener{Opener: o, g: g} }

type gatedOpener struct {
	walimpls.Opener
	g *gate
}

func (o gatedOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	w, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	return gatedWAL{WALImpl: w, g: o.g}, nil
}

type gatedWAL struct {
	walimpls.WALImpl
	g *gate
}

func (w gatedWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	s, err := w.WALImpl.Read(ctx, opt)
	if err != nil || opt.Name == "recovery" {
		return s, err
	}
	gs := &gatedScanner{inner: s, g: w.g, out: make(chan message.Immutable), stop: make(chan struct{}), done: make(chan struct{})}
	go gs.run()
	return gs, nil
}

type gatedScanner struct {
	inner    walimpls.Scanner
	g        *gate
	out      chan message.Immutable
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func (s *gatedScanner) run() {
	defer close(s.done)
	defer close(s.out)
	for {
		select {
		case m, ok := <-s.inner.Chan():
			if !ok {
				<-s.inner.Done()
				return
			}
			if s.g.holds(m) {
				select {
				case <-s.g.opened:
				case <-s.stop:
					return
				}
			}
			select {
			case s.out <- m:
			case <-s.stop:
				return
			}
		case <-s.stop:
			return
		}
	}
}

func (s *gatedScanner) Chan() <-chan message.Immutable { return s.out }
func (s *gatedScanner) Done() <-chan struct{}          { return s.done }
func (s *gatedScanner) Error() error {
	select {
	case <-s.done:
		return s.inner.Error()
	default:
		return nil
	}
}

func (s *gatedScanner) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	_ = s.inner.Close()
	<-s.done
	return nil
}

// A consumer is told it caught up only once the replay has read up to the
// tail and its reader took every message before it: not while the tail is
// out of reach (though its reader has everything there is), not before its
// reader took what was handed to it. A consumer with no messages, and one
// whose checkpoint is past all of its messages, are told once the tail is
// read; one whose checkpoint is at or past the tail, at once.
func TestCaughtUpWaitsForTheTailAndTheReader(t *testing.T) {
	o := backends()[0].open(t)
	writer := openWAL(t, o, "pch", adaptor.Options{})
	const n = 20
	want := fill(t, writer, []string{"vc-a", "vc-b", "vc-past"}, n)
	// vc-one is owed a single message: a signal one message early fires
	// before its reader took anything.
	one := fill(t, writer, []string{"vc-one"}, 1)["vc-one"]
	// vc-past's consumer has processed all of its messages.
	s, err := view(t, writer, "vc-past").Read(context.Background(), adaptor.ReadOption{})
	require.NoError(t, err)
	past, err := cursor.CheckpointOf(recvN(t, s, n)[n-1])
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	tail, err := writer.Tail(ctx)
	require.NoError(t, err)
	// A checkpoint at the tail: a consumer that processed a message
	// appended after it.
	res, err := view(t, writer, "vc-ahead").Append(ctx, msg(t, "after the tail"))
	require.NoError(t, err)
	require.Greater(t, res.TimeTick, tail.TimeTick)
	ahead := cursor.Checkpoint{Position: res.ID, TimeTick: res.TimeTick}

	// A follower: the replay reads the log, where the gate holds the tail
	// back.
	g := newGate()
	g.tt.Store(tail.TimeTick)
	follower := openWAL(t, g.wrap(o), "pch", adaptor.Options{ReadOnly: true})
	r := replay(t, follower, []vchannel.Consumer{
		{VChannel: "vc-a"}, {VChannel: "vc-b"}, {VChannel: "vc-one"}, {VChannel: "vc-empty"},
		{VChannel: "vc-past", After: past}, {VChannel: "vc-ahead", After: ahead},
	}, vchannel.ReplayOptions{CatchUpTo: tail})
	got, ok := r.Tail()
	require.True(t, ok)
	require.Equal(t, tail, got)
	_, ok = r.CaughtUp("unknown")
	require.False(t, ok)
	require.True(t, closed(caughtUp(t, r, "vc-ahead")), "a checkpoint past the tail is caught up from the start")

	// vc-a's reader takes every message there is before the tail, which
	// the replay has not read yet: nobody is caught up.
	require.Equal(t, want["vc-a"], payloads(t, "vc-a", recvN(t, scanner(t, r, "vc-a"), n)))
	for _, vc := range []string{"vc-a", "vc-b", "vc-one", "vc-empty", "vc-past"} {
		require.False(t, closed(caughtUp(t, r, vc)), "%s told it caught up before the replay read the tail", vc)
	}

	// The replay reads the tail: the consumers owed nothing are caught up.
	g.open()
	for _, vc := range []string{"vc-a", "vc-empty", "vc-past"} {
		select {
		case <-caughtUp(t, r, vc):
		case <-time.After(watchdog):
			t.Fatalf("watchdog: %s not told it caught up once the tail was read", vc)
		}
	}
	// vc-b's and vc-one's messages were all handed to their streams (the
	// replay read past them), but their readers have taken none.
	require.Equal(t, want["vc-b"], payloads(t, "vc-b", readCatchingUp(t, scanner(t, r, "vc-b"), caughtUp(t, r, "vc-b"), "vc-b", n)))
	require.Equal(t, one, payloads(t, "vc-one", readCatchingUp(t, scanner(t, r, "vc-one"), caughtUp(t, r, "vc-one"), "vc-one", 1)))
	for _, vc := range []string{"vc-a", "vc-b", "vc-one", "vc-empty", "vc-past"} {
		nothingBefore(t, writer, scanner(t, r, vc), vc)
	}
	require.Zero(t, r.Detachments())
}

// With appends going on after the tail Replay took, each consumer is told
// it caught up once its reader took exactly its messages from before
// Replay: not earlier, and without reading any appended since. An empty
// vchannel is told once the replay read the tail.
func TestCaughtUpUnderConcurrentAppends(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		w := openWAL(t, b.open(t), "pch", adaptor.Options{})
		vcs := vcNames(4)
		const n, more = 30, 30
		want := fill(t, w, vcs, n)
		consumers := []vchannel.Consumer{{VChannel: "vc-empty"}, {VChannel: "vc-probe"}}
		for _, vc := range vcs {
			consumers = append(consumers, vchannel.Consumer{VChannel: vc})
		}
		r := replay(t, w, consumers, vchannel.ReplayOptions{})
		tail, ok := r.Tail()
		require.True(t, ok, "a read-write WAL gives its tail")

		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		after := map[string][]string{}
		for _, vc := range vcs {
			ps := make([]string, more)
			for i := range ps {
				ps[i] = fmt.Sprintf("%s/after/%04d", vc, i)
			}
			after[vc] = ps
		}
		// Each vchannel's first message after the tail, then a probe: once
		// the probe is received, the replay has handed the streams those
		// first messages (it hands out in timetick order), and their
		// readers have taken nothing.
		for _, vc := range vcs {
			res, err := view(t, w, vc).Append(ctx, msg(t, after[vc][0]))
			require.NoError(t, err)
			require.Greater(t, res.TimeTick, tail.TimeTick)
		}
		_, err := view(t, w, "vc-probe").Append(ctx, msg(t, "probe"))
		require.NoError(t, err)
		probe := scanner(t, r, "vc-probe")
		require.Equal(t, []string{"probe"}, payloads(t, "vc-probe", recvN(t, probe, 1)))
		for _, vc := range vcs {
			require.False(t, closed(caughtUp(t, r, vc)), "%s told it caught up before its reader took anything", vc)
		}
		var appenders sync.WaitGroup
		for _, vc := range vcs {
			v := view(t, w, vc)
			appenders.Add(1)
			go func() {
				defer appenders.Done()
				for _, p := range after[vc][1:] {
					res, err := v.Append(ctx, msg(t, p))
					if !assert.NoError(t, err) {
						return
					}
					assert.Greater(t, res.TimeTick, tail.TimeTick)
				}
			}()
		}
		// Once the empty vchannel is told, the replay has read the tail:
		// the others' readers have taken nothing yet.
		for _, vc := range []string{"vc-empty", "vc-probe"} {
			select {
			case <-caughtUp(t, r, vc):
			case <-time.After(watchdog):
				t.Fatalf("watchdog: %s was never told it caught up", vc)
			}
		}
		var readers sync.WaitGroup
		for _, vc := range vcs {
			readers.Add(1)
			go func() {
				defer readers.Done()
				s := scanner(t, r, vc)
				before := readCatchingUp(t, s, caughtUp(t, r, vc), vc, n)
				assert.Equal(t, want[vc], payloads(t, vc, before))
				assert.Equal(t, after[vc], payloads(t, vc, recvN(t, s, more)))
			}()
		}
		readers.Wait()
		appenders.Wait()
		require.False(t, t.Failed())
	})
}

// A consumer detached before the replay read the tail reads the rest from
// a scanner of its own, and is told it caught up once its reader took
// every message before the tail from there, not when it was detached or
// the shared reader read the tail.
func TestCaughtUpDetachedConsumer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		w := openWAL(t, b.open(t), "pch", adaptor.Options{})
		const nvc, perVC = 4, 60
		vcs := vcNames(nvc)
		want := fill(t, w, vcs, perVC)
		consumers := make([]vchannel.Consumer, nvc)
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc}
		}
		slow := vcs[0]
		consumers[0].BufferBytes = 2 << 10 // a few of its messages
		detached := make(chan string, nvc)
		r := replay(t, w, consumers, vchannel.WithDetachHook(vchannel.ReplayOptions{}, func(vc string) { detached <- vc }))

		var readers sync.WaitGroup
		for _, vc := range vcs[1:] {
			readers.Add(1)
			go func() {
				defer readers.Done()
				got := readCatchingUp(t, scanner(t, r, vc), caughtUp(t, r, vc), vc, perVC)
				assert.Equal(t, want[vc], payloads(t, vc, got))
			}()
		}
		readers.Wait()
		require.False(t, t.Failed())
		select {
		case vc := <-detached:
			require.Equal(t, slow, vc)
		case <-time.After(watchdog):
			t.Fatal("watchdog: the slow consumer was never detached")
		}
		// The others caught up: the shared reader read the tail. The slow
		// consumer's reader has taken nothing.
		got := readCatchingUp(t, scanner(t, r, slow), caughtUp(t, r, slow), slow, perVC)
		require.Equal(t, want[slow], payloads(t, slow, got))
		nothingBefore(t, w, scanner(t, r, slow), slow)
		require.Equal(t, 1, r.Detachments())
	})
}

// CatchUpTo may name any timetick, a message's: a consumer is then caught
// up once its reader took every message of its vchannel at or below it. The
// replay learns it has handed them all from the first message above it (no
// watermark need come between), and still waits for the reader.
func TestCaughtUpToAMessage(t *testing.T) {
	w := openWAL(t, backends()[0].open(t), "pch", adaptor.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	b := view(t, w, "vc-b")
	const n, upTo = 20, 10
	var want []string
	var to adaptor.AppendResult
	for i := range n {
		p := fmt.Sprintf("b/%04d", i)
		res, err := b.Append(ctx, msg(t, p))
		require.NoError(t, err)
		want = append(want, p)
		if i == upTo-1 {
			to = res
		}
	}
	_, err := view(t, w, "vc-probe").Append(ctx, msg(t, "probe"))
	require.NoError(t, err)
	r := replay(t, w, []vchannel.Consumer{{VChannel: "vc-b"}, {VChannel: "vc-probe"}},
		vchannel.ReplayOptions{CatchUpTo: cursor.Checkpoint{Position: to.ID, TimeTick: to.TimeTick}})
	// The probe, appended after every message of vc-b, was received: the
	// replay handed vc-b's stream all of them.
	require.Equal(t, []string{"probe"}, payloads(t, "vc-probe", recvN(t, scanner(t, r, "vc-probe"), 1)))
	select {
	case <-caughtUp(t, r, "vc-probe"):
	case <-time.After(watchdog):
		t.Fatal("watchdog: vc-probe, owed nothing, was never told it caught up")
	}
	require.False(t, closed(caughtUp(t, r, "vc-b")), "vc-b told it caught up before its reader took anything")
	s := scanner(t, r, "vc-b")
	require.Equal(t, want[:upTo], payloads(t, "vc-b", readCatchingUp(t, s, caughtUp(t, r, "vc-b"), "vc-b", upTo)))
	require.Equal(t, want[upTo:], payloads(t, "vc-b", recvN(t, s, n-upTo)))
}

// A read-only WAL has no tail to take: without CatchUpTo the replay runs
// and tells nobody. CatchUpTo must be a tail; a WAL that cannot take its
// tail for another reason fails Replay. A consumer whose scanner ends
// before it caught up is never told.
func TestCaughtUpWithoutATail(t *testing.T) {
	o := backends()[0].open(t)
	w := openWAL(t, o, "pch", adaptor.Options{})
	want := fill(t, w, []string{"vc"}, 5)
	ro := openWAL(t, o, "pch", adaptor.Options{ReadOnly: true})
	r := replay(t, ro, []vchannel.Consumer{{VChannel: "vc"}}, vchannel.ReplayOptions{})
	_, ok := r.Tail()
	require.False(t, ok)
	_, ok = r.CaughtUp("vc")
	require.False(t, ok, "no tail, no caught-up signal")
	require.Equal(t, want["vc"], payloads(t, "vc", recvN(t, scanner(t, r, "vc"), 5)))

	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	_, err := vchannel.Replay(ctx, ro, []vchannel.Consumer{{VChannel: "vc"}}, vchannel.ReplayOptions{CatchUpTo: cursor.Checkpoint{Position: message.NewSeqID("pch", 1)}})
	require.ErrorIs(t, err, vchannel.ErrInvalidReplay)

	// Fenced by a higher term: the old owner still replays its history,
	// without a tail.
	fenced := openWAL(t, o, "fenced", adaptor.Options{})
	fencedWant := fill(t, fenced, []string{"vc"}, 5)
	w2, err := adaptor.Open(ctx, o, adaptor.Channel{Name: "fenced", Term: 2}, adaptor.Options{Logger: quiet()})
	require.NoError(t, err)
	defer func() { require.NoError(t, w2.Close()) }()
	late, err := message.New([]byte("late"), nil)
	require.NoError(t, err)
	_, err = fenced.Append(ctx, late.WithVChannel("vc"))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	rf := replay(t, fenced, []vchannel.Consumer{{VChannel: "vc"}}, vchannel.ReplayOptions{})
	_, ok = rf.CaughtUp("vc")
	require.False(t, ok, "a fenced WAL takes no tail")
	require.Equal(t, fencedWant["vc"], payloads(t, "vc", recvN(t, scanner(t, rf, "vc"), 5)))
	require.NoError(t, rf.Close())

	// Closed before its reader took its messages: never told.
	r2 := replay(t, w, []vchannel.Consumer{{VChannel: "vc"}}, vchannel.ReplayOptions{})
	up := caughtUp(t, r2, "vc")
	require.NoError(t, r2.Close())
	require.False(t, closed(up))

	require.NoError(t, w.Close())
	_, err = vchannel.Replay(ctx, w, []vchannel.Consumer{{VChannel: "vc"}}, vchannel.ReplayOptions{})
	require.ErrorIs(t, err, walimpls.ErrClosed)
}
