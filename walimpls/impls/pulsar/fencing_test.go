package pulsar

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// ackLog records acknowledged appends from many goroutines.
type ackLog struct {
	mu  sync.Mutex
	ids map[string]message.ID
}

func (l *ackLog) add(p string, id message.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids[p] = id
}

func (l *ackLog) snapshot() map[string]message.ID {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]message.ID, len(l.ids))
	for p, id := range l.ids {
		out[p] = id
	}
	return out
}

// appender appends to one WAL until an append fails or it is stopped.
type appender struct {
	w     walimpls.WALImpl
	tag   string
	stop  chan struct{}
	done  chan struct{}
	acked atomic.Int64
	err   error // the error that ended it; read after done
}

func startAppender(w walimpls.WALImpl, tag string, log *ackLog) *appender {
	a := &appender{w: w, tag: tag, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			default:
			}
			p := fmt.Sprintf("%s-%d", tag, i)
			m, err := message.New([]byte(p), nil)
			if err != nil {
				a.err = err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			id, err := walimpls.Append(ctx, w, m)
			cancel()
			if err != nil {
				a.err = err
				return
			}
			log.add(p, id)
			a.acked.Add(1)
		}
	}()
	return a
}

// finish stops a and waits for it.
func (a *appender) finish(t *testing.T) {
	t.Helper()
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "appender did not stop", a.tag)
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, d, time.Millisecond, what)
}

// tail collects everything a scanner delivers.
type tail struct {
	mu   sync.Mutex
	msgs []message.Immutable
	done chan struct{}
}

func startTail(s walimpls.Scanner) *tail {
	tl := &tail{done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		for m := range s.Chan() {
			tl.mu.Lock()
			tl.msgs = append(tl.msgs, m)
			tl.mu.Unlock()
		}
	}()
	return tl
}

func (tl *tail) delivered() []message.Immutable {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]message.Immutable(nil), tl.msgs...)
}

// raceMode is how two racing opens of one round are ordered.
type raceMode struct {
	name string
	// same: both opens claim the same term; otherwise the second claims
	// one term more than the first.
	same bool
	// gated: both opens fold the meta topic before either claims, and
	// open number claimFirst claims first; otherwise they just race.
	gated      bool
	claimFirst int
	// startFirst is the open whose goroutine starts first (free races).
	startFirst int
}

