package chainwal_test

import (
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/walimpls"
)

// TestPrune: truncating into a later segment deletes the earlier
// segments' data on their backends and drops them from the chain; a
// checkpoint in a dropped segment is then ErrPositionGone, one in a kept
// segment still resumes, and Delete removes every segment and the chain.
func TestPrune(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory", "local", "kafka")
	o := e.opener("memory")
	m := e.manager(o)
	require.NoError(t, m.Open(ctx, adaptor.Channel{Name: "p", Term: 1}))
	var l log
	for i, to := range []string{"", "local", "kafka"} {
		if to != "" {
			_, err := o.Migrate(ctx, m, "p", to, "test")
			require.NoError(t, err)
		}
		w, err := m.GetAvailableWAL(adaptor.Channel{Name: "p", Term: int64(i + 1)})
		require.NoError(t, err)
		l.appendN(t, w, to, 10, 1)
	}
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "p", Term: 3})
	require.NoError(t, err)
	all := readAll(t, w, &l, cursor.All(), 0)
	cp0, err := cursor.CheckpointOf(all[3])
	require.NoError(t, err)
	cp1, err := cursor.CheckpointOf(all[13])
	require.NoError(t, err)

	// Truncate at the first message of segment 1: segment 0 goes.
	require.NoError(t, w.Truncate(ctx, all[10].ID()))
	c, err := e.store.Get(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.First())
	_, err = e.b.Entry("memory").Open(ctx, walimpls.Channel{Name: "p", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "segment 0's data was not deleted")

	gone, err := w.ParseCheckpoint(cp0.Marshal())
	require.NoError(t, err, "a checkpoint in a pruned segment still parses")
	_, err = w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.After(gone)})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
	readAll(t, w, &l, cursor.After(cp1), 14)
	readAll(t, w, &l, cursor.All(), 10)

	// A truncation in the last segment truncates its backend.
	require.NoError(t, w.Truncate(ctx, all[25].ID()))
	require.NoError(t, w.Truncate(ctx, all[5].ID()), "truncating what is pruned already does nothing")

	require.NoError(t, m.Delete(ctx, adaptor.Channel{Name: "p", Term: 4}))
	_, err = e.store.Get(ctx, "p")
	errmarktest.Is(t, err, chain.ErrNotFound)
	for _, seg := range []struct{ entry, name string }{{"local", "p-s1"}, {"kafka", "p-s2"}} {
		_, err = e.b.Entry(seg.entry).Open(ctx, walimpls.Channel{Name: seg.name, Mode: walimpls.ReadOnly})
		require.ErrorIs(t, err, walimpls.ErrNoChannel, "%s not deleted", seg.name)
	}
}

// TestConcurrentMigrations: migrations of one channel to different
// backends, requested at once: one wins, the others get a clear error,
// the chain never forks, and nothing acknowledged is lost.
func TestConcurrentMigrations(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory", "local", "kafka", "pulsar")
	o := e.opener("memory")
	m := e.manager(o)
	require.NoError(t, m.Open(ctx, adaptor.Channel{Name: "c", Term: 1}))
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "c", Term: 1})
	require.NoError(t, err)
	var l log
	l.appendN(t, w, "s0", 20, 2)
	targets := []string{"local", "kafka", "pulsar"}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, to := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each as its own process would: its own opener on the store.
			_, errs[i] = e.opener("memory").Migrate(ctx, m, "c", to, "op-"+to)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.Truef(t, errors.Is(err, chain.ErrMigrationPending) || errors.Is(err, chain.ErrStaleTerm) ||
			errors.Is(err, chain.ErrSegmentMismatch), "migration to %s: %v", targets[i], err)
	}
	require.GreaterOrEqual(t, won, 1)
	c, err := e.store.Get(ctx, "c")
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Nil(t, c.Pending)
	require.Len(t, c.Segments, 1+won, "one segment per migration that won, in one line")
	last := c.Last()
	w, err = m.GetAvailableWAL(adaptor.Channel{Name: "c", Term: last.FirstTerm})
	require.NoError(t, err)
	l.appendN(t, w, "after", 10, 1)
	readAll(t, w, &l, cursor.All(), 0)
}
