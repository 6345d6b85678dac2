package adaptor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// logBefore reads the raw log up to (not including) end and returns the
// highest timetick and term found there and how many messages it holds.
func logBefore(t *testing.T, o walimpls.Opener, name string, end message.ID) (maxTT uint64, maxTerm int64, n int) {
	t.Helper()
	ctx := context.Background()
	impl, err := o.Open(ctx, walimpls.Channel{Name: name, Mode: walimpls.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = impl.Close() }()
	s, err := impl.Read(ctx, walimpls.ReadOption{})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	for {
		select {
		case m := <-s.Chan():
			if !m.ID().LT(end) {
				return maxTT, maxTerm, n
			}
			n++
			if tt, ok := m.TimeTick(); ok {
				maxTT = max(maxTT, tt)
			}
			if term, ok := m.Term(); ok {
				maxTerm = max(maxTerm, term)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the raw log did not reach %s", end)
		}
	}
}

func payload(i, size int) message.Message {
	m, _ := message.New(fmt.Appendf(make([]byte, 0, size), "%0*d", size, i), nil)
	return m
}

// TestOpenReadsOnlyTheEndOfTheLog: an open after a long history reads a
// bounded window from the end, and still finds the highest timetick.
func TestOpenReadsOnlyTheEndOfTheLog(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{})
	// Watermarks every 8 KiB: one every ~100 messages.
	opts := Options{TimeTickInterval: time.Hour, WatermarkBytes: 8 << 10}
	w1 := openWAL(t, o, "long", 1, opts)
	for i := range 400 {
		msgs := make([]message.Message, 100)
		for j := range msgs {
			msgs[j] = payload(i*100+j, 64)
		}
		_, err := w1.AppendBatch(ctx, msgs)
		require.NoError(t, err)
	}
	_, err := w1.Tail(ctx)
	require.NoError(t, err)
	require.NoError(t, w1.Close())

	for term := int64(2); term <= 4; term++ {
		w := openWAL(t, o, "long", term, opts)
		wantTT, wantTerm, inLog := logBefore(t, o, "long", w.beginID)
		require.Greater(t, inLog, 40000)
		require.Equal(t, wantTT, w.recoveredTT, "term %d", term)
		require.Equal(t, term-1, wantTerm)
		// Two windows at most: the second holds two watermarks.
		require.LessOrEqual(t, w.recoveredMessages, firstTailWindow*tailWindowGrowth, "term %d read %d of %d messages", term, w.recoveredMessages, inLog)
		r, err := w.Append(ctx, payload(int(term), 8))
		require.NoError(t, err)
		require.Greater(t, r.TimeTick, wantTT)
		require.NoError(t, w.Close())
	}
}

// TestOpenAfterAnOwnerDiedAtItsTermBegin: the last owner wrote only its
// term-begin; the window must reach back to its predecessor's watermarks.
func TestOpenAfterAnOwnerDiedAtItsTermBegin(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{})
	opts := Options{TimeTickInterval: time.Hour}
	w1 := openWAL(t, o, "died", 1, opts)
	for i := range 1000 {
		_, err := w1.Append(ctx, payload(i, 16))
		require.NoError(t, err)
	}
	for range 2 {
		_, err := w1.Tail(ctx)
		require.NoError(t, err)
	}
	// Owners 2..100 die right after their term-begin, before a watermark.
	for term := int64(2); term <= 100; term++ {
		impl, err := o.Open(ctx, walimpls.Channel{Name: "died", Term: term, Mode: walimpls.ReadWrite})
		require.NoError(t, err)
		_, err = walimpls.Append(ctx, impl, message.Message{}.WithKind(message.KindTermBegin).WithTerm(term))
		require.NoError(t, err)
		require.NoError(t, impl.Close())
	}
	w := openWAL(t, o, "died", 101, opts)
	wantTT, wantTerm, inLog := logBefore(t, o, "died", w.beginID)
	require.EqualValues(t, 100, wantTerm)
	require.Equal(t, wantTT, w.recoveredTT)
	require.Less(t, w.recoveredMessages, inLog, "read the whole log")
	require.Equal(t, int64(100), w.learned.termBefore(w.beginID))
}

