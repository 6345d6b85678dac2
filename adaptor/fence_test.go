package adaptor

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// TestFenceEnd checks the seal's fence-and-read on a backend that fences
// and on one that cannot: the writer of the lower term is fenced (or never
// acknowledged again), every acknowledged append lies at or before Last,
// the timetick covers them, and a reader with Until delivers exactly them.
func TestFenceEnd(t *testing.T) {
	for _, fencing := range []bool{true, false} {
		t.Run(map[bool]string{true: "fencing", false: "in-log"}[fencing], func(t *testing.T) {
			ctx := context.Background()
			c := memory.NewCluster()
			c.SetFencing(fencing)
			o := memOpener(t, c, memory.Config{})
			w := openWAL(t, o, "fence", 1, Options{TimeTickInterval: time.Hour})
			var acked []AppendResult
			for i := range 20 {
				r, err := w.Append(ctx, payload(i, 10))
				require.NoError(t, err)
				acked = append(acked, r)
			}
			end, err := FenceEnd(ctx, o, Channel{Name: "fence", Term: 2}, 0, Options{})
			require.NoError(t, err)
			require.False(t, end.Last.IsZero())
			require.True(t, acked[19].ID.LTE(end.Last))
			require.GreaterOrEqual(t, end.TimeTick, acked[19].TimeTick)

			// The writer of term 1 gets nothing acknowledged any more.
			_, err = w.Append(ctx, payload(99, 10))
			require.ErrorIs(t, err, walimpls.ErrFenced)

			// A reader up to Last delivers exactly what was acknowledged.
			rd := openWAL(t, o, "fence", 2, Options{ReadOnly: true})
			s, err := rd.Read(ctx, ReadOption{Until: end.Last})
			require.NoError(t, err)
			got := drain(t, s)
			require.NoError(t, s.Error())
			require.Len(t, got, len(acked))
			for i, m := range got {
				tt, _ := m.TimeTick()
				require.Equal(t, acked[i].TimeTick, tt)
			}

			// Fencing again at the same term is harmless; at a lower one the
			// caller is stale.
			again, err := FenceEnd(ctx, o, Channel{Name: "fence", Term: 2}, 0, Options{})
			require.NoError(t, err)
			require.GreaterOrEqual(t, again.TimeTick, end.TimeTick)
			if fencing {
				require.True(t, again.Last.EQ(end.Last), "a second fence at the term writes nothing")
			}
			_, err = FenceEnd(ctx, o, Channel{Name: "fence", Term: 1}, 0, Options{})
			require.ErrorIs(t, err, walimpls.ErrFenced)
		})
	}
}

// TestFenceEndOfNothing checks the floor: a log with no timetick above it
// delivers nothing, and its end keeps the floor.
func TestFenceEndOfNothing(t *testing.T) {
	ctx := context.Background()
	o := memOpener(t, memory.NewCluster(), memory.Config{})
	end, err := FenceEnd(ctx, o, Channel{Name: "empty", Term: 3}, 77, Options{})
	require.NoError(t, err)
	require.True(t, end.Last.IsZero())
	require.Equal(t, uint64(77), end.TimeTick)

	_, err = FenceEnd(ctx, o, Channel{Name: "empty", Term: 4}, 0, Options{ReadOnly: true})
	require.True(t, errors.Is(err, ErrInvalidOptions))
	_, err = FenceEnd(ctx, nil, Channel{Name: "empty", Term: 4}, 0, Options{})
	require.True(t, errors.Is(err, ErrInvalidOptions))
}
