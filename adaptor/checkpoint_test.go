package adaptor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func TestCheckpointRoundTripAndResume(t *testing.T) {
	c := memory.NewCluster()
	w := openWAL(t, memOpener(t, c, memory.Config{}), "cp", 1, Options{TimeTickInterval: time.Hour})
	ctx := context.Background()
	const n = 40
	for i := range n {
		m, _ := message.New(fmt.Appendf(nil, "m%02d", i), nil)
		_, err := w.Append(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, w.Sync(ctx))
	s, err := w.Read(ctx, ReadOption{})
	require.NoError(t, err)
	all := recvN(t, s, n)
	require.NoError(t, s.Close())

	var prev Checkpoint
	for i, m := range all {
		cp, err := CheckpointOf(m)
		require.NoError(t, err)
		require.True(t, prev.Before(cp), "checkpoints of delivered messages increase: %s then %s", prev, cp)
		prev = cp
		text := cp.Marshal()
		back, err := w.ParseCheckpoint(text)
		require.NoError(t, err)
		n, err := back.Compare(cp)
		require.NoError(t, err)
		require.Zerof(t, n, "%q round-trips to %s, want %s", text, back, cp)
		require.Equal(t, text, back.Marshal())
		if i%9 != 0 {
			continue
		}
		r, err := w.Read(ctx, ReadOption{DeliverPolicy: DeliverAfter(back)})
		require.NoError(t, err)
		rest := recvN(t, r, len(all)-i-1)
		for j, got := range rest {
			require.Equal(t, string(all[i+1+j].Payload()), string(got.Payload()), "resumed after message %d", i)
		}
		quietFor(t, r, 50*time.Millisecond)
		require.NoError(t, r.Close())
	}

	zero, err := w.ParseCheckpoint("")
	require.NoError(t, err)
	require.True(t, zero.IsZero())
	require.Empty(t, zero.Marshal())
	require.True(t, zero.Before(prev))
	r, err := w.Read(ctx, ReadOption{DeliverPolicy: DeliverAfter(zero)})
	require.NoError(t, err)
	require.Len(t, recvN(t, r, n), n, "the zero checkpoint reads everything")
	require.NoError(t, r.Close())

	for _, bad := range []string{"@", "12", "x@3", "0@3", "01@3", "+1@3", "12@", "12@x", "12@-1", " 12@3"} {
		_, err := w.ParseCheckpoint(bad)
		require.ErrorIsf(t, err, ErrCorruptCheckpoint, "%q", bad)
	}
	_, err = CheckpointOf(message.NewImmutable(message.Message{}, message.NewSeqID("memory", 1)))
	require.ErrorIs(t, err, ErrNoResumePosition)
}