// TestOpenFindsTheHighestTimetickAfterRandomHistories: owners of rising
// (and repeated) terms append concurrently with random sizes, sync, close
// or are taken over; some die right after their term-begin. Every open must
// recover exactly the highest timetick stored before its term-begin.
func TestOpenFindsTheHighestTimetickAfterRandomHistories(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, testseed.Seed(t)))
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{})
	opts := Options{TimeTickInterval: time.Hour, WatermarkBytes: 2 << 10}
	var (
		term     int64 = 1
		previous *wal
		partial  int // opens that read less than the whole log
	)
	for round := range 60 {
		if rng.IntN(8) == 0 {
			term++
			impl, err := o.Open(ctx, walimpls.Channel{Name: "random", Term: term, Mode: walimpls.ReadWrite})
			require.NoError(t, err)
			_, err = walimpls.Append(ctx, impl, message.Message{}.WithKind(message.KindTermBegin).WithTerm(term))
			require.NoError(t, err)
			require.NoError(t, impl.Close())
			continue
		}
		if rng.IntN(4) != 0 { // else the same term opens again and takes over
			term++
		}
		w := openWAL(t, o, "random", term, opts)
		wantTT, _, inLog := logBefore(t, o, "random", w.beginID)
		require.Equal(t, wantTT, w.recoveredTT, "round %d, term %d: recovered from %d of %d messages", round, term, w.recoveredMessages, inLog)
		if w.recoveredMessages < inLog {
			partial++
		}
		if previous != nil {
			_ = previous.Close()
		}
		var wg sync.WaitGroup
		for a := range 1 + rng.IntN(4) {
			n, size := rng.IntN(200), 1+rng.IntN(300)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					if _, err := w.Append(ctx, payload(a*1000+i, size)); err != nil {
						t.Errorf("append: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		switch rng.IntN(3) {
		case 0:
			require.NoError(t, w.Sync(ctx))
			previous = nil
			require.NoError(t, w.Close())
		case 1:
			previous = nil
			require.NoError(t, w.Close())
		default:
			previous = w // taken over by the next open
		}
	}
	t.Logf("%d opens read only the end of the log", partial)
	require.Positive(t, partial)
}

// TestOpenRecoversFromHandWrittenEnds: logs an owner can leave behind in
// which the highest timetick lies before the end's last watermarks.
func TestOpenRecoversFromHandWrittenEnds(t *testing.T) {
	type rec struct {
		kind message.Kind
		term int64
		tt   uint64
	}
	data := func(term int64, tt uint64) rec { return rec{message.KindData, term, tt} }
	wm := func(term int64, tt uint64) rec { return rec{message.KindTimeTick, term, tt} }
	begin := func(term int64) rec { return rec{kind: message.KindTermBegin, term: term} }
	deadOwners := func(from, n int64) []rec {
		var rs []rec
		for term := from; term < from+n; term++ {
			rs = append(rs, begin(term))
		}
		return rs
	}
	// The dead owners' term-begins fill the window that a shortcut would
	// stop at (firstTailWindow*tailWindowGrowth, memory starts exactly n
	// from the end) up to the one watermark.
	fill := int64(firstTailWindow*tailWindowGrowth - 1)
	cases := map[string][]rec{
		// An append allocated after a watermark is stored before it; the
		// owner then dies and many opens die at their term-begin.
		"appended-before-its-watermark": append([]rec{begin(1), wm(1, 10), data(1, 12), data(1, 101), wm(1, 100)}, deadOwners(2, fill)...),
		// The only watermark of the last stretch lies after its highest
		// message: only the stretch's term-begin proves the window.
		"one-watermark": append(append([]rec{begin(1), wm(1, 5)}, data(1, 1000), wm(1, 999)), deadOwners(2, fill)...),
		// An append abandoned before the last watermark is stored after
		// it: it proves nothing about what lies before the watermark.
		"late-append": append([]rec{begin(1), wm(1, 5), data(1, 1000), wm(1, 999), data(1, 998)}, deadOwners(2, fill-1)...),
		// A same-term takeover: the second owner's stretch has one
		// watermark below the first owner's last append.
		"same-term": append([]rec{begin(1), wm(1, 10), data(1, 20), wm(1, 15), data(1, 30), begin(1), wm(1, 31), data(1, 40)}, deadOwners(2, 70)...),
	}
	for name, layout := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			o := memOpener(t, memory.NewCluster(), memory.Config{})
			var (
				wantTT   uint64
				lastTerm int64
			)
			impl, err := o.Open(ctx, walimpls.Channel{Name: name, Term: 1, Mode: walimpls.ReadWrite})
			require.NoError(t, err)
			for i, r := range layout {
				if r.term != lastTerm {
					require.NoError(t, impl.Close())
					impl, err = o.Open(ctx, walimpls.Channel{Name: name, Term: r.term, Mode: walimpls.ReadWrite})
					require.NoError(t, err)
					lastTerm = r.term
				}
				m := message.Message{}.WithKind(r.kind).WithTerm(r.term)
				if r.kind != message.KindTermBegin {
					m = m.WithTimeTick(r.tt)
					wantTT = max(wantTT, r.tt)
				}
				if r.kind == message.KindData {
					m, err = message.New(fmt.Appendf(nil, "%d", i), nil)
					require.NoError(t, err)
					m = m.WithTerm(r.term).WithTimeTick(r.tt)
				}
				_, err = walimpls.Append(ctx, impl, m)
				require.NoError(t, err)
			}
			require.NoError(t, impl.Close())
			w := openWAL(t, o, name, lastTerm+1, Options{TimeTickInterval: time.Hour})
			require.Equal(t, wantTT, w.recoveredTT, "read %d messages", w.recoveredMessages)
		})
	}
}
