package chainwal_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
)

// The chain's writer is its last segment's WAL, opened with Config.WAL:
// its hooks see the writer's first append, and the chain WAL (lent by a
// manager, here) carries the segment's open times, a migration's new
// segment's after it.
func TestWriterHooksAndOpenTimes(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory", "local")
	var firsts atomic.Int32
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe("memory")
	require.NoError(t, err)
	o, err := chainwal.New(chainwal.Config{Store: e.store, Openers: entries, Default: d, Describe: entries.Describe, FollowInterval: 10 * time.Millisecond,
		WAL: adaptor.Options{TimeTickInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			OnFirstAppend: func(time.Duration) { firsts.Inc() }}})
	require.NoError(t, err)
	m := e.manager(o)

	before := time.Now()
	require.NoError(t, m.Open(ctx, adaptor.Channel{Name: "hooks", Term: 1}))
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "hooks", Term: 1})
	require.NoError(t, err)
	t1, ok := adaptor.OpenTimesOf(w)
	require.True(t, ok, "the chain WAL hides its segment's open times")
	require.False(t, t1.Fenced.Before(before))
	require.False(t, t1.Ready.Before(t1.Fenced))
	var l log
	l.appendN(t, w, "a", 5, 1)
	require.EqualValues(t, 1, firsts.Load(), "one first append per writer")

	_, err = o.Migrate(ctx, m, "hooks", "local", "test")
	require.NoError(t, err)
	w, err = m.GetAvailableWAL(adaptor.Channel{Name: "hooks", Term: 2})
	require.NoError(t, err)
	t2, ok := adaptor.OpenTimesOf(w)
	require.True(t, ok)
	require.True(t, t2.Fenced.After(t1.Ready), "the new segment's open times are not its own")
	l.appendN(t, w, "b", 5, 1)
	require.EqualValues(t, 2, firsts.Load(), "the new segment's writer had no first append of its own")
}
