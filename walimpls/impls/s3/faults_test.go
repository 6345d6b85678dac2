package s3_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// TestFaultsUnderLoad: eight appenders and a tailing reader, each side in
// an Opener of its own, every request through a proxy that delays, drops,
// answers 503 SlowDown or 500, and resets the connection after the store
// wrote a PUT, at seeded random, plus faults placed for sure: the answer
// of a slot's first PUT lost after it landed, every try of another slot's
// PUT failing, every answer of an open's manifest PUT lost after it
// landed. A writer whose append (or open) failed is done; the next opens
// at a higher term and the appenders go on. Every acknowledged append is
// read exactly once, at its ID, in the order it was appended; every batch
// whole; an append reported not stored is never read, one of unknown
// outcome at most once; nothing is read that was not appended. The
// tailing reader, a reader catching up at the end through faults of its
// own (every try of a GET of a slot failing among them), both reading on
// after a scanner's failure, and a fresh reader without faults deliver
// the same. No writer is ever fenced (there is none other): a retried PUT
// that meets 412 on its own earlier try tells it from another's by its
// nonce; and a transient fault never refuses the store at New.
func TestFaultsUnderLoad(t *testing.T) {
	seed := testseed.Seed(t)
	for _, store := range s3test.Stores(t) {
		t.Run(store.Name, func(t *testing.T) { faultsUnderLoad(t, store, seed) })
	}
}

func faultsUnderLoad(t *testing.T, store *s3test.Store, seed uint64) {
	ctx := testCtx(t)
	const prefix, name = "faults/", "orders"
	slot := func(s int) s3test.Matcher { return s3test.KeySuffix(fmt.Sprintf("/%020d", s)) }
	dataPut := s3test.And(s3test.Method("PUT"), s3test.KeyMatches(slotKeyRe(prefix, name)))
	proxy := s3test.NewProxy(t, store, append(randomFaults(seed),
		s3test.Rule{Match: s3test.And(dataPut, slot(3), s3test.FirstN(1)), Fault: s3test.ResetAfterWrite()},
		s3test.Rule{Match: s3test.And(dataPut, slot(40), s3test.FirstN(3)), Fault: s3test.InternalError()},
		// An open whose manifest lands and whose every answer is lost.
		s3test.Rule{Match: s3test.And(s3test.Method("PUT"), s3test.Key(prefix+name+"/manifest"), s3test.Nth(1, 2, 3)),
			Fault: s3test.ResetAfterWrite()},
	)...)
	// The reader that catches up at the end has faults of its own, and
	// its every GET of a slot fails.
	catchProxy := s3test.NewProxy(t, store, append(randomFaults(seed+100),
		s3test.Rule{Match: s3test.And(s3test.Method("GET"), s3test.KeyMatches(slotKeyRe(prefix, name)), slot(10), s3test.FirstN(3)),
			Fault: s3test.InternalError()},
	)...)
	config := func(st *s3test.Store) s3.Config {
		cfg := st.Config(prefix)
		cfg.FlushInterval = 2 * time.Millisecond
		cfg.FlushRecords = 4
		cfg.MaxInflight = 4
		cfg.MaxAttempts = 3
		cfg.HintEvery = 4
		cfg.PollInterval = 5 * time.Millisecond
		cfg.ReadAhead = 4
		cfg.ProbeRacers = 2
		return cfg
	}
	cfg := config(proxy.Store())
	reg := prometheus.NewRegistry()
	writers := newFaultyOpener(t, ctx, cfg, walimpls.WithRegisterer(reg))
	readers := newFaultyOpener(t, ctx, cfg)

	const appenders, total = 8, 300
	var (
		mu      sync.Mutex
		results = map[string]appendResult{}
		orders  = make([][]delivery, appenders) // each appender's acknowledged messages, in its order
		next    atomic.Int64
		term    int64
		w       walimpls.WALImpl
		tl      *tail
		stats   struct{ generations, failedOpens int }
	)
	// open opens the channel at the next term, until an open succeeds.
	open := func() {
		for {
			term++
			var err error
			w, err = writers.Open(ctx, walimpls.Channel{Name: name, Term: term})
			if err == nil {
				stats.generations++
				return
			}
			require.NotErrorIs(t, err, walimpls.ErrFenced, "the only writer was fenced at open")
			require.NoError(t, ctx.Err(), "watchdog: %v", err)
			stats.failedOpens++
		}
	}
	for next.Load() < total {
		open()
		if tl == nil {
			tl = startTail(t, openFaulty(t, ctx, readers, name), true)
		}
		var wg sync.WaitGroup
		for g := range appenders {
			wg.Go(func() {
				for {
					k := next.Add(1) - 1
					if k >= total {
						return
					}
					payloads := []string{fmt.Sprintf("t%d-g%d-%d", term, g, k)}
					if k%3 == 2 {
						n := 2 + int(k%2)
						payloads = payloads[:0]
						for i := range n {
							payloads = append(payloads, fmt.Sprintf("t%d-g%d-%d-%dof%d", term, g, k, i, n))
						}
					}
					msgs := make([]message.Message, len(payloads))
					for i, p := range payloads {
						msgs[i], _ = message.New([]byte(p), nil)
					}
					ids, err := w.AppendBatch(ctx, msgs)
					mu.Lock()
					for i, p := range payloads {
						if err != nil {
							results[p] = appendResult{err: err, notStored: walimpls.NotStored(err)}
							continue
						}
						results[p] = appendResult{id: ids[i].Marshal()}
						orders[g] = append(orders[g], delivery{p, ids[i].Marshal()})
					}
					mu.Unlock()
					if err != nil {
						return // the WAL is done
					}
				}
			})
		}
		wg.Wait()
		if next.Load() < total {
			require.NoError(t, w.Close())
		}
	}
	// The last message, appended for sure: what the readers read up to.
	for {
		m, _ := message.New([]byte("end"), nil)
		if _, err := walimpls.Append(ctx, w, m); err == nil {
			break
		} else {
			results["end"] = appendResult{err: err, notStored: walimpls.NotStored(err)}
		}
		require.NoError(t, w.Close())
		open()
	}
	delete(results, "end")

	got := tl.until(t, ctx, "end")
	fresh := readAll(t, ctx, openWAL(t, newOpener(t, parentConfig(store, prefix)), name, 0, walimpls.ReadOnly), "end")
	require.Equal(t, fresh, got, "the tailing reader, through faults, and a fresh one without deliver the same")
	catch := startTail(t, openFaulty(t, ctx, newFaultyOpener(t, ctx, config(catchProxy.Store())), name), true)
	require.Equal(t, fresh, catch.until(t, ctx, "end"), "a reader catching up through faults and one without deliver the same")
	checkDelivered(t, got)

	delivered := map[string]string{}
	for _, d := range got[:len(got)-1] {
		delivered[d.payload] = d.id
	}
	var acked, notStored, unknownRead, unknownNot int
	for p, r := range results {
		id, read := delivered[p]
		switch {
		case r.err == nil:
			acked++
			require.Truef(t, read, "acknowledged %s at %s is not read", p, r.id)
			require.Equalf(t, r.id, id, "acknowledged %s at %s is read at %s", p, r.id, id)
		case r.notStored:
			notStored++
			require.Falsef(t, read, "%s is read at %s, but its append said not stored: %v", p, id, r.err)
		case read:
			unknownRead++
		default:
			unknownNot++
		}
		if r.err != nil {
			require.NotErrorIsf(t, r.err, walimpls.ErrFenced, "%s: the only writer was fenced", p)
		}
	}
	for p, id := range delivered {
		_, ok := results[p]
		require.Truef(t, ok, "%s is read at %s, but was never appended", p, id)
	}
	for g, o := range orders {
		for i := 1; i < len(o); i++ {
			require.Truef(t, idLess(t, o[i-1].id, o[i].id), "appender %d: %s at %s after %s at %s", g, o[i].payload, o[i].id, o[i-1].payload, o[i-1].id)
		}
	}

	faults := map[string]int{}
	for _, r := range proxy.Requests() {
		for _, f := range r.Faults {
			faults[f]++
		}
	}
	resumed := func(r *tail) int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.resumed
	}
	t.Logf("%d requests, faults %v; %d writers (%d opens failed); %d messages acknowledged, %d not stored, "+
		"%d of unknown outcome (%d of them read); the tailing and catching-up readers read on after %d and %d failures; "+
		"retried PUTs that met their own try: %v",
		len(proxy.Requests()), sortedCounts(faults), stats.generations, stats.failedOpens, acked, notStored,
		unknownRead+unknownNot, unknownRead, resumed(tl), resumed(catch), ownRetries(t, reg))
}

