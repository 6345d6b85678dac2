package pool_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// walBackend is a backend the prune tests write through.
type walBackend struct {
	name   string
	opener func(t *testing.T) walimpls.Opener
}

var walBackends = []walBackend{
	{"memory", func(t *testing.T) walimpls.Opener {
		o, err := memory.New(context.Background(), memory.Config{Cluster: memory.NewCluster()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = o.Close() })
		return o
	}},
	{"local", func(t *testing.T) walimpls.Opener {
		s, err := local.New(context.Background(), local.Config{Dir: t.TempDir()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"kafka", func(t *testing.T) walimpls.Opener {
		o, _ := kafkaOpener(t)
		return o
	}},
}

func openWAL(t *testing.T, o walimpls.Opener, name string, term int64) adaptor.WAL {
	t.Helper()
	w, err := adaptor.Open(testCtx(t), o, adaptor.Channel{Name: name, Term: term},
		adaptor.Options{TimeTickInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// readVChannel reads n messages of vchannel from w after a checkpoint.
func readVChannel(t *testing.T, w adaptor.WAL, vchannel string, after cursor.Checkpoint, n int) []message.Immutable {
	t.Helper()
	ctx := testCtx(t)
	s, err := w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.After(after), Filter: adaptor.Filter{VChannels: []string{vchannel}}})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	var out []message.Immutable
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner of %s ended after %d of %d: %v", vchannel, len(out), n, s.Error())
			out = append(out, m)
		case <-ctx.Done():
			require.FailNowf(t, "watchdog", "%s: read %d of %d", vchannel, len(out), n)
		}
	}
	return out
}

// Checkpoints decide how far a pchannel is pruned: the earliest of its
// vchannels' checkpoints, refused while one is unknown; every vchannel
// then resumes from its own checkpoint losing nothing, and releasing the
// laggard lets the pruner go further.
func TestCheckpointsAndPruning(t *testing.T) {
	for _, b := range walBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := testCtx(t)
			stores := storeKinds[0].store(t) // bolt: the pool logic is store-independent, tested on both above
			o := b.opener(t)
			p := openPool(t, stores(), pool.Backend{Name: b.name, Opener: o}, pool.Config{Size: 2, Prefix: "prune-"}, pool.Options{})
			vcs := []string{"orders", "users", "carts", "items"}
			as, err := p.Allocate(ctx, vcs...)
			require.NoError(t, err)
			onPC0 := []string{}
			for _, a := range as {
				if a.PChannel == "prune-0" {
					onPC0 = append(onPC0, a.VChannel)
				}
			}
			require.Equal(t, []string{"orders", "carts"}, onPC0, "round robin")
			w := openWAL(t, o, "prune-0", 1)
			const perVC = 30
			var first message.ID
			for i := range perVC {
				for _, v := range onPC0 {
					m, _ := message.New([]byte(fmt.Sprintf("%s-%d", v, i)), nil)
					res, err := w.Append(ctx, m.WithVChannel(v))
					require.NoError(t, err)
					if first.IsZero() {
						first = res.ID
					}
				}
				// A watermark per round: resume positions (and so prune
				// targets) move with the rounds, not once at the end.
				require.NoError(t, w.Sync(ctx))
			}
			require.NoError(t, w.Sync(ctx))

			_, err = p.PruneTarget(ctx, "prune-0", w.ParseCheckpoint, pool.Activity{})
			require.ErrorIs(t, err, pool.ErrCheckpointUnknown, "no checkpoint yet")
			_, err = p.PruneTarget(ctx, "prune-9", w.ParseCheckpoint, pool.Activity{})
			require.ErrorIs(t, err, pool.ErrUnknownPChannel)

			// orders processed 20 messages, carts 5: carts holds the
			// pchannel back.
			progress := map[string]int{"orders": 20, "carts": 5}
			cps := map[string]cursor.Checkpoint{}
			for _, v := range []string{"orders", "carts"} { // orders first: carts is then still unknown
				n := progress[v]
				got := readVChannel(t, w, v, cursor.Checkpoint{}, n)
				cp, err := cursor.CheckpointOf(got[n-1])
				require.NoError(t, err)
				require.NoError(t, p.SaveCheckpoint(ctx, v, 1, cp))
				cps[v] = cp
				if v == "orders" {
					_, err := p.PruneTarget(ctx, "prune-0", w.ParseCheckpoint, pool.Activity{})
					require.ErrorIs(t, err, pool.ErrCheckpointUnknown)
					require.Contains(t, err.Error(), "carts")
				}
			}
			target, err := p.PruneTarget(ctx, "prune-0", w.ParseCheckpoint, pool.Activity{})
			require.NoError(t, err)
			t.Logf("first %s, checkpoints %v, target %+v", first, cps, target)
			require.Equal(t, cps["carts"].Position, target.Position, "the target is the laggard's checkpoint")
			require.Equal(t, "carts", target.HeldBy)

			pr, err := pool.NewPruner(p, func(pc string) (adaptor.WAL, bool) { return w, pc == "prune-0" }, time.Hour)
			require.NoError(t, err)
			res, err := pr.PruneOnce(ctx)
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.NoError(t, res[0].Err)
			require.Equal(t, cps["carts"].Position, res[0].Target.Position, "both have messages after their checkpoints")
			require.Equal(t, pool.Target{Position: cps["carts"].Position, Tail: res[0].Target.Tail, HeldBy: "carts", Held: 2}, res[0].Target)
			require.NoError(t, pr.Close())

			// Reading from the start is now refused; every vchannel resumes
			// from its checkpoint and gets exactly the rest.
			s, err := w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.StartFrom(first)})
			if err == nil {
				select {
				case m, ok := <-s.Chan():
					require.Falsef(t, ok, "a read from the pruned start delivered %s", m.ID())
					require.ErrorIs(t, s.Error(), walimpls.ErrPositionGone)
				case <-ctx.Done():
					require.FailNow(t, "watchdog")
				}
				_ = s.Close()
			} else {
				require.ErrorIs(t, err, walimpls.ErrPositionGone)
			}
			for v, done := range progress {
				text, term, err := p.Checkpoint(ctx, v)
				require.NoError(t, err)
				require.EqualValues(t, 1, term)
				cp, err := w.ParseCheckpoint(text)
				require.NoError(t, err)
				rest := readVChannel(t, w, v, cp, perVC-done)
				for i, m := range rest {
					require.Equal(t, fmt.Sprintf("%s-%d", v, done+i), string(m.Payload()))
				}
			}

			// The laggard released: the pchannel is pruned up to orders.
			require.NoError(t, p.Release(ctx, "carts"))
			target, err = p.PruneTarget(ctx, "prune-0", w.ParseCheckpoint, pool.Activity{})
			require.NoError(t, err)
			require.Equal(t, cps["orders"].Position, target.Position)
			require.NoError(t, w.Truncate(ctx, target.Position))
			rest := readVChannel(t, w, "orders", cps["orders"], perVC-20)
			require.Equal(t, "orders-20", string(rest[0].Payload()))

			// A pchannel without vchannels is not pruned.
			require.NoError(t, p.Release(ctx, "orders"))
			_, err = p.PruneTarget(ctx, "prune-0", w.ParseCheckpoint, pool.Activity{})
			require.ErrorIs(t, err, pool.ErrNoVChannels)
		})
	}
}

