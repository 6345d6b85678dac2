package adaptortest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func channelName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
}

// outcomes records what every append of a writer under takeover returned,
// by payload.
type outcomes struct {
	mu        sync.Mutex
	acked     map[string]bool
	notStored map[string]bool
	unknown   map[string]bool
}

func newOutcomes() *outcomes {
	return &outcomes{acked: map[string]bool{}, notStored: map[string]bool{}, unknown: map[string]bool{}}
}

func (o *outcomes) record(payload string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err == nil:
		o.acked[payload] = true
	case walimpls.NotStored(err):
		o.notStored[payload] = true
	default:
		o.unknown[payload] = true
	}
}

// appendUntilFenced runs four appenders on w, each until an append fails with
// ErrFenced or stop closes. It returns once every appender had an append
// acknowledged (or ended), and a function that waits for them to end and
// reports violations: an acknowledged append that started after
// takenOver was set.
func appendUntilFenced(t *testing.T, w adaptor.WAL, tag string, res *outcomes, takenOver *atomic.Bool, stop <-chan struct{}) (wait func() []string) {
	var (
		running    sync.WaitGroup
		wg         sync.WaitGroup
		mu         sync.Mutex
		violations []string
	)
	running.Add(4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			defer once.Do(running.Done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf("%s-%d-%d", tag, g, i)
				m, _ := message.New([]byte(payload), map[string]string{"writer": tag})
				after := takenOver.Load()
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				_, err := w.Append(ctx, m)
				cancel()
				res.record(payload, err)
				switch {
				case err == nil && after:
					mu.Lock()
					violations = append(violations, fmt.Sprintf("%s was acknowledged although it started after the takeover returned", payload))
					mu.Unlock()
				case err == nil:
					once.Do(running.Done)
				case errors.Is(err, walimpls.ErrFenced):
					return
				default:
					// Another error in the takeover (a retry that ran out,
					// a closed connection): keep going until fenced.
				}
			}
		}()
	}
	running.Wait()
	return func() []string {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			require.FailNow(t, "the appenders of the earlier writer were not fenced in time")
		}
		mu.Lock()
		defer mu.Unlock()
		return violations
	}
}

// readUntilTermBegin reads the channel from its start, delivering data and
// term-begins: the documented recipe to learn which appends of an earlier
// term were stored. It returns the payloads of data messages delivered
// before the first term-begin of a term ≥ term, and those after it, having
// read at least wantAfter of them.
func readUntilTermBegin(t *testing.T, o walimpls.Opener, name string, term int64, wantAfter int) (before, after []message.Immutable) {
	t.Helper()
	ro := open(t, o, name, 0, adaptor.Options{ReadOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := ro.Read(ctx, adaptor.ReadOption{Name: "recipe", Filter: adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTermBegin}}})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	seen := false
	var lastTerm int64
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for !seen || len(after) < wantAfter {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended: %v", s.Error())
			mt, _ := m.Term()
			if m.Kind() == message.KindTermBegin {
				require.GreaterOrEqualf(t, mt, lastTerm, "term-begins went backwards: %d after %d", mt, lastTerm)
				lastTerm = mt
				if mt >= term {
					seen = true
				}
				continue
			}
			require.GreaterOrEqualf(t, mt, lastTerm, "a data message of term %d was delivered after the term-begin of %d", mt, lastTerm)
			if seen {
				after = append(after, m)
			} else {
				before = append(before, m)
			}
		case <-timer.C:
			require.FailNowf(t, "watchdog", "read %d messages before and %d after the term-begin of %d (seen: %v)", len(before), len(after), term, seen)
		}
	}
	return before, after
}

