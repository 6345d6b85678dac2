package chainwal_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// TestMigrateFourBackends moves a live channel memory → Kafka → Pulsar →
// local through an embedded manager: every acknowledged append is read
// once, in timetick order, with the ID its append returned, across three
// seals; a checkpoint taken in segment 0 resumes after the hops.
func TestMigrateFourBackends(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	o := e.opener("memory")
	m := e.manager(o)
	require.NoError(t, m.Open(ctx, adaptor.Channel{Name: "orders", Term: 1}))
	var l log
	hops := []string{"kafka", "pulsar", "local"}
	for i, to := range append([]string{""}, hops...) {
		if to != "" {
			c, err := o.Migrate(ctx, m, "orders", to, "test")
			require.NoError(t, err)
			require.Len(t, c.Segments, i+1)
			require.Equal(t, to, c.Last().Backend.Name)
			require.Equal(t, chainwal.SegmentChannel("orders", uint64(i)), c.Last().Backend.Channel)
		}
		w, err := m.GetAvailableWAL(adaptor.Channel{Name: "orders", Term: int64(i + 1)})
		require.NoError(t, err)
		l.appendN(t, w, to, 30, 3)
	}
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "orders", Term: 4})
	require.NoError(t, err)
	all := readAll(t, w, &l, cursor.All(), 0)
	for i, seg := range []uint64{0, 1, 2, 3} {
		require.Equal(t, seg, segmentOf(t, all[30*i].ID()))
	}

	// A checkpoint of segment 0 (its string as a consumer stored it)
	// resumes after three hops.
	cp, err := cursor.CheckpointOf(all[10])
	require.NoError(t, err)
	parsed, err := w.ParseCheckpoint(cp.Marshal())
	require.NoError(t, err)
	readAll(t, w, &l, cursor.After(parsed), 11)
	// A checkpoint in a segment the chain does not have is corrupt, and
	// says why.
	_, err = w.ParseCheckpoint("5@s9/1")
	errmarktest.Is(t, err, cursor.ErrCorruptCheckpoint, chain.ErrUnknownSegment)
	id, err := w.ParseID(all[70].ID().Marshal())
	require.NoError(t, err)
	readFrom(t, w, &l, id)
	readAll(t, w, &l, cursor.FromTimeTick(l.sorted()[45].res.TimeTick), 45)

	// Migrating to where the channel is, or to an entry the configuration
	// lacks, is refused and changes nothing.
	_, err = o.Migrate(ctx, m, "orders", "local", "test")
	errmarktest.Is(t, err, chain.ErrSameBackend)
	_, err = o.Migrate(ctx, m, "orders", "kafka-west", "test")
	errmarktest.Is(t, err, chainwal.ErrUnknownBackend)
	w, err = m.GetAvailableWAL(adaptor.Channel{Name: "orders", Term: 4})
	require.NoError(t, err)
	l.appendN(t, w, "after", 5, 1)
	readAll(t, w, &l, cursor.All(), 0)
}

// TestZombieWriter: a writer of the old segment that was not closed (a
// node that lost its channel and did not notice) gets nothing
// acknowledged after the seal, and nothing it sends is delivered.
func TestZombieWriter(t *testing.T) {
	for _, from := range []string{"memory", "local", "kafka", "pulsar", "s3"} {
		t.Run(from, func(t *testing.T) {
			ctx := testCtx(t)
			to := "memory"
			if from == "memory" {
				to = "local"
			}
			e := newEnv(t, from, to)
			o := e.opener(from)
			zombie, err := o.Open(ctx, adaptor.Channel{Name: "z", Term: 1})
			require.NoError(t, err)
			defer zombie.Close()
			var l log
			l.appendN(t, zombie, "before", 20, 2)

			_, err = o.BeginMigration(ctx, "z", to, 2, "test")
			require.NoError(t, err)
			// Another process opens the chain at the migration's term.
			w, err := e.opener(from).Open(ctx, adaptor.Channel{Name: "z", Term: 2})
			require.NoError(t, err)
			defer w.Close()

			for i := range 5 {
				m := payload(t, "zombie", i)
				_, err := zombie.Append(ctx, m)
				require.Error(t, err, "the zombie's append %d was acknowledged after the seal", i)
			}
			l.appendN(t, w, "after", 20, 2)
			readAll(t, w, &l, cursor.All(), 0)
			c, err := e.store.Get(ctx, "z")
			require.NoError(t, err)
			require.NotNil(t, c.Segments[0].Seal)
			require.Equal(t, int64(2), c.Segments[0].Seal.Term)
		})
	}
}

