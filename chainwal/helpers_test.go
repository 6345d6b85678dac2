package chainwal_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a node's view of the backends and its chain store.
type env struct {
	t     testing.TB
	b     *backendstest.Backends
	kv    meta.Store
	store *chain.Store
}

func newEnv(t testing.TB, kinds ...string) *env {
	kv, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	return &env{t: t, b: backendstest.Start(t, kinds...), kv: kv, store: chain.NewStore(kv, chain.Options{})}
}

// opener is a chainwal.Opener of e (another one is another process on the
// same data), new channels beginning on def.
func (e *env) opener(def string) *chainwal.Opener {
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe(def)
	require.NoError(e.t, err)
	o, err := chainwal.New(chainwal.Config{Store: e.store, Openers: entries, Default: d, Describe: entries.Describe, FollowInterval: 10 * time.Millisecond,
		WAL: adaptor.Options{TimeTickInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}})
	require.NoError(e.t, err)
	return o
}

func (e *env) manager(o *chainwal.Opener) *walmanager.Manager {
	m, err := walmanager.New(o, walmanager.Options{Deleter: o, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// acked is an acknowledged append.
type acked struct {
	res     adaptor.AppendResult
	payload string
}

// log is what a test's appenders had acknowledged.
type log struct {
	mu    sync.Mutex
	acked []acked
	// failed holds the payloads of failed appends, by whether their
	// outcome is unknown (true: the message may be stored and delivered)
	// or they certainly stored nothing (false).
	failed map[string]bool
}

// fail records a failed append of payload p with err.
func (l *log) fail(p string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == nil {
		l.failed = map[string]bool{}
	}
	l.failed[p] = !walimpls.NotStored(err)
}

func (l *log) add(r adaptor.AppendResult, p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = append(l.acked, acked{res: r, payload: p})
}

// sorted returns the acknowledged appends in timetick order.
func (l *log) sorted() []acked {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]acked(nil), l.acked...)
	sort.Slice(out, func(i, j int) bool { return out[i].res.TimeTick < out[j].res.TimeTick })
	return out
}

// appendN appends n messages to w, named prefix/i, from writers
// goroutines, each a mix of Append, AppendAsync and AppendBatch.
func (l *log) appendN(t testing.TB, w adaptor.WAL, prefix string, n, writers int) {
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += writers {
				p := fmt.Sprintf("%s/%d", prefix, i)
				m, err := message.New([]byte(p), nil)
				if err != nil {
					errs <- err
					return
				}
				switch i % 3 {
				case 0:
					r, err := w.Append(ctx, m)
					if err != nil {
						errs <- err
						return
					}
					l.add(r, p)
				case 1:
					done := make(chan error, 1)
					w.AppendAsync(ctx, m, func(r adaptor.AppendResult, err error) {
						if err == nil {
							l.add(r, p)
						}
						done <- err
					})
					if err := <-done; err != nil {
						errs <- err
						return
					}
				default:
					rs, err := w.AppendBatch(ctx, []message.Message{m})
					if err != nil {
						errs <- err
						return
					}
					l.add(rs[0], p)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// recv takes n messages from s, failing on a watchdog.
func recv(t testing.TB, s walimpls.Scanner, n int) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "the scanner ended after %d of %d: %v", len(out), n, s.Error())
			out = append(out, m)
		case <-timer.C:
			last := "none"
			if len(out) > 0 {
				last = fmt.Sprintf("%q at %s", out[len(out)-1].Payload(), out[len(out)-1].ID())
			}
			require.FailNowf(t, "watchdog", "%d of %d, the last %s", len(out), n, last)
		}
	}
	return out
}

// check compares what a scanner delivered with the acknowledged appends
// it should deliver, in timetick order: exactly those, once, with the IDs
// their appends returned.
func check(t testing.TB, want []acked, got []message.Immutable) {
	t.Helper()
	require.Len(t, got, len(want))
	for i, m := range got {
		require.Equalf(t, want[i].payload, string(m.Payload()), "message %d", i)
		tt, _ := m.TimeTick()
		require.Equal(t, want[i].res.TimeTick, tt)
		require.Truef(t, want[i].res.ID.EQ(m.ID()), "message %d: delivered at %s, acknowledged at %s", i, m.ID(), want[i].res.ID)
	}
}

