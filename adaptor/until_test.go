package adaptor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// drain receives until s ends and returns what it delivered.
func drain(t *testing.T, s walimpls.Scanner) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return out
			}
			out = append(out, m)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "the scanner did not end; %d delivered", len(out))
		}
	}
}

// TestUntilReleasesASealedLog checks ReadOption.Until: a reader of a log
// whose writer was fenced before its last appends were covered by a
// watermark delivers them all, in timetick order, up to Until and nothing
// after it, and ends with a nil error.
func TestUntilReleasesASealedLog(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	c.SetFencing(false) // so that a zombie can store past the end
	w := openWAL(t, memOpener(t, c, memory.Config{}), "until", 1, Options{TimeTickInterval: time.Hour})
	var acked []AppendResult
	for i := range 10 {
		r, err := w.Append(ctx, payload(i, 10))
		require.NoError(t, err)
		acked = append(acked, r)
	}
	// The seal: an open at term 2 fences the writer (here, a raw one: the
	// backend cannot fence, so nothing stops a zombie), and the end is read.
	sealer, err := memOpener(t, c, memory.Config{}).Open(ctx, walimpls.Channel{Name: "until", Term: 2})
	require.NoError(t, err)
	defer sealer.Close()
	end, err := sealer.Last(ctx)
	require.NoError(t, err)
	require.True(t, acked[9].ID.LTE(end))
	// A zombie stores more after the end, with a later watermark.
	zombie, err := w.Append(ctx, payload(99, 10))
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))

	ro := openWAL(t, memOpener(t, c, memory.Config{}), "until", 0, Options{ReadOnly: true})
	for _, batches := range []bool{false, true} {
		var got []message.Immutable
		if batches {
			bs, err := ro.ReadBatches(ctx, ReadOption{Until: end})
			require.NoError(t, err)
			for b := range bs.Batches() {
				got = append(got, b...)
			}
			require.NoError(t, bs.Error())
		} else {
			s, err := ro.Read(ctx, ReadOption{Until: end})
			require.NoError(t, err)
			got = drain(t, s)
			require.NoError(t, s.Error())
		}
		require.Len(t, got, len(acked), "batches %v", batches)
		for i, m := range got {
			require.Equal(t, acked[i].ID, m.ID())
			tt, _ := m.TimeTick()
			require.Equal(t, acked[i].TimeTick, tt)
			require.False(t, m.ID().EQ(zombie.ID))
		}
		// Resuming from the last one's checkpoint delivers nothing more.
		cp, err := cursor.CheckpointOf(got[len(got)-1])
		require.NoError(t, err)
		s, err := ro.Read(ctx, ReadOption{DeliverPolicy: cursor.After(cp), Until: end})
		require.NoError(t, err)
		require.Empty(t, drain(t, s))
		require.NoError(t, s.Error())
	}
	// From the middle, after the end, and Latest.
	s, err := ro.Read(ctx, ReadOption{DeliverPolicy: cursor.StartFrom(acked[4].ID), Until: end})
	require.NoError(t, err)
	require.Len(t, drain(t, s), 6)
	for _, p := range []cursor.Policy{cursor.StartAfter(end), cursor.StartFrom(zombie.ID), cursor.Latest()} {
		s, err := ro.Read(ctx, ReadOption{DeliverPolicy: p, Until: end})
		require.NoError(t, err)
		require.Empty(t, drain(t, s), "%v", p)
		require.NoError(t, s.Error())
	}
}

// TestTimeTickFloor checks that a writer given a floor gives timeticks
// above it, its first watermark included.
func TestTimeTickFloor(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	const floor = uint64(1) << 62
	w := openWAL(t, memOpener(t, c, memory.Config{}), "floor", 1, Options{TimeTickInterval: time.Hour, TimeTickFloor: floor})
	r, err := w.Append(ctx, payload(0, 10))
	require.NoError(t, err)
	require.Greater(t, r.TimeTick, floor)
	require.NoError(t, w.Sync(ctx))
	s, err := w.Read(ctx, ReadOption{Filter: Filter{Kinds: []message.Kind{message.KindTimeTick, message.KindData}}})
	require.NoError(t, err)
	defer s.Close()
	for _, m := range recvN(t, s, 3) {
		tt, _ := m.TimeTick()
		require.Greater(t, tt, floor, "%v", m.Kind())
	}
	// A reopen without the floor recovers above it from the log.
	require.NoError(t, w.Close())
	w2 := openWAL(t, memOpener(t, c, memory.Config{}), "floor", 2, Options{TimeTickInterval: time.Hour})
	r2, err := w2.Append(ctx, payload(1, 10))
	require.NoError(t, err)
	require.Greater(t, r2.TimeTick, r.TimeTick)
}
