package vchannel

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// The shared scanner starts at the lowest position and delivers above the
// lowest timetick, even when they come from different checkpoints; any
// consumer from the start makes it start from the start.
func TestEarliest(t *testing.T) {
	cp := func(seq int64, tt uint64) cursor.Checkpoint {
		return cursor.Checkpoint{Position: message.NewSeqID("memory", seq), TimeTick: tt}
	}
	consumers := func(cps ...cursor.Checkpoint) []Consumer {
		out := make([]Consumer, len(cps))
		for i, c := range cps {
			out[i] = Consumer{VChannel: "vc", After: c}
		}
		return out
	}
	for _, c := range []struct {
		name string
		in   []Consumer
		want cursor.Checkpoint
	}{
		{"one", consumers(cp(5, 50)), cp(5, 50)},
		{"ordered", consumers(cp(9, 90), cp(5, 50), cp(7, 70)), cp(5, 50)},
		{"position and timetick of different checkpoints", consumers(cp(5, 80), cp(9, 60)), cp(5, 60)},
		{"same position", consumers(cp(5, 80), cp(5, 60)), cp(5, 60)},
		{"from the start", consumers(cp(9, 90), cursor.Checkpoint{}, cp(5, 50)), cursor.Checkpoint{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := earliest(c.in)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
	_, err := earliest(consumers(cp(5, 50), cursor.Checkpoint{Position: message.NewSeqID("local", 3), TimeTick: 1}))
	require.ErrorIs(t, err, ErrInvalidReplay)
	require.True(t, errors.Is(err, message.ErrIncomparableID), "the cause is kept: %v", err)
}
