package claimown

import (
	"sync"

	"go.uber.org/atomic"
)

// Fence latches a writer's fence. The first error set is the fence for
// good: Err returns it, and Fenced is closed, from then on. Only a
// deletion replaces it (Replace). Safe for concurrent use.
type Fence struct {
	err atomic.Pointer[error] // nil until set; read without mu

	mu sync.Mutex // serializes Set and Replace
	ch chan struct{}
}

// NewFence returns a fence that is not set.
func NewFence() *Fence { return &Fence{ch: make(chan struct{})} }

// Err returns the fence, nil while it is not set.
func (f *Fence) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Fenced is closed once the fence is set.
func (f *Fence) Fenced() <-chan struct{} { return f.ch }

// Set records err as the fence unless one is set, and returns the fence
// (err or the earlier one); first reports whether this call set it.
func (f *Fence) Set(err error) (fence error, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.Err(); cur != nil {
		return cur, false
	}
	f.store(nil, err)
	return err, true
}

// Replace records err as the fence in place of an earlier one, unless
// keep (nil: never) reports that the current fence must stay; it returns
// the fence before the call (nil when it was not set) and whether err
// replaced it.
func (f *Fence) Replace(err error, keep func(cur error) bool) (prev error, replaced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev = f.Err()
	if prev != nil && keep != nil && keep(prev) {
		return prev, false
	}
	f.store(prev, err)
	return prev, true
}

// store records err; prev is the fence before it. Called with mu held.
func (f *Fence) store(prev, err error) {
	if err == nil {
		panic("claimown: a nil fence")
	}
	f.err.Store(&err)
	if prev == nil {
		close(f.ch)
	}
}
