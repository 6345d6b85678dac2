package node

import "sync"

// inflight counts the requests in flight, so that a shutdown can wait
// until none is. Unlike a sync.WaitGroup, whose Add from zero must come
// before its Wait, a request may arrive (and be counted, then refused)
// while the shutdown waits: Drained hands out a channel that is closed
// once the count is zero, then or later.
type inflight struct {
	mu      sync.Mutex
	n       int
	drained []chan struct{} // closed when n next reaches zero
}

// Add adds delta to the count.
func (f *inflight) Add(delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += delta
	if f.n < 0 {
		panic("node: more requests ended than began") // an impossible internal state
	}
	if f.n == 0 {
		for _, c := range f.drained {
			close(c)
		}
		f.drained = nil
	}
}

// Done ends one request.
func (f *inflight) Done() { f.Add(-1) }

// Drained returns a channel closed once no request is in flight.
func (f *inflight) Drained() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan struct{})
	if f.n == 0 {
		close(c)
	} else {
		f.drained = append(f.drained, c)
	}
	return c
}
