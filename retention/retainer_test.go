package retention_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A fenced Pulsar producer's reconnect goroutine (see pulsartest).
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar.(*producer).internalSendWithTrackID"))
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a node's channels as chains over backends, the consumers' store
// beside the chains, and a retainer over them.
type env struct {
	t      *testing.T
	ctx    context.Context
	b      *backendstest.Backends
	kv     *hookedStore
	chains *chain.Store
	opener *chainwal.Opener
	mgr    *walmanager.Manager
	store  *consumers.Store
	src    *source
	reg    *prometheus.Registry
}

func newEnv(t *testing.T, kinds ...string) *env {
	bolt, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bolt.Close() })
	e := &env{t: t, ctx: testCtx(t), b: backendstest.Start(t, kinds...), kv: &hookedStore{Store: bolt}, reg: prometheus.NewRegistry()}
	e.chains = chain.NewStore(e.kv, chain.Options{})
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe(kinds[0])
	require.NoError(t, err)
	e.opener, err = chainwal.New(chainwal.Config{Store: e.chains, Openers: entries, Default: d, Describe: entries.Describe,
		FollowInterval: 10 * time.Millisecond, WAL: adaptor.Options{TimeTickInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}})
	require.NoError(t, err)
	e.mgr, err = walmanager.New(e.opener, walmanager.Options{Deleter: e.opener, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.mgr.Close(context.Background()) })
	e.store, err = consumers.NewStore(e.kv, consumers.Options{})
	require.NoError(t, err)
	e.src = &source{mgr: e.mgr, terms: map[string]int64{}}
	return e
}

func (e *env) retainer(cfg retention.Config) *retention.Retainer {
	r, err := retention.New(retention.WithBlocks(retention.Options{Config: cfg, Store: e.store, Source: e.src, Chains: e.opener.Chain,
		Registerer: e.reg, Logger: slog.New(slog.DiscardHandler)}, 1, 1))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = r.Close() })
	return r
}

// open opens channel at term and makes it the source's.
func (e *env) open(channel string, term int64) adaptor.WAL {
	require.NoError(e.t, e.mgr.Open(e.ctx, adaptor.Channel{Name: channel, Term: term}))
	w, err := e.mgr.GetAvailableWAL(adaptor.Channel{Name: channel, Term: term})
	require.NoError(e.t, err)
	e.src.own(channel, term)
	return w
}

// write appends n messages of vchannel (none: "") named prefix/i, each
// followed by a watermark, so that every message's checkpoint is its own.
func (e *env) write(w adaptor.WAL, vchannel, prefix string, n int) []adaptor.AppendResult {
	var out []adaptor.AppendResult
	for i := range n {
		m, err := message.New([]byte(fmt.Sprintf("%s/%d", prefix, i)), nil)
		require.NoError(e.t, err)
		if vchannel != "" {
			m = m.WithVChannel(vchannel)
		}
		r, err := w.Append(e.ctx, m)
		require.NoError(e.t, err)
		require.NoError(e.t, w.Sync(e.ctx))
		out = append(out, r)
	}
	return out
}

// read returns what a read of w from policy delivers, up to the tail now.
func (e *env) read(w adaptor.WAL, policy cursor.Policy, vchannel string) ([]message.Immutable, error) {
	tail, err := w.Tail(e.ctx)
	require.NoError(e.t, err)
	opt := adaptor.ReadOption{DeliverPolicy: policy, Filter: adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTimeTick}}}
	if vchannel != "" {
		opt.Filter.VChannels = []string{vchannel}
	}
	s, err := w.Read(e.ctx, opt)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	var out []message.Immutable
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return out, s.Error()
			}
			if adaptor.CaughtUp(m, tail) {
				return out, nil
			}
			if m.Kind() == message.KindData {
				out = append(out, m)
			}
		case <-e.ctx.Done():
			e.t.Fatal("read did not reach the tail")
		}
	}
}

// checkpointOf returns the checkpoint after the i-th message a full read
// of w delivers.
func (e *env) checkpoints(w adaptor.WAL) []cursor.Checkpoint {
	ms, err := e.read(w, cursor.All(), "")
	require.NoError(e.t, err)
	out := make([]cursor.Checkpoint, len(ms))
	for i, m := range ms {
		out[i], err = cursor.CheckpointOf(m)
		require.NoError(e.t, err)
	}
	return out
}

