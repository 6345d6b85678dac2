package s3

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tail search finds the first slot without data, also when pipelined
// flushes landed past a hole (within the window), whatever the hint says.
func TestTailSearchFindsTheFirstHole(t *testing.T) {
	st := newTestStore(t)
	o := newOpener(t, st.config(nil))
	ctx := context.Background()
	put := func(name string, slot uint64, kind string) {
		t.Helper()
		_, err := o.st.put(ctx, reqPut, o.keys.slot(name, 0, slot), []byte("x"), map[string]string{metaKind: kind}, putCond{createOnly: true})
		require.NoError(t, err)
	}
	e := epochEntry{Epoch: 0, Window: 4}
	for i, tc := range []struct {
		data  []uint64
		fence int64 // -1: none
		hint  int64 // -1: none
		want  uint64
		state slotState
	}{
		{data: nil, fence: -1, hint: -1, want: 0},
		{data: []uint64{0, 1, 2}, fence: -1, hint: -1, want: 3},
		{data: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12}, fence: -1, hint: -1, want: 10},
		{data: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12}, fence: -1, hint: 5, want: 10},
		{data: []uint64{0, 1, 2, 3, 4, 5, 6, 8, 9}, fence: -1, hint: -1, want: 7},
		{data: []uint64{0, 1, 2, 3, 4, 5, 6, 8, 9}, fence: 7, hint: 2, want: 7, state: slotFence},
		{data: []uint64{0, 2, 3}, fence: -1, hint: -1, want: 1},
		{data: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 24}, fence: -1, hint: 8, want: 23},
	} {
		name := fmt.Sprintf("tail-%d", i)
		for _, s := range tc.data {
			put(name, s, "data")
		}
		if tc.fence >= 0 {
			put(name, uint64(tc.fence), "fence")
		}
		if tc.hint >= 0 {
			_, err := o.st.put(ctx, reqPut, o.keys.hint(name, 0), []byte(fmt.Sprint(tc.hint)), nil, putCond{})
			require.NoError(t, err)
		}
		got, info, err := o.firstClosed(ctx, name, e, 0)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "data %v fence %d hint %d", tc.data, tc.fence, tc.hint)
		require.Equal(t, tc.state, info.state)
	}
}