// TestFinishHalfDone: a migration interrupted after each of its steps is
// finished by the next open at its term or above, by another process, and
// converges to one chain with nothing lost.
func TestFinishHalfDone(t *testing.T) {
	for _, step := range []string{"intent", "fenced", "sealed"} {
		t.Run(step, func(t *testing.T) {
			ctx := testCtx(t)
			e := newEnv(t, "local", "kafka")
			o := e.opener("local")
			w, err := o.Open(ctx, adaptor.Channel{Name: "h", Term: 1})
			require.NoError(t, err)
			var l log
			l.appendN(t, w, "s0", 20, 2)
			c, err := o.BeginMigration(ctx, "h", "kafka", 3, "test")
			require.NoError(t, err)
			switch step {
			case "fenced":
				lo := e.b.Entry("local")
				_, err := adaptor.FenceEnd(ctx, lo, adaptor.Channel{Name: "h", Term: 3}, 0, adaptor.Options{})
				require.NoError(t, err)
			case "sealed":
				lo := e.b.Entry("local")
				end, err := adaptor.FenceEnd(ctx, lo, adaptor.Channel{Name: "h", Term: 3}, 0, adaptor.Options{})
				require.NoError(t, err)
				c, err = e.store.Seal(ctx, "h", chain.SealRequest{Segment: 0, Term: 3, End: end.Last.Marshal(), TimeTick: end.TimeTick})
				require.NoError(t, err)
				require.Len(t, c.Segments, 2)
			}
			require.NoError(t, w.Close())

			// An open below the migration's term still opens the old
			// segment while it is not sealed (the migration fences it
			// later), and is refused once it is.
			w2, err := e.opener("local").Open(ctx, adaptor.Channel{Name: "h", Term: 2})
			if step == "sealed" {
				require.ErrorIs(t, err, walimpls.ErrFenced)
			} else if step == "fenced" {
				require.ErrorIs(t, err, walimpls.ErrFenced, "the fence at term 3 refuses term 2 on the old segment")
			} else {
				require.NoError(t, err)
				l.appendN(t, w2, "t2", 5, 1)
				require.NoError(t, w2.Close())
			}

			w3, err := e.opener("local").Open(ctx, adaptor.Channel{Name: "h", Term: 4})
			require.NoError(t, err)
			defer w3.Close()
			c, err = e.store.Get(ctx, "h")
			require.NoError(t, err)
			require.Len(t, c.Segments, 2)
			require.Nil(t, c.Pending)
			require.Equal(t, "kafka", c.Last().Backend.Name)
			l.appendN(t, w3, "s1", 20, 2)
			readAll(t, w3, &l, cursor.All(), 0)
		})
	}
}

// TestScannerCrossesALiveSeal: a scanner of the WAL of the old term,
// started before the migration and left running, delivers what the new
// owner appends on the new backend after the seal, without a restart,
// every message once, in timetick order.
func TestScannerCrossesALiveSeal(t *testing.T) {
	for _, to := range []string{"kafka", "pulsar", "s3"} {
		t.Run(to, func(t *testing.T) {
			ctx := testCtx(t)
			e := newEnv(t, "local", to)
			old, err := e.opener("local").Open(ctx, adaptor.Channel{Name: "live", Term: 1})
			require.NoError(t, err)
			defer old.Close()
			s, err := old.ReadBatches(ctx, adaptor.ReadOption{})
			require.NoError(t, err)
			defer s.Close()
			var l log
			l.appendN(t, old, "before", 20, 2)

			_, err = e.opener("local").BeginMigration(ctx, "live", to, 2, "test")
			require.NoError(t, err)
			w, err := e.opener("local").Open(ctx, adaptor.Channel{Name: "live", Term: 2})
			require.NoError(t, err)
			defer w.Close()
			l.appendN(t, w, "after", 20, 2)

			want := l.sorted()
			var got []message.Immutable
			for len(got) < len(want) {
				select {
				case b, ok := <-s.Batches():
					require.Truef(t, ok, "the scanner ended after %d: %v", len(got), s.Error())
					got = append(got, b...)
				case <-ctx.Done():
					require.FailNowf(t, "watchdog", "%d of %d", len(got), len(want))
				}
			}
			check(t, want, got)
		})
	}
}

