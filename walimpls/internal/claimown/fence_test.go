package claimown

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestFenceFirstSetWins(t *testing.T) {
	f := NewFence()
	require.NoError(t, f.Err())
	require.False(t, closed(f.Fenced()))

	first, second := errors.New("first"), errors.New("second")
	got, set := f.Set(first)
	assert.True(t, set)
	assert.Same(t, first, got)
	assert.True(t, closed(f.Fenced()))

	got, set = f.Set(second)
	assert.False(t, set)
	assert.Same(t, first, got, "a later Set returns the first fence")
	assert.Same(t, first, f.Err())
}

func TestFenceReplace(t *testing.T) {
	deleted := errors.New("deleted")
	isDeleted := func(err error) bool { return err == deleted }

	f := NewFence()
	prev, replaced := f.Replace(deleted, isDeleted)
	assert.NoError(t, prev)
	assert.True(t, replaced, "an unset fence is set")
	assert.True(t, closed(f.Fenced()))

	prev, replaced = f.Replace(errors.New("deleted again"), isDeleted)
	assert.Same(t, deleted, prev)
	assert.False(t, replaced, "keep holds the earlier deletion")
	assert.Same(t, deleted, f.Err())

	g := NewFence()
	beaten := errors.New("beaten")
	g.Set(beaten)
	prev, replaced = g.Replace(deleted, isDeleted)
	assert.Same(t, beaten, prev)
	assert.True(t, replaced, "a deletion replaces an earlier fence")
	assert.Same(t, deleted, g.Err())

	again := errors.New("deleted through the opener")
	prev, replaced = g.Replace(again, nil)
	assert.Same(t, deleted, prev)
	assert.True(t, replaced, "without keep, Replace always replaces")
	assert.Same(t, again, g.Err())

	_, set := g.Set(beaten)
	assert.False(t, set)
	assert.Same(t, again, g.Err())
}

func TestFenceConcurrentSet(t *testing.T) {
	f := NewFence()
	errs := make([]error, 16)
	var wg sync.WaitGroup
	firsts := make(chan error, len(errs))
	for i := range errs {
		errs[i] = errors.New("fence")
		wg.Go(func() {
			<-f.Fenced() // wait in some goroutines: the channel closes once
			_ = f.Err()
		})
		wg.Go(func() {
			if got, first := f.Set(errs[i]); first {
				firsts <- got
			}
		})
	}
	wg.Wait()
	close(firsts)
	require.Len(t, firsts, 1)
	winner := <-firsts
	assert.Same(t, winner, f.Err())
}

func TestFenceNilPanics(t *testing.T) {
	assert.Panics(t, func() { NewFence().Set(nil) })
}