func (e *env) commit(channel string, sc consumers.Scope, cp cursor.Checkpoint, w adaptor.WAL) {
	_, err := e.store.Commit(e.ctx, channel, sc, cp, w.Channel().Term, w.ParseCheckpoint)
	require.NoError(e.t, err)
}

func payloads(ms []message.Immutable) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload())
	}
	return out
}

// source is the channels a test's node owns.
type source struct {
	mgr   *walmanager.Manager
	mu    sync.Mutex
	terms map[string]int64
}

func (s *source) own(channel string, term int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terms[channel] = term
}

func (s *source) Channels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for ch := range s.terms {
		out = append(out, ch)
	}
	return out
}

func (s *source) WAL(channel string) (adaptor.WAL, bool) {
	s.mu.Lock()
	term, ok := s.terms[channel]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	w, err := s.mgr.GetAvailableWAL(adaptor.Channel{Name: channel, Term: term})
	return w, err == nil
}

func (s *source) Appended(string, uint64) bool { return true }

// hookedStore runs beforeCommit before each Commit whose puts write a key
// with the suffix.
type hookedStore struct {
	meta.Store
	mu           sync.Mutex
	suffix       string
	beforeCommit func()
}

func (h *hookedStore) hook(suffix string, f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.suffix, h.beforeCommit = suffix, f
}

func (h *hookedStore) Commit(ctx context.Context, txn meta.Txn) (int64, error) {
	h.mu.Lock()
	f := h.beforeCommit
	if f != nil {
		hit := false
		for _, p := range txn.Puts {
			hit = hit || strings.HasSuffix(p.Key, h.suffix)
		}
		if !hit {
			f = nil
		} else {
			h.beforeCommit = nil
		}
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return h.Store.Commit(ctx, txn)
}

// The log is kept for the slowest consumer: a channel without consumers
// keeps everything; with two, it is truncated at the earlier checkpoint,
// and what lies before it is gone for every reader.
func TestTruncatesAtTheSlowest(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "", "m", 30)
	r := e.retainer(retention.Config{})

	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "no consumer", res.HeldBy)
	require.True(t, res.Truncated.IsZero())
	st, ok := r.Stats("p")
	require.True(t, ok)
	require.EqualValues(t, 30, st.Messages)
	require.Positive(t, st.Bytes)
	require.False(t, st.OldestTime.IsZero())
	require.Len(t, st.Segments, 1)

	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "flusher"}, cps[19], w)
	e.commit("p", consumers.Scope{Consumer: "indexer"}, cps[9], w)
	res, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "consumer indexer", res.HeldBy)
	require.Equal(t, cps[9].Marshal(), res.Truncated.Marshal())

	got, err := e.read(w, cursor.All(), "")
	require.NoError(t, err)
	require.Equal(t, "m/10", string(got[0].Payload()), "the oldest retained message is the one after the slowest checkpoint")
	_, err = e.read(w, cursor.After(cps[3]), "")
	require.ErrorIs(t, err, walimpls.ErrPositionGone, "a checkpoint before the truncation is gone, never skipped silently")
	got, err = e.read(w, cursor.After(cps[9]), "")
	require.NoError(t, err)
	require.Len(t, got, 20, "everything after the slowest checkpoint is kept")

	st, _ = r.Stats("p")
	require.EqualValues(t, 20, st.Messages, "the measure follows the truncation (blocks of one message each here: exact)")
	require.Equal(t, "consumer indexer", st.HeldBy)
	require.Equal(t, []consumers.Scope{{Consumer: "indexer"}}, st.Holding)

	// The indexer moves on: the flusher holds now. A round with nothing new
	// truncates nothing more.
	e.commit("p", consumers.Scope{Consumer: "indexer"}, cps[29], w)
	res, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, cps[19].Marshal(), res.Truncated.Marshal())
	res, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.True(t, res.Truncated.IsZero())
	require.Equal(t, 2.0, testutil.ToFloat64(metric(t, e.reg, "streamwal_retention_truncations_total")))
	require.Equal(t, 10.0, gauge(t, e.reg, "streamwal_retention_messages", "p"))
}