// TestTargetThisNodeCannotOpen: an open that finds a migration to a backend
// entry it does not have fails before it fences anything: the old
// segment's writer goes on, and a cancel leaves the channel as it was.
func TestTargetThisNodeCannotOpen(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory", "local")
	w, err := e.opener("memory").Open(ctx, adaptor.Channel{Name: "t", Term: 1})
	require.NoError(t, err)
	defer w.Close()
	var l log
	l.appendN(t, w, "a", 5, 1)
	_, err = e.store.BeginMigration(ctx, "t", chain.MigrationRequest{Segment: 0, Target: chain.Backend{Name: "elsewhere", Kind: "kafka", Channel: "t-s1"}, Term: 2, By: "test"})
	require.NoError(t, err)
	_, err = e.opener("memory").Open(ctx, adaptor.Channel{Name: "t", Term: 2})
	require.Error(t, err)
	require.Contains(t, err.Error(), "cannot open the target")
	l.appendN(t, w, "b", 5, 1) // not fenced
	_, err = e.opener("memory").CancelMigration(ctx, "t")
	require.NoError(t, err)
	readAll(t, w, &l, cursor.All(), 0)
}

// TestScannersDoNotAccumulate: a WAL read many times keeps no scanner its
// consumer closed, and Close stops those still open, which end with
// ErrClosed (a consumer's Close leaves no error): their reader can tell
// the WAL's end from the end of what it read.
func TestScannersDoNotAccumulate(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory")
	w, err := e.opener("memory").Open(ctx, adaptor.Channel{Name: "s", Term: 1})
	require.NoError(t, err)
	for range 100 {
		s, err := w.Read(ctx, adaptor.ReadOption{})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		b, err := w.ReadBatches(ctx, adaptor.ReadOption{})
		require.NoError(t, err)
		require.NoError(t, b.Close())
		require.NoError(t, b.Error())
	}
	require.Equal(t, 0, chainwal.OpenScanners(w))
	open, err := w.Read(ctx, adaptor.ReadOption{})
	require.NoError(t, err)
	batches, err := w.ReadBatches(ctx, adaptor.ReadOption{})
	require.NoError(t, err)
	require.Equal(t, 2, chainwal.OpenScanners(w))
	require.NoError(t, w.Close())
	for _, sc := range []interface {
		Done() <-chan struct{}
		Error() error
	}{open, batches} {
		select {
		case <-sc.Done():
		case <-ctx.Done():
			require.FailNow(t, "Close left a scanner running")
		}
		require.ErrorIs(t, sc.Error(), walimpls.ErrClosed, "a scanner its WAL's Close stopped")
	}
}

// TestMetricsKeepTheChannel: the writer of a later segment records its
// metrics under the chain's channel, not the segment's backend channel.
func TestMetricsKeepTheChannel(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory", "local")
	reg := prometheus.NewRegistry()
	met, err := adaptor.NewMetrics(reg)
	require.NoError(t, err)
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe("memory")
	require.NoError(t, err)
	o, err := chainwal.New(chainwal.Config{Store: e.store, Openers: entries, Default: d, Describe: entries.Describe, WAL: adaptor.Options{Metrics: met}})
	require.NoError(t, err)
	m := e.manager(o)
	require.NoError(t, m.Open(ctx, adaptor.Channel{Name: "mx", Term: 1}))
	_, err = o.Migrate(ctx, m, "mx", "local", "test")
	require.NoError(t, err)
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "mx", Term: 2})
	require.NoError(t, err)
	_, err = w.Append(ctx, payload(t, "m", 0))
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var labels []string
	for _, mf := range mfs {
		if mf.GetName() != "streamwal_appends_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "channel" {
					labels = append(labels, lp.GetValue())
				}
			}
		}
	}
	require.Equal(t, []string{"mx"}, labels)
}

// A Config whose WAL options do not validate is ErrInvalidConfig, and the
// adaptor's reason stays visible.
func TestConfigInvalidWAL(t *testing.T) {
	e := newEnv(t, "memory")
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe("memory")
	require.NoError(t, err)
	err = chainwal.Config{Store: e.store, Openers: entries, Default: d, WAL: adaptor.Options{TimeTickInterval: -1}}.Validate()
	errmarktest.Is(t, err, chainwal.ErrInvalidConfig, adaptor.ErrInvalidOptions)
}
