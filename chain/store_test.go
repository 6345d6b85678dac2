package chain_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/walimpls"
)

// TestStoreMigrations walks a channel through two hops and half of a
// third, retrying each step as a finisher that found it half-done would.
func TestStoreMigrations(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx, s := testCtx(t), newStore(open())
		_, err := s.Get(ctx, "orders")
		errmarktest.Is(t, err, chain.ErrNotFound)
		errmarktest.Is(t, err, meta.ErrNotFound)

		c, err := s.Create(ctx, "orders", local, 1)
		require.NoError(t, err)
		require.Len(t, c.Segments, 1)
		_, err = s.Create(ctx, "orders", kafka("orders"), 1)
		errmarktest.Is(t, err, chain.ErrExists)

		// Step 1, and its retry.
		req := chain.MigrationRequest{Segment: 0, Target: kafka("orders-s1"), Term: 4, By: "walctl@ops-1"}
		c, err = s.BeginMigration(ctx, "orders", req)
		require.NoError(t, err)
		require.NotNil(t, c.Pending)
		require.Equal(t, int64(4), c.Pending.Term)
		again, err := s.BeginMigration(ctx, "orders", req)
		require.NoError(t, err)
		require.Equal(t, c, again, "asking again for the pending migration changes nothing")

		// Step 3 (step 2 is the driver's fencing open), and a late finisher
		// that read another end: the first seal stands.
		c, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 4, End: "17", TimeTick: 100})
		require.NoError(t, err)
		require.Nil(t, c.Pending)
		require.Len(t, c.Segments, 2)
		require.Equal(t, chain.Seal{Term: 4, End: "17", TimeTick: 100, At: c.Segments[0].Seal.At}, *c.Segments[0].Seal)
		require.Equal(t, uint64(1), c.Last().Index)
		require.True(t, c.Last().Backend.Equal(kafka("orders-s1")))
		require.Equal(t, int64(4), c.Last().FirstTerm)
		late, err := s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 4, End: "18", TimeTick: 101})
		require.NoError(t, err)
		require.Equal(t, c, late)

		// The second hop.
		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: 1, Target: pulsar("orders-s2"), Term: 9, By: "coordinator"})
		require.NoError(t, err)
		c, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: 1, Term: 9, End: "3", TimeTick: 250})
		require.NoError(t, err)

		// Back to local, on a channel of its own.
		back := chain.Backend{Name: "local", Kind: "local", Channel: "orders-s3"}
		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: 2, Target: local, Term: 12, By: "walctl@ops-1"})
		errmarktest.Is(t, err, chain.ErrInvalid)
		c, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: 2, Target: back, Term: 12, By: "walctl@ops-1"})
		require.NoError(t, err)

		// Another process reads what this one wrote.
		got, err := newStore(open()).Get(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, c, got)
		require.Len(t, got.Segments, 3)
		for i, p := range []string{"17", "s1/3", "s2/1:0"} {
			pos, err := cursor.ParsePosition(p)
			require.NoError(t, err)
			seg, err := got.Locate(pos)
			require.NoError(t, err)
			require.Equal(t, uint64(i), seg.Index)
		}
	})
}