// randomFaults are the faults of a proxy, drawn from seed: delays, dropped
// connections, 503 SlowDown, 500, and PUTs whose answer is lost after
// the store wrote them.
func randomFaults(seed uint64) []s3test.Rule {
	return []s3test.Rule{
		{Match: s3test.Probability(0.2, seed+1), Fault: s3test.Delay(time.Millisecond)},
		{Match: s3test.Probability(0.05, seed+2), Fault: s3test.Delay(5 * time.Millisecond)},
		{Match: s3test.Probability(0.02, seed+3), Fault: s3test.Drop()},
		// SlowDown's backoff is a second or more: two are enough.
		{Match: s3test.And(s3test.Probability(0.02, seed+4), s3test.FirstN(2)), Fault: s3test.SlowDown()},
		{Match: s3test.Probability(0.03, seed+5), Fault: s3test.InternalError()},
		{Match: s3test.And(s3test.Method("PUT"), s3test.Probability(0.05, seed+6)), Fault: s3test.ResetAfterWrite()},
	}
}

// appendResult is what an append of the faults test was answered.
type appendResult struct {
	id        string // acknowledged
	err       error
	notStored bool
}

// newFaultyOpener makes an Opener through a store with faults: New is
// tried again when a fault beyond the client's retries failed it, but a
// transient fault must never make it refuse the store.
func newFaultyOpener(t *testing.T, ctx context.Context, cfg s3.Config, opts ...walimpls.Option) *s3.Opener {
	t.Helper()
	opts = append(opts, walimpls.WithLogger(testLogger()))
	for {
		o, err := s3.New(ctx, cfg, opts...)
		if err == nil {
			t.Cleanup(func() { _ = o.Close() })
			return o
		}
		require.NotErrorIs(t, err, s3.ErrNoConditionalWrites, "a transient fault refused the store")
		require.NoError(t, ctx.Err(), "watchdog: %v", err)
		t.Logf("new failed (tried again): %v", err)
	}
}

// openFaulty opens a ReadOnly WAL through a store with faults, trying
// again after a fault beyond the client's retries.
func openFaulty(t *testing.T, ctx context.Context, o *s3.Opener, name string) walimpls.WALImpl {
	t.Helper()
	for {
		w, err := o.Open(ctx, walimpls.Channel{Name: name, Mode: walimpls.ReadOnly})
		if err == nil {
			t.Cleanup(func() { _ = w.Close() })
			return w
		}
		require.False(t, errors.Is(err, walimpls.ErrNoChannel), "%v", err)
		require.NoError(t, ctx.Err(), "watchdog: %v", err)
	}
}

// ownRetries is the count of retried PUTs that met their own earlier try.
func ownRetries(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "streamwal_s3_flush_precondition_failed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" && l.GetValue() == "own_retry" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func sortedCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
