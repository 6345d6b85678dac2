package pool_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/pool"
)

// hotFirst is a strategy of an embedder's own: vchannels named "hot-*" go
// to the first pchannel, the others in turn to the rest. It records what
// it was shown.
type hotFirst struct {
	mu   sync.Mutex
	seen []pool.Placement
}

func (h *hotFirst) Place(pl pool.Placement) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pl.PChannels = slices.Clone(pl.PChannels) // the pool's, valid during the call only
	h.seen = append(h.seen, pl)
	if strings.HasPrefix(pl.VChannel, "hot-") {
		return pl.PChannels[0].Name, nil
	}
	rest := pl.PChannels[1:]
	return rest[pl.Turn%uint64(len(rest))].Name, nil
}

func TestCustomStrategy(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		backend := pool.Backend{Name: "memory"}
		cfg := pool.Config{Size: 3, Prefix: "cs-", Strategy: "hot-first"}
		h := &hotFirst{}
		opts := pool.Options{Placers: map[pool.Strategy]pool.Placer{"hot-first": h}}
		p := openPool(t, stores(), backend, cfg, opts)
		as, err := p.Allocate(ctx, "hot-a", "x", "y", "hot-b", "x", "z")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"hot-a": "cs-0", "x": "cs-2", "y": "cs-1", "hot-b": "cs-0", "z": "cs-1"}, allocations(t, as))

		// Once per new vchannel, in order, with the batch's placements so
		// far and the turn.
		require.Len(t, h.seen, 5)
		y := h.seen[2]
		require.Equal(t, "y", y.VChannel)
		require.EqualValues(t, 2, y.Turn)
		require.Equal(t, []pool.PChannelLoad{{Name: "cs-0", Added: 1}, {Name: "cs-1"}, {Name: "cs-2", Added: 1}}, y.PChannels)

		// The turn is persisted: another pool on the store goes on from it,
		// and sees the vchannels placed.
		h2 := &hotFirst{}
		p2 := openPool(t, stores(), backend, cfg, pool.Options{Placers: map[pool.Strategy]pool.Placer{"hot-first": h2}})
		more, err := p2.Allocate(ctx, "w", "x")
		require.NoError(t, err)
		require.Equal(t, "cs-2", more[0].PChannel, "turn 5")
		require.Equal(t, "cs-2", more[1].PChannel, "x keeps its pchannel: not placed again")
		require.Len(t, h2.seen, 1)
		require.Equal(t, []pool.PChannelLoad{{Name: "cs-0", VChannels: 2}, {Name: "cs-1", VChannels: 2}, {Name: "cs-2", VChannels: 1}}, h2.seen[0].PChannels)

		// Without its Placer the stored pool does not open; with another
		// strategy it does, and the built-in goes on from the same turn.
		_, err = pool.Open(ctx, stores(), backend, cfg, pool.Options{})
		require.ErrorIs(t, err, pool.ErrInvalidConfig)
		require.Contains(t, err.Error(), `strategy "hot-first"`)
		rr := openPool(t, stores(), backend, pool.Config{Size: 3, Prefix: "cs-"}, pool.Options{})
		next, err := rr.Allocate(ctx, "v")
		require.NoError(t, err)
		require.Equal(t, "cs-0", next[0].PChannel, "round robin at turn 6")
	})
}

// A strategy that answers a pchannel not in the pool, or an error, fails
// the batch: nothing of it is allocated, and the turn is not used up.
func TestStrategyOutsideThePool(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		errFull := errors.New("full")
		rogue := pool.PlacerFunc(func(pl pool.Placement) (string, error) {
			switch pl.VChannel {
			case "astray":
				return "cs-7", nil
			case "refused":
				return "", errFull
			}
			return pl.PChannels[pl.Turn%uint64(len(pl.PChannels))].Name, nil
		})
		p := openPool(t, stores(), pool.Backend{Name: "memory"}, pool.Config{Size: 3, Prefix: "cs-", Strategy: "rogue"},
			pool.Options{Placers: map[pool.Strategy]pool.Placer{"rogue": rogue}})

		_, err := p.Allocate(ctx, "a", "astray", "c")
		require.ErrorIs(t, err, pool.ErrUnknownPChannel)
		require.Contains(t, err.Error(), `strategy "rogue" placed vchannel "astray" on "cs-7", not a pchannel of the pool`)
		_, err = p.Allocate(ctx, "a", "refused")
		require.ErrorIs(t, err, errFull, "the strategy's error is the cause")
		require.Contains(t, err.Error(), `strategy "rogue": place vchannel "refused"`)
		for _, v := range []string{"a", "astray", "c", "refused"} {
			_, err := p.Lookup(ctx, v)
			require.ErrorIsf(t, err, pool.ErrNotAllocated, "%s", v)
		}
		require.Empty(t, p.VChannels("cs-0"))
		as, err := p.Allocate(ctx, "a", "b")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"a": "cs-0", "b": "cs-1"}, allocations(t, as), "the turn starts at 0")
	})
}

func TestStrategyNames(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := testCtx(t)
		s := stores()
		backend := pool.Backend{Name: "memory"}
		require.NoError(t, pool.Config{Strategy: "mine"}.Validate(), "any name: Open knows the Placers")
		require.ErrorIs(t, pool.Config{Strategy: "mine too"}.Validate(), pool.ErrInvalidConfig)

		_, err := pool.Open(ctx, s, backend, pool.Config{Strategy: "mine"},
			pool.Options{Placers: map[pool.Strategy]pool.Placer{"other": pool.PlacerFunc(nil)}})
		require.ErrorIs(t, err, pool.ErrInvalidConfig)
		require.Contains(t, err.Error(), `strategy "mine" (round-robin, least-loaded, other;`)
		_, err = pool.Open(ctx, s, backend, pool.Config{},
			pool.Options{Placers: map[pool.Strategy]pool.Placer{pool.RoundRobin: pool.PlacerFunc(nil)}})
		require.ErrorIs(t, err, pool.ErrInvalidConfig, "a built-in is not replaced")
		kvs, _, err := s.List(ctx, "pool/")
		require.NoError(t, err)
		require.Empty(t, kvs, "a refused strategy records nothing")
	})
}
