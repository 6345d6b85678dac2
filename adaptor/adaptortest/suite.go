// Package adaptortest checks the adaptor on a backend: ordering of concurrent
// appends across terms with scanners that catch up, tail and fall behind,
// and resuming from a delivered message. Every backend package runs it next
// to the walimplstest conformance suite:
//
//	func TestAdaptor(t *testing.T) { adaptortest.Run(t, factory) }
package adaptortest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// Run runs every part against the backend f makes.
func Run(t *testing.T, f walimplstest.Factory) {
	t.Run("OrderingAcrossTerms", func(t *testing.T) { testOrdering(t, f(t)) })
	t.Run("Resume", func(t *testing.T) { testResume(t, f(t)) })
	t.Run("ResumeWithSplitMessages", func(t *testing.T) { testResumeWithSplitMessages(t, f(t)) })
	t.Run("BatchAndAsyncOrder", func(t *testing.T) { testBatchAndAsyncOrder(t, f(t)) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, f(t)) })
	t.Run("SameTermTwoNodes", func(t *testing.T) { testSameTermTwoNodes(t, f(t)) })
	t.Run("TermBeginsNeverGoBackwards", func(t *testing.T) { testTermBeginsNeverGoBackwards(t, f(t)) })
	t.Run("AmbiguousOutcome", func(t *testing.T) { testAmbiguousOutcome(t, f(t)) })
}

var discard = slog.New(slog.DiscardHandler)

const waitTimeout = 60 * time.Second

func opener(t *testing.T, c walimplstest.Cluster) walimpls.Opener {
	o := c.NewOpener(t)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

func open(t *testing.T, o walimpls.Opener, name string, term int64, opts adaptor.Options) adaptor.WAL {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	w, err := adaptor.Open(ctx, o, adaptor.Channel{Name: name, Term: term}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// collect reads s until it delivered n data messages, checking strictly
// increasing timeticks on the way.
func collect(t *testing.T, s walimpls.Scanner, n int, stall func(i int)) []message.Immutable {
	t.Helper()
	out := make([]message.Immutable, 0, n)
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	var last uint64
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended after %d of %d messages: %v", len(out), n, s.Error())
			tt, ok := m.TimeTick()
			require.True(t, ok, "a delivered message carries a timetick")
			require.Greaterf(t, tt, last, "message %d: timetick %d after %d", len(out), tt, last)
			last = tt
			out = append(out, m)
			if stall != nil {
				stall(len(out))
			}
		case <-timer.C:
			require.FailNowf(t, "watchdog", "delivered %d of %d messages", len(out), n)
		}
	}
	return out
}

func testOrdering(t *testing.T, c walimplstest.Cluster) {
	opts := adaptor.Options{
		TimeTickInterval: 10 * time.Millisecond,
		TailCacheBytes:   64 << 10, // small, so that a stalled scanner is evicted
		WatermarkBytes:   32 << 10,
	}
	o := opener(t, c)
	const (
		channels  = 3
		terms     = 3
		appenders = 8
		perWriter = 40
	)
	base := fmt.Sprintf("adapt-%d", time.Now().UnixNano()%1_000_000)
	acked := make([]map[uint64][]byte, channels) // per channel: timetick → payload
	for i := range acked {
		acked[i] = map[uint64][]byte{}
	}
	for term := int64(1); term <= terms; term++ {
		var wg sync.WaitGroup
		errs := make(chan error, channels)
		for ci := range channels {
			name := base + "-" + strconv.Itoa(ci)
			w := open(t, o, name, term, opts)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- runTerm(t, w, term, acked[ci], appenders, perWriter)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
}

// runTerm appends from several goroutines on one WAL while three scanners
// read everything from the start (one stalling), then checks that each
// delivered every acknowledged message of this and earlier terms exactly
// once, in timetick order.
func runTerm(t *testing.T, w adaptor.WAL, term int64, acked map[uint64][]byte, appenders, perWriter int) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	scanners := make([]walimpls.Scanner, 3)
	for i := range scanners {
		s, err := w.Read(ctx, adaptor.ReadOption{Name: "s" + strconv.Itoa(i)})
		if err != nil {
			return err
		}
		defer func() { _ = s.Close() }()
		scanners[i] = s
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(term), uint64(g)))
			for i := range perWriter {
				payload := fmt.Appendf(nil, "t%d-g%d-i%d-", term, g, i)
				payload = append(payload, make([]byte, r.IntN(1500))...)
				m, _ := message.New(payload, map[string]string{"g": strconv.Itoa(g)})
				res, err := w.Append(ctx, m)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[res.TimeTick] = payload
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	if err := w.Sync(ctx); err != nil {
		return err
	}
	want := len(acked)
	results := make(chan error, len(scanners))
	for i, s := range scanners {
		go func() {
			var stall func(int)
			if i == 2 {
				r := rand.New(rand.NewPCG(uint64(term), 99))
				stall = func(n int) {
					if n%40 == 0 {
						time.Sleep(time.Duration(20+r.IntN(60)) * time.Millisecond)
					}
				}
			}
			results <- checkDelivered(t, s, want, acked, stall)
		}()
	}
	for range scanners {
		if err := <-results; err != nil {
			return err
		}
	}
	return w.Close()
}

func checkDelivered(t *testing.T, s walimpls.Scanner, want int, acked map[uint64][]byte, stall func(int)) (err error) {
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	var last uint64
	for n := 0; n < want; n++ {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				<-s.Done()
				if err := s.Error(); err != nil {
					return fmt.Errorf("scanner ended after %d of %d: %w", n, want, err)
				}
				return fmt.Errorf("scanner ended after %d of %d", n, want)
			}
			tt, _ := m.TimeTick()
			if tt <= last {
				return fmt.Errorf("timetick %d delivered after %d", tt, last)
			}
			last = tt
			p, ok := acked[tt]
			if !ok {
				return fmt.Errorf("delivered timetick %d was never acknowledged", tt)
			}
			if string(p) != string(m.Payload()) {
				return fmt.Errorf("timetick %d: payload differs", tt)
			}
			if stall != nil {
				stall(n + 1)
			}
		case <-timer.C:
			return fmt.Errorf("watchdog: delivered %d of %d", n, want)
		}
	}
	select {
	case m, ok := <-s.Chan():
		if ok {
			return fmt.Errorf("an extra message was delivered: %s", m.ID())
		}
	case <-time.After(100 * time.Millisecond):
	}
	return nil
}