// TestRacingOpens is the regression test for "a losing lower-term open
// disrupts the higher-term winner". Rounds of two racing ReadWrite opens
// (terms T and T+1 in both claim orders, and two opens of one term) take
// the channel from the previous round's winner, which keeps appending
// until it is fenced; every open that succeeds appends at once, and a
// reader tails the channel throughout. Pinned, every round:
//
//   - the winner (the highest term, the later claim of one term) opens;
//   - the winner is never fenced and acquires its producer exactly once:
//     no open that lost disturbed it;
//   - no TakeOver (unload) is called while a claim that beats the caller's
//     exists;
//
// and at the end every acknowledged append is read back exactly once, at
// its acknowledged ID, in ID order, by the reader that tailed throughout.
func TestRacingOpens(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	const name = "racing"
	meta := topicOf(cfg, name) + metaSuffix
	checker := newOpener(t, cfg) // folds the meta topic for the checks

	var (
		mu         sync.Mutex
		unloads    int
		violations []string
	)
	// node returns an opener whose TakeOver checks, before unloading, that
	// no claim beats the claim of the WAL it opens (nonce, set by gate).
	node := func(term int64, nonce *atomic.Value, gate func(ctx context.Context, w *wal)) *Opener {
		c := cfg
		c.TakeOver = func(ctx context.Context, topic string) error {
			st, err := checker.readMeta(ctx, meta, "")
			mine, _ := nonce.Load().(string)
			mu.Lock()
			unloads++
			switch {
			case err != nil:
				violations = append(violations, fmt.Sprintf("term %d: cannot fold the claims at unload: %v", term, err))
			case st.winnerNonce != mine:
				violations = append(violations, fmt.Sprintf("term %d unloaded the topic while term %d's claim %s beat its claim %s", term, st.maxTerm, st.winnerNonce, mine))
			}
			mu.Unlock()
			return b.UnloadTopic(topic)
		}
		o := newOpener(t, c)
		o.hooks.beforeClaim = func(ctx context.Context, w *wal) {
			nonce.Store(w.nonce)
			if gate != nil {
				gate(ctx, w)
			}
		}
		return o
	}

	log := &ackLog{ids: map[string]message.ID{}}
	first := open(t, newOpener(t, cfg), name, 1, walimpls.ReadWrite)
	ro := open(t, newOpener(t, cfg), name, 0, walimpls.ReadOnly)
	s, err := ro.Read(context.Background(), walimpls.ReadOption{Name: "tail", DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	tl := startTail(s)

	owner := first
	ownerApp := startAppender(first, "t1", log)
	waitFor(t, 10*time.Second, "the first owner appends", func() bool { return ownerApp.acked.Load() >= 5 })
	term := int64(1)

	modes := []raceMode{
		{name: "free/lower-starts", startFirst: 0},
		{name: "free/higher-starts", startFirst: 1},
		{name: "gated/lower-claims-first", gated: true, claimFirst: 0},
		{name: "gated/higher-claims-first", gated: true, claimFirst: 1},
		{name: "same-term/free", same: true},
		{name: "same-term/gated", same: true, gated: true, claimFirst: 0},
	}
	var rounds []raceMode
	for range 2 {
		rounds = append(rounds, modes...)
	}
	for r, mode := range rounds {
		terms := [2]int64{term + 1, term + 2}
		if mode.same {
			terms[1] = term + 1
		}
		before, err := b.Stats(meta)
		require.NoError(t, err)
		var (
			nonces [2]atomic.Value
			folded [2]chan struct{}
		)
		for i := range folded {
			folded[i] = make(chan struct{})
		}
		gate := func(i int) func(ctx context.Context, w *wal) {
			if !mode.gated {
				return nil
			}
			return func(ctx context.Context, w *wal) {
				close(folded[i])
				for _, f := range folded {
					select {
					case <-f:
					case <-ctx.Done():
						return
					}
				}
				if i == mode.claimFirst {
					return
				}
				// Claim once the other open's claim is stored.
				for ctx.Err() == nil {
					st, err := b.Stats(meta)
					if err == nil && st.Entries > before.Entries {
						return
					}
					time.Sleep(time.Millisecond) // polls the condition above
				}
			}
		}
		var nodes [2]*Opener
		for i := range nodes {
			nodes[i] = node(terms[i], &nonces[i], gate(i))
		}

		type opened struct {
			w   walimpls.WALImpl
			app *appender
			err error
		}
		var (
			results [2]opened
			wg      sync.WaitGroup
			started = make(chan struct{})
		)
		openOne := func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w, err := nodes[i].Open(ctx, walimpls.Channel{Name: name, Term: terms[i], Mode: walimpls.ReadWrite})
			results[i].err = err
			if err == nil {
				results[i].w = w
				results[i].app = startAppender(w, fmt.Sprintf("r%d-o%d-t%d", r, i, terms[i]), log)
			}
		}
		wg.Add(2)
		go func() { openOne(mode.startFirst); close(started) }()
		go openOne(1 - mode.startFirst)
		wg.Wait()
		<-started

		// The winner is the highest term, the last claim of that term.
		st, err := checker.readMeta(context.Background(), meta, "")
		require.NoError(t, err)
		win := -1
		for i := range nonces {
			if n, _ := nonces[i].Load().(string); n == st.winnerNonce {
				win = i
			}
		}
		require.NotEqualf(t, -1, win, "round %d (%s): the winning claim is neither open's", r, mode.name)
		require.Equal(t, terms[1], st.maxTerm)
		lose := 1 - win
		winner := results[win]
		require.NoErrorf(t, winner.err, "round %d (%s): the winning open (term %d) failed", r, mode.name, terms[win])
		if results[lose].err != nil {
			require.ErrorIsf(t, results[lose].err, walimpls.ErrFenced, "round %d (%s): the losing open", r, mode.name)
		}
		t.Logf("round %d (%s): terms %v, winner open %d (term %d), loser opened: %v", r, mode.name, terms, win, terms[win], results[lose].err == nil)

		// The previous owner and an opened loser end fenced.
		for _, a := range []*appender{ownerApp, results[lose].app} {
			if a == nil {
				continue
			}
			select {
			case <-a.done:
			case <-time.After(30 * time.Second):
				require.FailNowf(t, "a fenced writer kept appending", "round %d (%s): %s", r, mode.name, a.tag)
			}
			require.ErrorIsf(t, a.err, walimpls.ErrFenced, "round %d (%s): %s", r, mode.name, a.tag)
		}

		// The winner keeps appending, undisturbed.
		n := winner.app.acked.Load()
		waitFor(t, 20*time.Second, "the winner appends", func() bool {
			select {
			case <-winner.app.done:
				return true
			default:
			}
			return winner.app.acked.Load() >= n+20
		})
		select {
		case <-winner.app.done:
			require.FailNowf(t, "the winner stopped appending", "round %d (%s): %v", r, mode.name, winner.app.err)
		default:
		}
		ww := winner.w.(*wal)
		require.NoErrorf(t, ww.wr.fencedErr(), "round %d (%s): the winner was fenced", r, mode.name)
		require.EqualValuesf(t, 1, ww.wr.acquired.Load(), "round %d (%s): the winner re-acquired its producer", r, mode.name)

		require.NoError(t, owner.Close())
		if results[lose].w != nil {
			require.NoError(t, results[lose].w.Close())
		}
		owner, ownerApp, term = winner.w, winner.app, terms[1]
	}
	ownerApp.finish(t)
	require.NoError(t, ownerApp.err)
	ow := owner.(*wal)
	require.EqualValues(t, 1, ow.wr.acquired.Load())

	mu.Lock()
	assert.Empty(t, violations)
	t.Logf("take-over calls: %d", unloads)
	mu.Unlock()

	// Every acknowledged append is read back once, at its ID, in order.
	acked := log.snapshot()
	waitFor(t, 30*time.Second, "the reader delivers every acknowledged append", func() bool {
		seen := map[string]bool{}
		for _, m := range tl.delivered() {
			seen[string(m.Payload())] = true
		}
		for p := range acked {
			if !seen[p] {
				return false
			}
		}
		return true
	})
	require.NoError(t, s.Close())
	<-tl.done
	got := tl.delivered()
	copies := map[string]int{}
	for i, m := range got {
		p := string(m.Payload())
		copies[p]++
		if i > 0 {
			require.Truef(t, got[i-1].ID().LT(m.ID()), "delivered %s after %s", m.ID(), got[i-1].ID())
		}
		if id, ok := acked[p]; ok {
			require.Truef(t, id.EQ(m.ID()), "%s acknowledged at %s, read at %s", p, id, m.ID())
		}
	}
	var twice []string
	for p, n := range copies {
		if n > 1 {
			twice = append(twice, p)
		}
	}
	sort.Strings(twice)
	require.Empty(t, twice, "payloads read more than once")
	t.Logf("%d appends acknowledged, %d messages read", len(acked), len(got))
}

// TestSameTermLaterOpenFences: a later ReadWrite open of the same term
// fences the earlier writer, which releases the topic by itself (its meta
// watcher sees the later claim): no TakeOver is needed. From the moment the
// later Open returns, the earlier writer's Append and Truncate fail with a
// FencedError whose CurrentTerm is its own term, refusals marked as storing
// nothing, and nothing of it reaches the log; its Last still answers.
func TestSameTermLaterOpenFences(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	var takeOvers atomic.Int64
	noTakeOver := cfg
	noTakeOver.TakeOver = func(context.Context, string) error {
		takeOvers.Add(1)
		return nil
	}
	a := open(t, newOpener(t, noTakeOver), "same", 4, walimpls.ReadWrite)
	ids := []message.ID{appendOK(t, a, msg(t, "a0", nil)), appendOK(t, a, msg(t, "a1", nil))}

	b := open(t, newOpener(t, noTakeOver), "same", 4, walimpls.ReadWrite)
	require.Zero(t, takeOvers.Load(), "the earlier writer released the topic by itself")

	_, err := walimpls.Append(context.Background(), a, msg(t, "stale", nil))
	var fe *walimpls.FencedError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.EqualValues(t, 4, fe.Term)
	require.EqualValues(t, 4, fe.CurrentTerm)
	require.True(t, walimpls.NotStored(err), "a fenced WAL refuses before sending: %v", err)
	require.ErrorIs(t, a.Truncate(context.Background(), ids[1]), walimpls.ErrFenced)
	last, err := a.Last(context.Background())
	require.NoError(t, err)
	require.True(t, last.EQ(ids[1]))

	ids = append(ids, appendOK(t, b, msg(t, "b0", nil)))
	got := readN(t, b, cursor.All(), 3)
	require.Equal(t, []string{"a0", "a1", "b0"}, payloads(got))
	for i := range got {
		require.True(t, got[i].ID().EQ(ids[i]))
	}
	_, err = walimpls.Append(context.Background(), a, msg(t, "stale2", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.True(t, walimpls.NotStored(err))
}

// TestFencedTruncateBeforeWatcher: a writer whose meta watcher has not
// seen the winning claim (stopped here; in production, a slow or
// disconnected watcher) is taken over through TakeOver. A Truncate it
// starts after the winner's Open returned fails with ErrFenced and removes
// nothing: no truncation record, no acknowledgement on the durable
// subscription, every message still readable.
func TestFencedTruncateBeforeWatcher(t *testing.T) {
	for _, same := range []bool{false, true} {
		t.Run(fmt.Sprintf("same-term=%v", same), func(t *testing.T) {
			b, cfg := startBroker(t, pulsartest.Config{})
			cfg.TakeOverGrace = 50 * time.Millisecond
			const name = "blind"
			topic := topicOf(cfg, name)
			meta := topic + metaSuffix
			old := open(t, newOpener(t, cfg), name, 3, walimpls.ReadWrite)
			var ids []message.ID
			for i := range 5 {
				ids = append(ids, appendOK(t, old, msg(t, fmt.Sprint(i), nil)))
			}
			old.(*wal).watch.stop() // the old writer never learns of the claim

			term := int64(4)
			if same {
				term = 3
			}
			winner := open(t, newOpener(t, cfg), name, term, walimpls.ReadWrite)
			metaBefore, err := b.Stats(meta)
			require.NoError(t, err)
			logBefore, err := b.Stats(topic)
			require.NoError(t, err)
			require.NoError(t, old.(*wal).wr.fencedErr(), "precondition: the old writer does not know it is fenced")

			err = old.Truncate(context.Background(), ids[3])
			require.ErrorIs(t, err, walimpls.ErrFenced)
			var fe *walimpls.FencedError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, term, fe.CurrentTerm)

			metaAfter, err := b.Stats(meta)
			require.NoError(t, err)
			require.Equal(t, metaBefore.Entries, metaAfter.Entries, "a truncation record was written")
			logAfter, err := b.Stats(topic)
			require.NoError(t, err)
			require.Equal(t, logBefore.Cursors, logAfter.Cursors, "the durable subscription moved")
			_, hasTrunc := winner.(*wal).truncPoint()
			require.False(t, hasTrunc)

			// Sticky: the next call fails at once, and Append refuses
			// before sending.
			require.ErrorIs(t, old.Truncate(context.Background(), ids[1]), walimpls.ErrFenced)
			_, err = walimpls.Append(context.Background(), old, msg(t, "stale", nil))
			require.ErrorIs(t, err, walimpls.ErrFenced)
			require.True(t, walimpls.NotStored(err))

			got := readN(t, winner, cursor.StartFrom(ids[0]), 5)
			require.Equal(t, []string{"0", "1", "2", "3", "4"}, payloads(got))
		})
	}
}

// TestAppendNotStored: refusals decided before anything reached the
// broker are marked walimpls.NotStored; the rest are not.
func TestAppendNotStored(t *testing.T) {
	_, cfg := startBroker(t, pulsartest.Config{})
	o := newOpener(t, cfg)
	w := open(t, o, "notstored", 1, walimpls.ReadWrite)
	appendOK(t, w, msg(t, "ok", nil))

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := walimpls.Append(cancelled, w, msg(t, "x", nil))
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, walimpls.NotStored(err), "a done context: %v", err)

	ro := open(t, o, "notstored", 0, walimpls.ReadOnly)
	_, err = walimpls.Append(context.Background(), ro, msg(t, "x", nil))
	require.ErrorIs(t, err, walimpls.ErrReadOnly)
	require.True(t, walimpls.NotStored(err))

	_, err = walimpls.Append(context.Background(), w, message.Restore(make([]byte, o.Capabilities().MaxMessageBytes+1), nil))
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
	require.True(t, walimpls.NotStored(err))

	open(t, newOpener(t, cfg), "notstored", 2, walimpls.ReadWrite)
	_, err = walimpls.Append(context.Background(), w, msg(t, "x", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.True(t, walimpls.NotStored(err), "already fenced: %v", err)

	require.NoError(t, w.Close())
	_, err = walimpls.Append(context.Background(), w, msg(t, "x", nil))
	require.ErrorIs(t, err, walimpls.ErrClosed)
	require.True(t, walimpls.NotStored(err), "closed: %v", err)
}

// TestTakeOverGuard: TakeOver is preceded by a fold of the meta topic, and
// a writer whose claim is beaten never calls it: the take-over step of a
// fenced writer returns its FencedError and disturbs nobody.
func TestTakeOverGuard(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	var calls atomic.Int64
	cfg.TakeOver = func(_ context.Context, topic string) error {
		calls.Add(1)
		return b.UnloadTopic(topic)
	}
	lost := open(t, newOpener(t, cfg), "guard", 3, walimpls.ReadWrite)
	won := open(t, newOpener(t, cfg), "guard", 4, walimpls.ReadWrite)
	appendOK(t, won, msg(t, "w", nil))

	err := lost.(*wal).wr.takeOver(context.Background())
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.Zero(t, calls.Load(), "TakeOver was called")
	_, _, err = lost.(*wal).wr.acquire(context.Background(), false)
	require.ErrorIs(t, err, walimpls.ErrFenced, "a fenced writer does not even queue for the topic")
	st, err := b.Stats(topicOf(cfg, "guard"))
	require.NoError(t, err)
	require.Zero(t, st.Waiters)

	appendOK(t, won, msg(t, "w2", nil))
	require.EqualValues(t, 1, won.(*wal).wr.acquired.Load())
}

// TestFencedWhileWaiting: an open waiting for the topic (held by a stale
// exclusive producer that does not watch the meta topic) gives up at once
// with a FencedError when a higher claim is written, without calling
// TakeOver; its waiting producer is withdrawn, and the higher open gets
// the topic (through its own TakeOver) and keeps it.
func TestFencedWhileWaiting(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	topic := topicOf(cfg, "waiting")
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL(), Logger: plog.DefaultNopLogger(), OperationTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	stale, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive, SendTimeout: -1})
	require.NoError(t, err)
	defer stale.Close()

	var lowCalls atomic.Int64
	low := cfg
	low.TakeOverGrace = time.Minute // it would wait that long before TakeOver
	low.TakeOverTimeout = 2 * time.Minute
	low.TakeOver = func(context.Context, string) error {
		lowCalls.Add(1)
		return nil
	}
	lowDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w, err := newOpener(t, low).Open(ctx, walimpls.Channel{Name: "waiting", Term: 1})
		if err == nil {
			_ = w.Close()
		}
		lowDone <- err
	}()
	waitFor(t, 10*time.Second, "the low open waits for the topic", func() bool {
		st, err := b.Stats(topic)
		return err == nil && st.Waiters == 1
	})

	// The high open needs TakeOver to move the stale producer; its hook
	// waits for the low open to have given up, which it must do on the
	// claim alone.
	lowReturned := make(chan struct{})
	var lowErr error
	highCfg := cfg
	highCfg.TakeOver = func(ctx context.Context, topic string) error {
		select {
		case <-lowReturned:
		case <-time.After(20 * time.Second):
			t.Error("the low open was still waiting when the high open took the topic over")
		}
		return b.UnloadTopic(topic)
	}
	go func() {
		lowErr = <-lowDone
		close(lowReturned)
	}()
	high := open(t, newOpener(t, highCfg), "waiting", 2, walimpls.ReadWrite)
	<-lowReturned
	require.ErrorIs(t, lowErr, walimpls.ErrFenced)
	require.Zero(t, lowCalls.Load())
	id := appendOK(t, high, msg(t, "high", nil))
	require.EqualValues(t, 1, high.(*wal).wr.acquired.Load())
	got := readN(t, high, cursor.All(), 1)
	require.True(t, id.EQ(got[0].ID()))
	waitFor(t, 10*time.Second, "the withdrawn producer is gone", func() bool {
		st, err := b.Stats(topic)
		return err == nil && st.Waiters == 0 && st.Producers == 1
	})
}