// testSameTermTwoNodes opens one channel at the same term on two nodes
// through the adaptor while the first writes: the later open takes over,
// nothing the first started afterwards is acknowledged, and every
// acknowledged append of both is delivered.
func testSameTermTwoNodes(t *testing.T, c walimplstest.Cluster) {
	oa, ob := opener(t, c), opener(t, c)
	if !oa.Capabilities().Fencing {
		t.Skip("backend declares Capabilities.Fencing=false: two writers of one term cannot be stopped by the backend; " +
			"one term must have one writer")
	}
	name := channelName("sameterm")
	wa := open(t, oa, name, 3, adaptor.Options{TimeTickInterval: 10 * time.Millisecond})
	res := newOutcomes()
	var takenOver atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	wait := appendUntilFenced(t, wa, "A", res, &takenOver, stop)
	wb := open(t, ob, name, 3, adaptor.Options{TimeTickInterval: 10 * time.Millisecond})
	takenOver.Store(true)
	require.Empty(t, wait())

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var bPayloads []string
	for i := range 20 {
		p := fmt.Sprintf("B-%d", i)
		m, _ := message.New([]byte(p), nil)
		_, err := wb.Append(ctx, m)
		require.NoError(t, err)
		bPayloads = append(bPayloads, p)
	}
	require.NoError(t, wb.Sync(ctx))

	// Read until every message of B arrived (B's timeticks are above all of
	// A's): each acknowledged append exactly once, appends of unknown
	// outcome at most once, nothing that failed as not stored.
	ro := open(t, opener(t, c), name, 0, adaptor.Options{ReadOnly: true})
	s, err := ro.Read(ctx, adaptor.ReadOption{Name: "all"})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	isB := map[string]bool{}
	for _, p := range bPayloads {
		isB[p] = true
	}
	delivered := map[string]int{}
	var lastTT uint64
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	res.mu.Lock()
	defer res.mu.Unlock()
	for seenB := 0; seenB < len(bPayloads); {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended: %v", s.Error())
			tt, _ := m.TimeTick()
			require.Greater(t, tt, lastTT, "timeticks increase")
			lastTT = tt
			p := string(m.Payload())
			delivered[p]++
			require.Equalf(t, 1, delivered[p], "%s was delivered twice", p)
			switch {
			case isB[p]:
				seenB++
			case res.acked[p], res.unknown[p]:
				require.Zerof(t, seenB, "%s of the earlier writer was delivered after the later writer's messages", p)
			case res.notStored[p]:
				require.FailNowf(t, "delivered", "%s failed as not stored but was delivered", p)
			default:
				require.FailNowf(t, "delivered", "%s was never appended", p)
			}
		case <-timer.C:
			require.FailNowf(t, "watchdog", "delivered %d messages", len(delivered))
		}
	}
	for p := range res.acked {
		require.Equalf(t, 1, delivered[p], "acknowledged %s of the earlier writer was not delivered", p)
	}
	unknownStored := 0
	for p := range res.unknown {
		unknownStored += delivered[p]
	}
	t.Logf("earlier writer: %d acknowledged, %d not stored, %d unknown of which %d turned out stored",
		len(res.acked), len(res.notStored), len(res.unknown), unknownStored)
}

// testTermBeginsNeverGoBackwards checks that a refused open leaves no
// term-begin in the log, and that readers drop a term-begin below one they
// saw (and the data of its term after it), on every backend.
func testTermBeginsNeverGoBackwards(t *testing.T, c walimplstest.Cluster) {
	o := opener(t, c)
	name := channelName("backwards")
	w2 := open(t, o, name, 2, adaptor.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	m, _ := message.New([]byte("of term 2"), nil)
	_, err := w2.Append(ctx, m)
	require.NoError(t, err)

	_, err = adaptor.Open(ctx, opener(t, c), adaptor.Channel{Name: name, Term: 1}, adaptor.Options{Logger: discard})
	require.ErrorIs(t, err, walimpls.ErrFenced, "open at term 1 after term 2")
	var fe *walimpls.FencedError
	require.True(t, errors.As(err, &fe))
	require.EqualValues(t, 2, fe.CurrentTerm)

	// The raw log holds term-begins of term 2 only.
	raw, err := o.Open(ctx, walimpls.Channel{Name: name, Mode: walimpls.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = raw.Close() }()
	last, err := raw.Last(ctx)
	require.NoError(t, err)
	rs, err := raw.Read(ctx, walimpls.ReadOption{})
	require.NoError(t, err)
	defer func() { _ = rs.Close() }()
	var terms []int64
	for done := false; !done; {
		select {
		case m, ok := <-rs.Chan():
			require.Truef(t, ok, "raw scanner ended: %v", rs.Error())
			if m.Kind() == message.KindTermBegin {
				tm, _ := m.Term()
				terms = append(terms, tm)
			}
			done = !m.ID().LT(last)
		case <-ctx.Done():
			require.FailNow(t, "watchdog: reading the raw log")
		}
	}
	require.Equal(t, []int64{2}, terms, "term-begins in the log after a refused open at term 1")

	// A log a lost race left behind (written here by hand): readers never
	// see its terms go backwards, nor the data of the lower term after it.
	crafted := channelName("crafted")
	writer, err := o.Open(ctx, walimpls.Channel{Name: crafted, Term: 9})
	require.NoError(t, err)
	defer func() { _ = writer.Close() }()
	data := func(term int64, tt uint64) message.Message {
		m, _ := message.New([]byte(fmt.Sprintf("data-%d-%d", term, tt)), nil)
		return m.WithKind(message.KindData).WithTerm(term).WithTimeTick(tt)
	}
	wm := func(term int64, tt uint64) message.Message {
		return message.Message{}.WithKind(message.KindTimeTick).WithTerm(term).WithTimeTick(tt)
	}
	begin := func(term int64) message.Message {
		return message.Message{}.WithKind(message.KindTermBegin).WithTerm(term)
	}
	for _, m := range []message.Message{begin(2), data(2, 10), wm(2, 20), begin(1), data(1, 30), wm(1, 40), data(2, 50), wm(2, 60)} {
		_, err := walimpls.Append(ctx, writer, m)
		require.NoError(t, err)
	}
	ro := open(t, opener(t, c), crafted, 0, adaptor.Options{ReadOnly: true})
	s, err := ro.Read(ctx, adaptor.ReadOption{Filter: adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTermBegin}}})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	var got []string
	for len(got) < 3 {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended: %v", s.Error())
			tm, _ := m.Term()
			got = append(got, fmt.Sprintf("%s:%d:%s", m.Kind(), tm, m.Payload()))
		case <-ctx.Done():
			require.FailNowf(t, "watchdog", "delivered %v", got)
		}
	}
	require.Equal(t, []string{
		message.KindTermBegin.String() + ":2:",
		message.KindData.String() + ":2:data-2-10",
		message.KindData.String() + ":2:data-2-50",
	}, got)
	select {
	case m, ok := <-s.Chan():
		require.Falsef(t, ok, "delivered %s of kind %s after the last term-2 message", m.Payload(), m.Kind())
	case <-time.After(100 * time.Millisecond):
	}
}

