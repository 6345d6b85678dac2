package chainwal_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
)

// TestRandomHistories runs seeded random histories of one channel across
// the five backends: appends, reads from the start and resumes from
// random checkpoints, migrations to a random other backend, plain moves
// (a new term on the same segment, by another process), migrations
// interrupted after their intent or their fence and finished by a later
// open, cancelled intents, and zombies (writers of an old term left
// open). After every step, every acknowledged append is delivered exactly
// once, in timetick order, with its ID; at the end no append is
// acknowledged past its segment's seal.
func TestRandomHistories(t *testing.T) {
	e := newEnv(t)
	for round := range 3 {
		seed := testseed.Seed(t)
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		channel := "rnd" + string(rune('a'+round))
		runHistory(t, e, rng, channel, 14)
	}
}

func runHistory(t *testing.T, e *env, rng *rand.Rand, channel string, steps int) {
	ctx := testCtx(t)
	kinds := []string{"memory", "local", "kafka", "pulsar", "s3"}
	first := kinds[rng.IntN(len(kinds))]
	o := e.opener(first)
	term := int64(1)
	w, err := o.Open(ctx, adaptor.Channel{Name: channel, Term: term})
	require.NoError(t, err)
	var zombies []adaptor.WAL
	defer func() {
		_ = w.Close()
		for _, z := range zombies {
			_ = z.Close()
		}
	}()
	var l log
	var delivered []message.Immutable
	reopen := func(how string) {
		term++
		next, err := e.opener(first).Open(ctx, adaptor.Channel{Name: channel, Term: term})
		require.NoError(t, err, how)
		if rng.IntN(3) == 0 {
			zombies = append(zombies, w) // left open: its appends must fail
		} else {
			require.NoError(t, w.Close())
		}
		w = next
	}
	for step := range steps {
		c, err := e.store.Get(ctx, channel)
		require.NoError(t, err)
		switch op := rng.IntN(8); op {
		case 0, 1, 2:
			l.appendN(t, w, channel+"/"+string(rune('A'+step)), 5+rng.IntN(20), 1+rng.IntN(3))
		case 3:
			delivered = readAll(t, w, &l, cursor.All(), 0)
			if len(delivered) > 0 {
				i := rng.IntN(len(delivered))
				cp, err := cursor.CheckpointOf(delivered[i])
				require.NoError(t, err)
				parsed, err := w.ParseCheckpoint(cp.Marshal())
				require.NoError(t, err)
				readAll(t, w, &l, cursor.After(parsed), i+1)
			}
		case 4, 5:
			to := otherThan(rng, kinds, c.Last().Backend.Name)
			_, err := o.BeginMigration(ctx, channel, to, term+1, "random")
			require.NoError(t, err)
			switch rng.IntN(3) {
			case 0: // interrupted after the fence: the next open fences again
				last := c.Last()
				_, err := adaptor.FenceEnd(ctx, e.b.Entry(last.Backend.Name), adaptor.Channel{Name: last.Backend.Channel, Term: term + 1}, 0, adaptor.Options{})
				require.NoError(t, err)
			case 1: // a cancel before the seal: the channel stays
				_, err := o.CancelMigration(ctx, channel)
				require.NoError(t, err)
			}
			reopen("migrate to " + to)
		case 6:
			reopen("move")
		case 7:
			for _, z := range zombies {
				_, err := z.Append(ctx, payload(t, "zombie", step))
				require.Error(t, err, "a zombie's append was acknowledged")
			}
		}
	}
	l.appendN(t, w, channel+"/end", 10, 2)
	readAll(t, w, &l, cursor.All(), 0)

	// No append is acknowledged past its segment's seal.
	c, err := e.store.Get(ctx, channel)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	for _, a := range l.sorted() {
		segIndex, bid, ok := cursor.SplitID(a.res.ID)
		require.True(t, ok, "%s is a chain id", a.res.ID)
		seg, ok := c.Segment(segIndex)
		require.True(t, ok)
		if seg.Seal == nil {
			continue
		}
		require.NotEmpty(t, seg.Seal.End, "an append acknowledged in segment %d, sealed empty", segIndex)
		o, err := chainread.LookupFunc(e.b.Lookup).Opener(seg.Backend)
		require.NoError(t, err)
		end, err := o.UnmarshalID(seg.Seal.End)
		require.NoError(t, err)
		require.Truef(t, bid.LTE(end), "append at %s acknowledged past segment %d's seal at %s", bid, segIndex, end)
		require.LessOrEqual(t, a.res.TimeTick, seg.Seal.TimeTick)
	}
	t.Logf("%s: %d appends over %d segments: %s", channel, len(l.acked), len(c.Segments), describe(c))
}

func otherThan(rng *rand.Rand, kinds []string, not string) string {
	others := slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == not })
	return others[rng.IntN(len(others))]
}

func describe(c chain.Chain) string {
	s := ""
	for _, seg := range c.Segments {
		if s != "" {
			s += " → "
		}
		s += seg.Backend.Name
	}
	return s
}
