package chainwal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/walimpls"
)

// TestPoolPrunerLearnsSegments: the pool's pruner, given a pchannel's
// chain WAL, truncates across segments: once every vchannel's checkpoint
// lies in a later segment, the earlier one's data is deleted on its
// backend and it leaves the chain; consumers resume where they were. The
// steps it takes are seen by AfterStep.
func TestPoolPrunerLearnsSegments(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, "memory", "local")
	var steps []chainwal.Step
	entries := chainread.LookupFunc(e.b.Lookup)
	d, err := entries.Describe("memory")
	require.NoError(t, err)
	o, err := chainwal.New(chainwal.Config{Store: e.store, Openers: entries, Default: d, Describe: entries.Describe,
		WAL:       adaptor.Options{TimeTickInterval: 20 * time.Millisecond},
		AfterStep: func(s chainwal.Step, _ string) { steps = append(steps, s) }})
	require.NoError(t, err)
	m := e.manager(o)
	p, err := pool.Open(ctx, e.kv, pool.Backend{Name: "memory", Chained: true}, pool.Config{Size: 1, Prefix: "pc-"}, pool.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	_, err = p.Allocate(ctx, "v1", "v2")
	require.NoError(t, err)
	require.NoError(t, m.Open(ctx, adaptor.Channel{Name: "pc-0", Term: 1}))

	var ids []message.ID
	write := func(term int64, n int) {
		w, err := m.GetAvailableWAL(adaptor.Channel{Name: "pc-0", Term: term})
		require.NoError(t, err)
		for i := range n {
			for _, v := range []string{"v1", "v2"} {
				msg, err := message.New([]byte(fmt.Sprintf("%s-%d", v, len(ids))), nil)
				require.NoError(t, err)
				r, err := w.Append(ctx, msg.WithVChannel(v))
				require.NoError(t, err, "append %d", i)
				ids = append(ids, r.ID)
			}
		}
		require.NoError(t, w.Sync(ctx))
	}
	write(1, 5)
	_, err = o.Migrate(ctx, m, "pc-0", "local", "test")
	require.NoError(t, err)
	require.Equal(t, []chainwal.Step{chainwal.StepFenced, chainwal.StepSealed, chainwal.StepOpened}, steps)
	write(2, 5)
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "pc-0", Term: 2})
	require.NoError(t, err)

	// Both consumers checkpoint in segment 1.
	s, err := w.Read(ctx, adaptor.ReadOption{})
	require.NoError(t, err)
	got := recv(t, s, 14)
	require.NoError(t, s.Close())
	for _, i := range []int{12, 13} {
		cp, err := cursor.CheckpointOf(got[i])
		require.NoError(t, err)
		require.NoError(t, p.SaveCheckpoint(ctx, got[i].VChannel(), 1, cp))
	}
	pr, err := pool.NewPruner(p, func(pc string) (adaptor.WAL, bool) {
		w, err := m.GetAvailableWAL(adaptor.Channel{Name: pc, Term: 2})
		return w, err == nil
	}, time.Hour)
	require.NoError(t, err)
	defer pr.Close()
	res, err := pr.PruneOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)

	c, err := e.store.Get(ctx, "pc-0")
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.First(), "segment 0 is not pruned: %+v", res[0])
	require.Contains(t, steps, chainwal.StepPruneDeleted)
	_, err = e.b.Entry("memory").Open(ctx, walimpls.Channel{Name: "pc-0", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel)

	// Each consumer resumes at its checkpoint.
	for _, v := range []string{"v1", "v2"} {
		text, _, err := p.Checkpoint(ctx, v)
		require.NoError(t, err)
		cp, err := w.ParseCheckpoint(text)
		require.NoError(t, err)
		s, err := w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.After(cp), Filter: adaptor.Filter{VChannels: []string{v}}})
		require.NoError(t, err)
		rest := recv(t, s, 3)
		require.NoError(t, s.Close())
		require.Equal(t, v, rest[0].VChannel())
	}
}