func TestStoreRefusals(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx, s := testCtx(t), newStore(open())
		_, err := s.BeginMigration(ctx, "orders", chain.MigrationRequest{Target: kafka("orders-s1"), Term: 4, By: "op"})
		errmarktest.Is(t, err, chain.ErrNotFound)
		_, err = s.Get(ctx, "../orders")
		errmarktest.Is(t, err, chain.ErrInvalid)
		_, err = s.Create(ctx, "orders", local, -1)
		errmarktest.Is(t, err, chain.ErrInvalid)
		_, err = s.Create(ctx, "orders", local, 1)
		require.NoError(t, err)
		before, err := s.Get(ctx, "orders")
		require.NoError(t, err)

		refusals := []struct {
			name string
			req  chain.MigrationRequest
			is   error
			want string
		}{
			{"another segment", chain.MigrationRequest{Segment: 1, Target: kafka("orders-s1"), Term: 4, By: "op"}, chain.ErrSegmentMismatch, "the last segment is 0 on local/orders, not 1"},
			{"the current backend", chain.MigrationRequest{Target: chain.Backend{Name: "local", Kind: "local", Channel: "orders-s1"}, Term: 4, By: "op"}, chain.ErrSameBackend, "is on local/orders already"},
			{"a stale term", chain.MigrationRequest{Target: kafka("orders-s1"), Term: 1, By: "op"}, chain.ErrStaleTerm, "take a new term"},
			{"an invalid target", chain.MigrationRequest{Target: chain.Backend{Name: "kafka", Kind: "kafka", Channel: "a b"}, Term: 4, By: "op"}, chain.ErrInvalid, "channel name"},
			{"no requester", chain.MigrationRequest{Target: kafka("orders-s1"), Term: 4}, chain.ErrInvalid, "requester"},
		}
		for _, r := range refusals {
			_, err := s.BeginMigration(ctx, "orders", r.req)
			errmarktest.Is(t, err, r.is)
			require.Contains(t, err.Error(), r.want, r.name)
		}

		_, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 4, End: "17", TimeTick: 100})
		errmarktest.Is(t, err, chain.ErrNoMigration)

		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Target: kafka("orders-s1"), Term: 4, By: "op"})
		require.NoError(t, err)
		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Target: pulsar("orders-s1"), Term: 5, By: "op"})
		errmarktest.Is(t, err, chain.ErrMigrationPending)
		require.Contains(t, err.Error(), "migration to kafka/orders-s1 at term 4, requested by \"op\"")

		sealRefusals := []struct {
			name string
			req  chain.SealRequest
			is   error
		}{
			{"another term", chain.SealRequest{Segment: 0, Term: 5, End: "17", TimeTick: 100}, chain.ErrMigrationMismatch},
			{"another segment", chain.SealRequest{Segment: 1, Term: 4, End: "17", TimeTick: 100}, chain.ErrSegmentMismatch},
			{"a corrupt end", chain.SealRequest{Segment: 0, Term: 4, End: "1 7", TimeTick: 100}, message.ErrCorruptID},
			{"an end without timetick", chain.SealRequest{Segment: 0, Term: 4, End: "17"}, chain.ErrInvalid},
		}
		for _, r := range sealRefusals {
			_, err := s.Seal(ctx, "orders", r.req)
			errmarktest.Is(t, err, r.is)
		}
		c, err := s.Get(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, before.Segments, c.Segments, "no refusal changed the segments")
		require.NotNil(t, c.Pending)
	})
}

// TestStoreChecksTheTargetAgainBeforeTheSeal: a target the backend check
// refuses by the time of the seal is not written into the chain.
func TestStoreChecksTheTargetAgainBeforeTheSeal(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx := testCtx(t)
		refuse := errors.New("placeholder broker address")
		var checked []chain.Backend
		var fail bool
		s := chain.NewStore(open(), chain.Options{CheckBackend: func(_ context.Context, b chain.Backend) error {
			checked = append(checked, b)
			if fail {
				return refuse
			}
			return nil
		}})
		_, err := s.Create(ctx, "orders", local, 1)
		require.NoError(t, err)
		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Target: kafka("orders-s1"), Term: 4, By: "op"})
		require.NoError(t, err)
		fail = true
		_, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 4, End: "17", TimeTick: 100})
		errmarktest.Is(t, err, refuse)
		require.Len(t, checked, 2)
		require.True(t, checked[1].Equal(kafka("orders-s1")), "the recorded target is checked, not a configuration")
		c, err := s.Get(ctx, "orders")
		require.NoError(t, err)
		require.Len(t, c.Segments, 1)
		require.NotNil(t, c.Pending)
	})
}

func TestStoreCancel(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx, s := testCtx(t), newStore(open())
		_, err := s.Create(ctx, "orders", local, 1)
		require.NoError(t, err)
		_, err = s.CancelMigration(ctx, "orders", 0, 4)
		errmarktest.Is(t, err, chain.ErrNoMigration)

		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Target: kafka("orders-s1"), Term: 4, By: "op"})
		require.NoError(t, err)
		_, err = s.CancelMigration(ctx, "orders", 0, 5)
		errmarktest.Is(t, err, chain.ErrMigrationMismatch)
		c, err := s.CancelMigration(ctx, "orders", 0, 4)
		require.NoError(t, err)
		require.Nil(t, c.Pending)
		require.Len(t, c.Segments, 1)
		_, err = s.CancelMigration(ctx, "orders", 0, 4)
		errmarktest.Is(t, err, chain.ErrNoMigration)
		_, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 4, End: "17", TimeTick: 100})
		errmarktest.Is(t, err, chain.ErrNoMigration)

		// Another one, at a new term, goes through; then it is too late.
		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Target: pulsar("orders-s1"), Term: 5, By: "op"})
		require.NoError(t, err)
		_, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 5, End: "17", TimeTick: 100})
		require.NoError(t, err)
		_, err = s.CancelMigration(ctx, "orders", 0, 5)
		errmarktest.Is(t, err, chain.ErrSegmentMismatch)
		require.Contains(t, err.Error(), "too late to cancel; migrate again to undo it")
	})
}