// testAmbiguousOutcome takes a channel over while its owner appends, and
// resolves every outcome of the owner's appends with the documented
// recipe: read from the start, with term-begins; what the earlier term
// stored is exactly its data delivered before the new term's term-begin.
func testAmbiguousOutcome(t *testing.T, c walimplstest.Cluster) {
	oa, ob := opener(t, c), opener(t, c)
	fencing := oa.Capabilities().Fencing
	name := channelName("ambiguous")
	wa := open(t, oa, name, 1, adaptor.Options{TimeTickInterval: 10 * time.Millisecond})
	res := newOutcomes()
	var takenOver atomic.Bool
	stop := make(chan struct{})
	wait := appendUntilFenced(t, wa, "A", res, &takenOver, stop)
	wb := open(t, ob, name, 2, adaptor.Options{TimeTickInterval: 10 * time.Millisecond})
	takenOver.Store(true)
	if !fencing {
		// Nothing stops the earlier writer at the backend: it stops once
		// its tail reader sees the new term-begin.
		select {
		case <-wa.Available():
		case <-time.After(waitTimeout):
			require.FailNow(t, "the earlier writer never noticed the higher term-begin")
		}
	}
	violations := wait()
	close(stop)
	// Also without backend fencing: an append stored after the new
	// term-begin is never acknowledged (the adaptor confirms acks by
	// reading the log back).
	require.Empty(t, violations)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for i := range 5 {
		m, _ := message.New([]byte(fmt.Sprintf("B-%d", i)), nil)
		_, err := wb.Append(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, wb.Sync(ctx))

	before, after := readUntilTermBegin(t, opener(t, c), name, 2, 5)
	stored := map[string]bool{}
	for _, m := range before {
		stored[string(m.Payload())] = true
	}
	for _, m := range after {
		require.Truef(t, strings.HasPrefix(string(m.Payload()), "B-"), "%s of the earlier term was delivered after the new term-begin", m.Payload())
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	for p := range res.notStored {
		require.Falsef(t, stored[p], "%s failed as NotStored but was delivered", p)
	}
	for p := range res.acked {
		require.Truef(t, stored[p], "acknowledged %s was not delivered", p)
	}
	unknownStored := 0
	for p := range res.unknown {
		if stored[p] {
			unknownStored++
		}
	}
	t.Logf("earlier writer: %d acknowledged, %d not stored, %d unknown of which %d turned out stored",
		len(res.acked), len(res.notStored), len(res.unknown), unknownStored)
}
