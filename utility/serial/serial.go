// Package serial runs functions one at a time, in the order they were
// posted, on one goroutine of its own: for work handed over by a goroutine
// that must not run it itself (a writer loop answering appends, a flusher
// between rounds), in order, without a goroutine per function.
//
// The goroutine runs only while something is queued: the first Post starts
// it, and it ends once it has run everything posted, so an idle queue holds
// no goroutine. Close waits for what is still queued to run. Post after
// Close is the owner's bug: the owner stops posting (its wait group, its
// own goroutine having returned) before it closes.
package serial

import "sync"

// Queue runs posted functions in order on its goroutine. The zero value is
// not usable; use New.
type Queue struct {
	mu      sync.Mutex
	queue   []func()
	spare   []func() // the queue's previous backing array, for reuse
	running bool     // the goroutine runs; it ends once it finds the queue empty
	wg      sync.WaitGroup
}

// New returns an empty queue; its goroutine starts with the first Post.
func New() *Queue { return &Queue{} }

// Post queues f, to run after everything posted before it. It does not
// wait for f.
func (q *Queue) Post(f func()) {
	q.mu.Lock()
	q.queue = append(q.queue, f)
	start := !q.running
	if start {
		q.running = true
		q.wg.Add(1)
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

func (q *Queue) run() {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		fs := q.queue
		if len(fs) == 0 {
			// Decided under mu: a Post after this starts a new goroutine.
			q.running = false
			q.mu.Unlock()
			return
		}
		q.queue, q.spare = q.spare[:0], nil
		q.mu.Unlock()
		for i, f := range fs {
			f()
			fs[i] = nil
		}
		q.mu.Lock()
		if q.spare == nil {
			q.spare = fs[:0]
		}
		q.mu.Unlock()
	}
}

// Close waits until everything posted has run. Call it once, after the
// last Post.
func (q *Queue) Close() { q.wg.Wait() }