// readAll reads w with policy and checks it delivers what l acknowledged,
// in timetick order, but for the first skip.
func readAll(t testing.TB, w adaptor.WAL, l *log, policy cursor.Policy, skip int) []message.Immutable {
	t.Helper()
	return readWant(t, w, policy, l.sorted()[skip:])
}

// readAcked reads w from the start up to the last acknowledged append
// and checks it delivers, in strictly increasing timetick order, every
// acknowledged append once, with the ID and timetick its append returned,
// and beside them only appends whose outcome was unknown (see
// adaptor.WAL.Append: such an append, e.g. one in flight when its WAL was
// closed, may have been stored), each at most once. It returns how many of
// those it delivered.
func readAcked(t testing.TB, w adaptor.WAL, l *log) int {
	t.Helper()
	want := l.sorted()
	require.NotEmpty(t, want)
	l.mu.Lock()
	failed := maps.Clone(l.failed)
	l.mu.Unlock()
	byPayload := make(map[string]acked, len(want))
	for _, a := range want {
		byPayload[a.payload] = a
	}
	s, err := w.Read(testCtx(t), adaptor.ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	end := want[len(want)-1].res.ID
	seen := map[string]bool{}
	var prev uint64
	next, unknown := 0, 0 // next: the index in want of the next acknowledged append
	for {
		m := recv(t, s, 1)[0]
		p := string(m.Payload())
		tt, _ := m.TimeTick()
		require.Greaterf(t, tt, prev, "%q at %s: timetick %d, not above the previous message's", p, m.ID(), tt)
		prev = tt
		require.Falsef(t, seen[p], "%q delivered twice", p)
		seen[p] = true
		if a, ok := byPayload[p]; ok {
			require.Equalf(t, want[next].payload, p, "acknowledged append %d", next)
			require.Equal(t, a.res.TimeTick, tt)
			require.Truef(t, a.res.ID.EQ(m.ID()), "%q: delivered at %s, acknowledged at %s", p, m.ID(), a.res.ID)
			next++
			if m.ID().EQ(end) {
				return unknown
			}
			continue
		}
		maybe, ok := failed[p]
		require.Truef(t, ok, "%q at %s: delivered, never appended", p, m.ID())
		require.Truef(t, maybe, "%q at %s: delivered, its append failed as certainly not stored", p, m.ID())
		unknown++
	}
}

// readFrom reads w from position id (inclusive) and checks it delivers
// what l acknowledged at or after id, in timetick order: a position
// starts in the log's order, which concurrent appenders make differ from
// the timeticks' within a segment.
func readFrom(t testing.TB, w adaptor.WAL, l *log, id message.ID) []message.Immutable {
	t.Helper()
	var want []acked
	for _, a := range l.sorted() {
		if id.LTE(a.res.ID) {
			want = append(want, a)
		}
	}
	return readWant(t, w, cursor.StartFrom(id), want)
}

func readWant(t testing.TB, w adaptor.WAL, policy cursor.Policy, want []acked) []message.Immutable {
	t.Helper()
	s, err := w.Read(testCtx(t), adaptor.ReadOption{DeliverPolicy: policy})
	require.NoError(t, err)
	defer s.Close()
	got := recv(t, s, len(want))
	check(t, want, got)
	return got
}

func segmentOf(t testing.TB, id message.ID) uint64 {
	seg, _, ok := cursor.SplitID(id)
	require.True(t, ok, "%s is a chain id", id)
	return seg
}

func payload(t testing.TB, prefix string, i int) message.Message {
	m, err := message.New([]byte(fmt.Sprintf("%s/%d", prefix, i)), nil)
	require.NoError(t, err)
	return m
}