func testResume(t *testing.T, c walimplstest.Cluster) {
	o := opener(t, c)
	w := open(t, o, fmt.Sprintf("resume-%d", time.Now().UnixNano()%1_000_000), 1, adaptor.Options{TimeTickInterval: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const total = 200
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range total / 4 {
				m, _ := message.New(fmt.Appendf(nil, "g%d-%d", g, i), nil)
				_, err := w.Append(ctx, m)
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, w.Sync(ctx))

	first, err := w.Read(ctx, adaptor.ReadOption{Name: "first"})
	require.NoError(t, err)
	all := collect(t, first, total, nil)
	require.NoError(t, first.Close())

	for _, cut := range []int{1, 57, 100, 199} {
		last := all[cut-1]
		lastTT, _ := last.TimeTick()
		pos, err := adaptor.LastConfirmed(last)
		require.NoError(t, err)
		s, err := w.Read(ctx, adaptor.ReadOption{Name: "resumed", DeliverPolicy: cursor.StartFrom(pos),
			Filter: adaptor.Filter{TimeTickAbove: lastTT}})
		require.NoError(t, err)
		rest := collect(t, s, total-cut, nil)
		for i, m := range rest {
			require.Equalf(t, string(all[cut+i].Payload()), string(m.Payload()), "resumed after %d: message %d", cut, i)
		}
		select {
		case m, ok := <-s.Chan():
			require.Falsef(t, ok, "resumed scanner delivered an extra message %s", m.ID())
		case <-time.After(100 * time.Millisecond):
		}
		require.NoError(t, s.Close())
	}

	// From a timetick: exactly the messages at or above it.
	tt, _ := all[150].TimeTick()
	s, err := w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.FromTimeTick(tt)})
	require.NoError(t, err)
	rest := collect(t, s, total-150, nil)
	require.Equal(t, string(all[150].Payload()), string(rest[0].Payload()))
	require.NoError(t, s.Close())
}

func testErrors(t *testing.T, c walimplstest.Cluster) {
	o := opener(t, c)
	name := fmt.Sprintf("errs-%d", time.Now().UnixNano()%1_000_000)
	w := open(t, o, name, 1, adaptor.Options{MaxMessageBytes: 4096})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	big, _ := message.New(make([]byte, 5000), nil)
	_, err := w.Append(ctx, big)
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
	small, _ := message.New([]byte("small"), nil)
	_, err = w.Append(ctx, small)
	require.NoError(t, err, "a refused message loses nothing and blocks nothing")

	ro := open(t, opener(t, c), name, 0, adaptor.Options{ReadOnly: true})
	_, err = ro.Append(ctx, small)
	require.ErrorIs(t, err, walimpls.ErrReadOnly)
	rs, err := ro.Read(ctx, adaptor.ReadOption{})
	require.NoError(t, err)
	require.Equal(t, "small", string(collect(t, rs, 1, nil)[0].Payload()))

	if o.Capabilities().Fencing {
		w2 := open(t, opener(t, c), name, 2, adaptor.Options{})
		var err error
		deadline := time.Now().Add(waitTimeout)
		for time.Now().Before(deadline) {
			if _, err = w.Append(ctx, small); err != nil {
				break
			}
		}
		require.ErrorIs(t, err, walimpls.ErrFenced)
		select {
		case <-w.Available():
		case <-time.After(waitTimeout):
			require.FailNow(t, "a fenced WAL stays available")
		}
		_, err = w.Append(ctx, small)
		require.ErrorIs(t, err, walimpls.ErrFenced, "fails fast once fenced")
		_, err = adaptor.Open(ctx, opener(t, c), adaptor.Channel{Name: name, Term: 1}, adaptor.Options{Logger: slog.New(slog.DiscardHandler)})
		require.ErrorIs(t, err, walimpls.ErrFenced, "reopen at a lower term")
		_, err = w2.Append(ctx, small)
		require.NoError(t, err)
	}

	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
	_, err = w.Append(ctx, small)
	require.Error(t, err)
	_, err = w.Read(ctx, adaptor.ReadOption{})
	require.ErrorIs(t, err, walimpls.ErrClosed)
	select {
	case <-w.Available():
	default:
		require.FailNow(t, "a closed WAL is available")
	}
}