func TestCheckpointFencing(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		p := openPool(t, stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 1}, pool.Options{})
		_, err := p.Allocate(ctx, "v")
		require.NoError(t, err)
		cp := func(tt uint64) cursor.Checkpoint {
			return cursor.Checkpoint{Position: message.NewSeqID(memory.Name, int64(tt)), TimeTick: tt}
		}
		_, _, err = p.Checkpoint(ctx, "v")
		require.ErrorIs(t, err, pool.ErrCheckpointUnknown)
		require.NoError(t, p.SaveCheckpoint(ctx, "v", 3, cp(10)))
		require.NoError(t, p.SaveCheckpoint(ctx, "v", 3, cp(10)), "saving the same checkpoint again")
		require.ErrorIs(t, p.SaveCheckpoint(ctx, "v", 3, cp(9)), pool.ErrCheckpointBackwards)
		require.ErrorIs(t, p.SaveCheckpoint(ctx, "v", 2, cp(50)), pool.ErrStaleTerm)
		require.NoError(t, p.SaveCheckpoint(ctx, "v", 4, cp(5)), "a new term may start anywhere")
		text, term, err := p.Checkpoint(ctx, "v")
		require.NoError(t, err)
		require.EqualValues(t, 4, term)
		require.Equal(t, cp(5).Marshal(), text)
		require.ErrorIs(t, p.SaveCheckpoint(ctx, "nope", 4, cp(5)), pool.ErrNotAllocated)
		require.ErrorIs(t, p.SaveCheckpoint(ctx, "v", 4, cursor.Checkpoint{}), pool.ErrInvalidVChannel)

		// Released and allocated again: the old checkpoint is not its.
		require.NoError(t, p.Release(ctx, "v"))
		_, err = p.Allocate(ctx, "v")
		require.NoError(t, err)
		_, _, err = p.Checkpoint(ctx, "v")
		require.ErrorIs(t, err, pool.ErrCheckpointUnknown)
		require.NoError(t, p.SaveCheckpoint(ctx, "v", 1, cp(1)), "a term of the new allocation is not stale")
	})
}

