package reorder_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/utility/reorder"
)

func item(tt uint64, key string, size int) reorder.Item[string] {
	return reorder.Item[string]{TimeTick: tt, Key: key, Size: size, Value: key}
}

func values(items []reorder.Item[string]) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Value
	}
	return out
}

func TestReleaseInOrderAtWatermark(t *testing.T) {
	b := reorder.New[string](0)
	for _, it := range []reorder.Item[string]{item(5, "e", 1), item(2, "b", 1), item(9, "i", 1), item(3, "c", 1), item(3, "c2", 1)} {
		added, err := b.Push(it)
		require.NoError(t, err)
		require.True(t, added)
	}
	require.Empty(t, b.PopUpTo(1))
	require.Equal(t, []string{"b", "c", "c2"}, values(b.PopUpTo(3)))
	require.Equal(t, []string{"e"}, values(b.PopUpTo(8)))
	tt, ok := b.MinTimeTick()
	require.True(t, ok)
	require.EqualValues(t, 9, tt)
	require.Equal(t, []string{"i"}, values(b.PopUpTo(100)))
	require.Zero(t, b.Len())
	require.Zero(t, b.Bytes())
}

func TestDuplicatesDropped(t *testing.T) {
	b := reorder.New[string](0)
	added, _ := b.Push(item(1, "k", 4))
	require.True(t, added)
	added, _ = b.Push(item(1, "k", 4))
	require.False(t, added)
	require.Equal(t, 4, b.Bytes())
	require.Len(t, b.PopUpTo(1), 1)
	added, _ = b.Push(item(1, "k", 4))
	require.True(t, added, "a key may come again once released")
}

func TestBudget(t *testing.T) {
	b := reorder.New[string](10)
	_, err := b.Push(item(1, "big", 25))
	require.NoError(t, err, "an empty buffer takes one item of any size")
	_, err = b.Push(item(2, "x", 1))
	require.ErrorIs(t, err, reorder.ErrFull)
	b.PopUpTo(1)
	for i := range 10 {
		_, err := b.Push(item(uint64(i), strconv.Itoa(i), 1))
		require.NoError(t, err)
	}
	_, err = b.Push(item(99, "over", 1))
	require.ErrorIs(t, err, reorder.ErrFull)
	require.Equal(t, 10, b.Bytes())
}

func TestRandomOrderProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := reorder.New[string](0)
	var released []uint64
	tts := make([]uint64, 2000)
	for i := range tts {
		tts[i] = uint64(i + 1)
	}
	r.Shuffle(len(tts), func(i, j int) { tts[i], tts[j] = tts[j], tts[i] })
	// Push in random order; release in random watermark steps at or below
	// the minimum not yet pushed, as a writer's watermark would.
	pushed := map[uint64]bool{}
	low := uint64(0)
	for i, tt := range tts {
		_, err := b.Push(item(tt, strconv.FormatUint(tt, 10), 1))
		require.NoError(t, err)
		pushed[tt] = true
		for pushed[low+1] {
			low++
		}
		if i%17 == 0 {
			for _, it := range b.PopUpTo(low) {
				released = append(released, it.TimeTick)
			}
		}
	}
	for _, it := range b.PopUpTo(low) {
		released = append(released, it.TimeTick)
	}
	require.Len(t, released, len(tts))
	require.True(t, slices.IsSorted(released))
}

// Items go to the in-order run or the heap depending on arrival; equal
// timeticks still come out in push order across both.
func TestRunAndHeapMerge(t *testing.T) {
	b := reorder.New[string](0)
	for _, it := range []reorder.Item[string]{item(5, "", 1), item(3, "", 1), item(3, "", 1), item(7, "", 1), item(5, "", 1), item(6, "", 1)} {
		it.Value = strconv.FormatUint(it.TimeTick, 10) + "-" + strconv.Itoa(b.Len())
		_, err := b.Push(it)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"3-1", "3-2", "5-0", "5-4", "6-5", "7-3"}, values(b.PopUpTo(10)))
	added, err := b.Push(item(1, "", 1))
	require.NoError(t, err)
	require.True(t, added, "an empty key is never a duplicate")
	added, _ = b.Push(item(1, "", 1))
	require.True(t, added)
}

func TestPopUpToAppendReusesTheSlice(t *testing.T) {
	b := reorder.New[string](0)
	for _, it := range []reorder.Item[string]{item(3, "c", 1), item(1, "a", 1), item(2, "b", 1)} {
		_, err := b.Push(it)
		require.NoError(t, err)
	}
	dst := make([]reorder.Item[string], 0, 8)
	got := b.PopUpToAppend(dst, 2)
	require.Equal(t, []string{"a", "b"}, values(got))
	require.Equal(t, &dst[:1][0], &got[0], "appended to dst's array")
	require.Empty(t, b.PopUpToAppend(got[:0], 2), "nothing left at or below the watermark")
	require.Equal(t, []string{"c"}, values(b.PopUpToAppend(got[:0], 3)))
	require.Zero(t, b.Len())
}
