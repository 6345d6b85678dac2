package chainread_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
)

// TestRandomChains builds random chains (1 to 4 segments on memory,
// local and a memory backend that cannot fence, random appends from
// concurrent writers, zombies writing after the seal where the backend
// lets them) and reads them from random starts: every acknowledged append
// after the start is delivered exactly once, in timetick order, no zombie
// ever, and a resume from any delivered message's checkpoint delivers
// exactly what follows it.
func TestRandomChains(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 23))
	names := []string{"memory", "local", "nofence", "memory2", "local2"}
	for round := range 6 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := testCtx(t)
			b := newBackends(t)
			name := names[rng.IntN(len(names))]
			bl := newChain(t, b, fmt.Sprintf("rnd%d", round), name)
			segments := 1 + rng.IntN(4)
			for s := range segments {
				bl.append(rng.IntN(60), 1+rng.IntN(3))
				if s == segments-1 {
					break
				}
				old, oldName := bl.w, name
				for name == oldName {
					name = names[rng.IntN(len(names))]
				}
				bl.migrate(name, int64(s+2))
				if oldName == "nofence" {
					for i := range rng.IntN(4) {
						m, _ := message.New(fmt.Appendf(nil, "zombie-%d", i), nil)
						_, err := old.Append(ctx, m)
						require.NoError(t, err, "nothing fences a writer of this backend")
					}
					require.NoError(t, old.Sync(ctx))
				}
			}
			require.NoError(t, bl.w.Sync(ctx))
			want := bl.sorted()
			r := bl.reader(t)

			var all []message.Immutable
			if rng.IntN(2) == 0 {
				s, err := r.Read(ctx, chainread.ReadOption{})
				require.NoError(t, err)
				all = recv(t, s, len(want))
				require.NoError(t, s.Close())
			} else {
				s, err := r.ReadBatches(ctx, chainread.ReadOption{})
				require.NoError(t, err)
				all = recvBatches(t, s, len(want))
				require.NoError(t, s.Close())
			}
			check(t, want, all)
			if len(want) == 0 {
				return
			}
			for range 3 {
				i := rng.IntN(len(want))
				cp, err := cursor.CheckpointOf(all[i])
				require.NoError(t, err)
				cp, err = cursor.ParseChainCheckpoint(cp.Marshal())
				require.NoError(t, err)
				s, err := r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.After(cp)})
				require.NoError(t, err)
				check(t, want[i+1:], recv(t, s, len(want)-i-1))
				require.NoError(t, s.Close())

				tt := want[i].res.TimeTick
				s, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.FromTimeTick(tt)})
				require.NoError(t, err)
				check(t, want[i:], recv(t, s, len(want)-i))
				require.NoError(t, s.Close())

				// From a delivered message's own position: it and what
				// follows it in the log, which in timetick order is every
				// later message of later segments and those of its own
				// stored after it.
				s, err = r.Read(ctx, chainread.ReadOption{DeliverPolicy: cursor.StartFrom(all[i].ID())})
				require.NoError(t, err)
				var from []acked
				for _, a := range want {
					if a.segment > want[i].segment || a.segment == want[i].segment && want[i].res.ID.LTE(a.res.ID) {
						from = append(from, a)
					}
				}
				check(t, from, recv(t, s, len(from)))
				require.NoError(t, s.Close())
			}
		})
	}
}