// An idle vchannel consumer holds nothing back: the truncation passes its
// checkpoint and it resumes at the tail, finding every message of its
// vchannel; a vchannel with messages and no consumer holds the log at its
// first message.
func TestIdleVChannels(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "quiet", "q", 3)
	e.write(w, "busy", "b", 10)
	cps := e.checkpoints(w)
	quiet := consumers.Scope{Consumer: "c", VChannel: "quiet"}
	busy := consumers.Scope{Consumer: "c", VChannel: "busy"}
	e.commit("p", quiet, cps[2], w)
	e.commit("p", busy, cps[8], w)
	r := e.retainer(retention.Config{})
	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "consumer c of vchannel busy", res.HeldBy)
	require.Equal(t, 1, res.Moved)
	require.Equal(t, cps[8].Marshal(), res.Truncated.Marshal())

	ch, err := e.store.Load(e.ctx, "p")
	require.NoError(t, err)
	moved, _ := ch.Find(quiet)
	resume, err := w.ParseCheckpoint(moved.ResumeAt())
	require.NoError(t, err)
	e.write(w, "quiet", "q-after", 2)
	got, err := e.read(w, cursor.After(resume), "quiet")
	require.NoError(t, err)
	require.Equal(t, []string{"q-after/0", "q-after/1"}, payloads(got), "the idle consumer finds every message of its vchannel")

	// A vchannel nobody consumes holds the log at its first message.
	e.write(w, "orphan", "o", 2)
	e.write(w, "busy", "b2", 3)
	cps = e.checkpoints(w)
	e.commit("p", busy, cps[len(cps)-1], w)
	e.commit("p", quiet, cps[len(cps)-4], w)
	res, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "vchannel orphan (no consumer)", res.HeldBy)
	got, err = e.read(w, cursor.All(), "orphan")
	require.NoError(t, err)
	require.Equal(t, []string{"o/0", "o/1"}, payloads(got))
}

// A commit that lands between the round's read of the consumers and its
// floor is seen by the read after the floor: the truncation stops at it.
func TestCommitRacingTheFloor(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "", "m", 20)
	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "flusher"}, cps[15], w)
	r := e.retainer(retention.Config{})
	e.kv.hook("/floor", func() { e.commit("p", consumers.Scope{Consumer: "late"}, cps[4], w) })
	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, cps[15].Marshal(), res.Target.Marshal(), "the rule decided on the first read")
	require.Equal(t, cps[4].Marshal(), res.Truncated.Marshal(), "the truncation stopped at the late commit")
	got, err := e.read(w, cursor.After(cps[4]), "")
	require.NoError(t, err)
	require.Len(t, got, 15)

	// After the floor, a commit before it is refused.
	_, err = e.store.Commit(e.ctx, "p", consumers.Scope{Consumer: "later"}, cps[2], 1, w.ParseCheckpoint)
	require.ErrorIs(t, err, consumers.ErrTruncated)
}

// A truncation into a later segment deletes the sealed segments' data on
// their backends and drops them from the chain; the measure is per
// segment.
func TestDropsSealedSegments(t *testing.T) {
	e := newEnv(t, "memory", "local")
	e.open("p", 1)
	w1, err := e.mgr.GetAvailableWAL(adaptor.Channel{Name: "p", Term: 1})
	require.NoError(t, err)
	e.write(w1, "", "s0", 5)
	_, err = e.opener.Migrate(e.ctx, e.mgr, "p", "local", "test")
	require.NoError(t, err)
	w := e.open("p", 2)
	e.write(w, "", "s1", 5)
	r := e.retainer(retention.Config{})
	_, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	st, _ := r.Stats("p")
	require.Len(t, st.Segments, 2)
	require.Equal(t, retention.SegmentStats{Index: 0, Backend: "memory", BackendChannel: "p", Sealed: true, Messages: 5, Bytes: st.Segments[0].Bytes}, st.Segments[0])
	require.EqualValues(t, 5, st.Segments[1].Messages)
	require.Equal(t, "local", st.Segments[1].Backend)

	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "flusher"}, cps[7], w)
	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.False(t, res.Truncated.IsZero())
	c, err := e.chains.Get(e.ctx, "p")
	require.NoError(t, err)
	require.EqualValues(t, 1, c.First(), "segment 0 dropped from the chain")
	_, err = e.b.Entry("memory").Open(e.ctx, walimpls.Channel{Name: "p", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "segment 0's data deleted on its backend")
	st, _ = r.Stats("p")
	require.Len(t, st.Segments, 1)
	require.EqualValues(t, 1, st.Segments[0].Index)
	got, err := e.read(w, cursor.After(cps[7]), "")
	require.NoError(t, err)
	require.Equal(t, []string{"s1/3", "s1/4"}, payloads(got))
	_, err = r.Round(e.ctx, "p") // the next round counts the dropped segment
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(metric(t, e.reg, "streamwal_retention_segments_deleted_total")))
}