func TestStoreDropFront(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx, s := testCtx(t), newStore(open())
		_, err := s.Create(ctx, "orders", local, 1)
		require.NoError(t, err)
		for i, hop := range []struct {
			to   chain.Backend
			term int64
		}{{kafka("orders-s1"), 4}, {pulsar("orders-s2"), 9}} {
			_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: uint64(i), Target: hop.to, Term: hop.term, By: "op"})
			require.NoError(t, err)
			_, err = s.Seal(ctx, "orders", chain.SealRequest{Segment: uint64(i), Term: hop.term, End: "7", TimeTick: uint64(100 * (i + 1))})
			require.NoError(t, err)
		}

		_, err = s.DropFront(ctx, "orders", 2, 3)
		errmarktest.Is(t, err, chain.ErrInvalid)
		_, err = s.DropFront(ctx, "orders", 1, 1)
		errmarktest.Is(t, err, chain.ErrSegmentMismatch)
		c, err := s.DropFront(ctx, "orders", 2, 2)
		require.NoError(t, err)
		require.Equal(t, uint64(2), c.First())
		require.Len(t, c.Segments, 1)
		again, err := s.DropFront(ctx, "orders", 2, 1)
		require.NoError(t, err)
		require.Equal(t, c, again, "dropped already")

		got, err := s.Get(ctx, "orders")
		require.NoError(t, err)
		for _, p := range []string{"7", "s1/7"} {
			pos, err := cursor.ParsePosition(p)
			require.NoError(t, err)
			_, err = got.Locate(pos)
			errmarktest.Is(t, err, walimpls.ErrPositionGone)
		}
		_, err = got.Locate(cursor.Position{Segment: 2, ID: "1:0"})
		require.NoError(t, err)

		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: 0, Target: local, Term: 12, By: "op"})
		errmarktest.Is(t, err, chain.ErrSegmentMismatch)
		require.Contains(t, err.Error(), "that segment was pruned")
		_, err = s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: 2, Target: local, Term: 12, By: "op"})
		require.NoError(t, err, "segment 0's backend channel may be used again once it is dropped")
	})
}

// TestStoreKeepsWhatItCannotRead: a chain of a newer format, or a corrupt
// one, is reported and never overwritten.
func TestStoreKeepsWhatItCannotRead(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx, kv := testCtx(t), open()
		s := newStore(kv)
		for name, value := range map[string]string{
			"newer":   `{"v":2,"segments":"elsewhere"}`,
			"corrupt": `{"v":1,"channel":"corrupt","segments":[]}`,
		} {
			_, err := kv.Put(ctx, chain.Key(name), []byte(value), meta.Absent)
			require.NoError(t, err)
			_, err = s.Get(ctx, name)
			errmarktest.Is(t, err, meta.ErrCorrupt)
			if name == "newer" {
				errmarktest.Is(t, err, chain.ErrNewerFormat)
			} else {
				errmarktest.IsNot(t, err, chain.ErrNewerFormat)
				errmarktest.Is(t, err, chain.ErrInvalid) // a chain of no segments
			}
			_, err = s.BeginMigration(ctx, name, chain.MigrationRequest{Target: kafka(name + "-s1"), Term: 4, By: "op"})
			errmarktest.Is(t, err, meta.ErrCorrupt)
			_, err = s.DropFront(ctx, name, 0, 0)
			errmarktest.Is(t, err, meta.ErrCorrupt)
			_, err = s.Create(ctx, name, local, 1)
			errmarktest.Is(t, err, chain.ErrExists)
			got, err := kv.Get(ctx, chain.Key(name))
			require.NoError(t, err)
			require.Equal(t, value, string(got.Value))
		}
	})
}

// TestStoreListAndRemove checks that List sees every chain and that Remove
// removes one only while the caller's last segment is still the last.
func TestStoreListAndRemove(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx, s := testCtx(t), newStore(open())
		none, err := s.List(ctx)
		require.NoError(t, err)
		require.Empty(t, none)
		for _, ch := range []string{"b", "a"} {
			_, err := s.Create(ctx, ch, local, 1)
			require.NoError(t, err)
		}
		_, err = s.BeginMigration(ctx, "a", chain.MigrationRequest{Segment: 0, Target: kafka("a-s1"), Term: 2, By: "t"})
		require.NoError(t, err)
		_, err = s.Seal(ctx, "a", chain.SealRequest{Segment: 0, Term: 2, End: "4", TimeTick: 9})
		require.NoError(t, err)
		all, err := s.List(ctx)
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, "a", all[0].Channel)
		require.Len(t, all[0].Segments, 2)

		err = s.Remove(ctx, "a", 0)
		errmarktest.Is(t, err, chain.ErrSegmentMismatch)
		require.NoError(t, s.Remove(ctx, "a", 1))
		require.NoError(t, s.Remove(ctx, "a", 1), "removing what is gone is not an error")
		_, err = s.Get(ctx, "a")
		errmarktest.Is(t, err, chain.ErrNotFound)
		all, err = s.List(ctx)
		require.NoError(t, err)
		require.Len(t, all, 1)
	})
}