func TestPrunerRunsAndStops(t *testing.T) {
	ctx := testCtx(t)
	o := walBackends[0].opener(t)
	stores := storeKinds[0].store(t)
	clock := clockwork.NewFakeClock()
	p := openPool(t, stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 1, Prefix: "run-"}, pool.Options{Clock: clock})
	_, err := p.Allocate(ctx, "v")
	require.NoError(t, err)
	w := openWAL(t, o, "run-0", 1)
	for i := range 10 {
		m, _ := message.New([]byte(fmt.Sprint(i)), nil)
		_, err := w.Append(ctx, m.WithVChannel("v"))
		require.NoError(t, err)
	}
	require.NoError(t, w.Sync(ctx))
	got := readVChannel(t, w, "v", cursor.Checkpoint{}, 10)
	cp, err := cursor.CheckpointOf(got[6])
	require.NoError(t, err)
	require.NoError(t, p.SaveCheckpoint(ctx, "v", 1, cp))

	truncated := make(chan struct{})
	wals := func(pc string) (adaptor.WAL, bool) { return &watchTruncate{WAL: w, done: truncated}, true }
	_, err = pool.NewPruner(p, wals, 0)
	require.ErrorIs(t, err, pool.ErrInvalidConfig)
	pr, err := pool.NewPruner(p, wals, time.Hour)
	require.NoError(t, err)
	pr.Start()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the pruner waits on its ticker")
	clock.Advance(time.Hour)
	select {
	case <-truncated:
	case <-ctx.Done():
		require.FailNow(t, "the pruner never truncated")
	}
	require.NoError(t, pr.Close())
	require.NoError(t, pr.Close(), "Close is idempotent")
	rest := readVChannel(t, w, "v", cp, 3)
	require.Equal(t, "7", string(rest[0].Payload()))
}

// watchTruncate signals its first successful Truncate.
type watchTruncate struct {
	adaptor.WAL
	done chan struct{}
}

func (w *watchTruncate) Truncate(ctx context.Context, upTo message.ID) error {
	err := w.WAL.Truncate(ctx, upTo)
	if err == nil {
		select {
		case <-w.done:
		default:
			close(w.done)
		}
	}
	return err
}