// The policy bounds a channel nobody commits on, and says what it
// dropped; it never passes a committed checkpoint.
func TestPolicy(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "", "m", 20)
	measure := e.retainer(retention.Config{})
	_, err := measure.Round(e.ctx, "p")
	require.NoError(t, err)
	all, _ := measure.Stats("p")
	require.NoError(t, measure.Close())

	// Half the bytes: the oldest go, and the count of what went and what
	// stays adds up.
	half := e.retainer(retention.Config{Policy: retention.Policy{MaxBytes: all.Bytes / 2}})
	res, err := half.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "retention", res.HeldBy)
	st, _ := half.Stats("p")
	require.LessOrEqual(t, st.Bytes, all.Bytes/2)
	require.Positive(t, st.Messages)
	require.EqualValues(t, 20, st.Messages+res.Dropped[0])
	require.Equal(t, all.Bytes, st.Bytes+res.Dropped[1])
	require.NoError(t, half.Close())

	r := e.retainer(retention.Config{Policy: retention.Policy{MaxBytes: 1}})
	res, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "retention", res.HeldBy)
	require.Equal(t, st.Messages, res.Dropped[0], "what the half cap kept")
	st, _ = r.Stats("p")
	require.EqualValues(t, 0, st.Messages, "everything: one byte holds no message")
	require.Equal(t, [2]int64{res.Dropped[0], res.Dropped[1]}, st.Dropped)
	require.Equal(t, float64(res.Dropped[0]), counter(t, e.reg, "streamwal_retention_dropped_messages_total", "p"))

	e.write(w, "", "n", 10)
	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "late"}, cps[2], w)
	res, err = r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "consumer late", res.HeldBy, "a committed checkpoint holds whatever the cap")
	got, err := e.read(w, cursor.After(cps[2]), "")
	require.NoError(t, err)
	require.Len(t, got, 7)
}

// A round by an owner of a lower term than the floor's moves nothing.
func TestStaleOwner(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "", "m", 10)
	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "f"}, cps[3], w)
	read, err := e.store.Load(e.ctx, "p")
	require.NoError(t, err)
	_, err = e.store.Advance(e.ctx, read, 5, cps[2], nil, w.ParseCheckpoint)
	require.NoError(t, err)
	r := e.retainer(retention.Config{})
	_, err = r.Round(e.ctx, "p")
	require.ErrorIs(t, err, consumers.ErrStaleTerm)
	got, err := e.read(w, cursor.All(), "")
	require.NoError(t, err)
	require.Len(t, got, 10, "nothing truncated")
}

// Started, the retainer runs a round of every owned channel at once and of
// a channel soon after a commit (Notify).
func TestScheduler(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.open("q", 1)
	e.write(w, "", "m", 10)
	cps := e.checkpoints(w)
	r := e.retainer(retention.Config{Interval: time.Hour, CommitDelay: time.Millisecond})
	r.Start()
	waitFor(t, func() bool {
		_, p := r.Stats("p")
		_, q := r.Stats("q")
		return p && q
	})
	e.commit("p", consumers.Scope{Consumer: "f"}, cps[5], w)
	r.Notify("p")
	waitFor(t, func() bool {
		st, _ := r.Stats("p")
		return st.Messages == 4
	})
	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close is idempotent")
}

// waitFor waits for cond, checked every few milliseconds, within the
// test's context.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx := testCtx(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition never held")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func metric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return collectorOf{reg: reg, name: name}
}

// collectorOf gathers one metric family of a registry, summed.
type collectorOf struct {
	reg  *prometheus.Registry
	name string
}

func (c collectorOf) Describe(chan<- *prometheus.Desc) {}
func (c collectorOf) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := c.reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != c.name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.name, "", nil, nil), prometheus.GaugeValue, sum)
}

