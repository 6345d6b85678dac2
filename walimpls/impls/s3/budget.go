package s3

import (
	"context"
	"sync"
)

// budget bounds the bytes of appends queued or in flight.
type budget struct {
	mu     sync.Mutex
	used   int
	max    int
	wake   chan struct{}
	report func(float64)
}

func newBudget(maxBytes int, report func(float64)) *budget {
	return &budget{max: maxBytes, wake: make(chan struct{}), report: report}
}

// acquire reserves n bytes (at most the whole budget, so that one batch
// larger than it still goes, alone), waiting for room; it returns what it
// reserved.
func (b *budget) acquire(ctx context.Context, stop <-chan struct{}, n int) (int, error) {
	n = min(n, b.max)
	for {
		select {
		case <-stop:
			return 0, errStopped
		default:
		}
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.report(float64(b.used))
			b.mu.Unlock()
			return n, nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-stop:
			return 0, errStopped
		}
	}
}

func (b *budget) release(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.report(float64(b.used))
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// inUse is the bytes reserved now.
func (b *budget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