func gauge(t *testing.T, reg *prometheus.Registry, name, channel string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "channel" && l.GetValue() == channel {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{channel=%q}", name, channel)
	return 0
}

func counter(t *testing.T, reg *prometheus.Registry, name, channel string) float64 {
	return gauge(t, reg, name, channel)
}

// A round a crash interrupted after the sealed segments' data was deleted
// but before they were dropped from the chain: the next owner's retainer
// reads from the floor (a read from the oldest would meet the deleted
// segment), and its truncation finishes the prune.
func TestFinishesAnInterruptedPrune(t *testing.T) {
	e := newEnv(t, "memory", "local")
	w1 := e.open("p", 1)
	e.write(w1, "", "s0", 5)
	_, err := e.opener.Migrate(e.ctx, e.mgr, "p", "local", "test")
	require.NoError(t, err)
	w := e.open("p", 2)
	e.write(w, "", "s1", 5)
	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "f"}, cps[7], w)
	// What the interrupted round did: the floor, then segment 0's data.
	read, err := e.store.Load(e.ctx, "p")
	require.NoError(t, err)
	_, err = e.store.Advance(e.ctx, read, 2, cps[7], nil, w.ParseCheckpoint)
	require.NoError(t, err)
	require.NoError(t, e.b.Entry("memory").Delete(e.ctx, "p"))
	_, err = e.read(w, cursor.All(), "")
	require.ErrorIs(t, err, walimpls.ErrPositionGone, "the half-done prune: a read from the oldest meets the deleted segment")

	r := e.retainer(retention.Config{})
	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, cps[7].Marshal(), res.Truncated.Marshal())
	c, err := e.chains.Get(e.ctx, "p")
	require.NoError(t, err)
	require.EqualValues(t, 1, c.First(), "the prune finished")
	got, err := e.read(w, cursor.All(), "")
	require.NoError(t, err)
	require.Equal(t, []string{"s1/3", "s1/4"}, payloads(got))
}

// A tail's position is the watermark before its own, so it may precede a
// message with a lower timetick: an idle vchannel consumer whose own
// checkpoint is such a message is moved to a tail that comes after it by
// timetick and before it by position. The truncation must keep the
// position the consumer resumes from (its resume point), not its own
// checkpoint's: a read from where the store says it resumes finds what
// comes after, and is never refused as truncated.
func TestMovedConsumerResumesAfterTruncation(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "", "m", 3)
	// After the last watermark: the quiet vchannel's last message, then
	// one more, each committed by its consumer as a reader of the writer
	// delivers them (before any watermark).
	quiet := consumers.Scope{Consumer: "c", VChannel: "quiet"}
	flusher := consumers.Scope{Consumer: "flusher"}
	for _, m := range []struct {
		sc              consumers.Scope
		vchannel, label string
	}{{quiet, "quiet", "q"}, {flusher, "", "m/3"}} {
		msg, err := message.New([]byte(m.label), nil)
		require.NoError(t, err)
		if m.vchannel != "" {
			msg = msg.WithVChannel(m.vchannel)
		}
		r, err := w.Append(e.ctx, msg)
		require.NoError(t, err)
		e.commit("p", m.sc, cursor.Checkpoint{Position: r.ID, TimeTick: r.TimeTick}, w)
	}

	r := e.retainer(retention.Config{})
	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.Equal(t, 1, res.Moved, "the quiet consumer is idle")
	require.False(t, res.Truncated.IsZero())

	e.write(w, "quiet", "q-after", 2)
	ch, err := e.store.Load(e.ctx, "p")
	require.NoError(t, err)
	moved, _ := ch.Find(quiet)
	resume, err := w.ParseCheckpoint(moved.ResumeAt())
	require.NoError(t, err)
	got, err := e.read(w, cursor.After(resume), "quiet")
	require.NoError(t, err, "a read from where the moved consumer resumes (%s; its own checkpoint %s; truncated at %s)",
		moved.ResumeAt(), moved.Checkpoint, res.Truncated)
	require.Equal(t, []string{"q-after/0", "q-after/1"}, payloads(got))
}

// With blocks of their default size, a truncation inside a block counts
// that block again: the figures are exact.
func TestRecountAfterATruncationInsideABlock(t *testing.T) {
	e := newEnv(t, "memory")
	w := e.open("p", 1)
	e.write(w, "", "m", 30)
	r, err := retention.New(retention.Options{Store: e.store, Source: e.src, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	cps := e.checkpoints(w)
	e.commit("p", consumers.Scope{Consumer: "f"}, cps[9], w)
	res, err := r.Round(e.ctx, "p")
	require.NoError(t, err)
	require.False(t, res.Truncated.IsZero())
	got, err := e.read(w, cursor.All(), "")
	require.NoError(t, err)
	st, _ := r.Stats("p")
	require.EqualValues(t, len(got), st.Messages, "exactly what a read from the oldest delivers")
	require.True(t, got[0].ID().EQ(st.Oldest), "the oldest retained message")
	var bytes int64
	for _, m := range got {
		bytes += int64(m.Size())
	}
	require.Equal(t, bytes, st.Bytes)
}
