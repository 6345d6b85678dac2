// Package serial runs functions one at a time, in the order they were
// posted, on one goroutine of its own: for work handed over by a goroutine
// that must not run it itself (a writer loop answering appends, a flusher
// between rounds), in order, without a goroutine per function.
//
// The goroutine starts with the first Post and ends at Close, which runs
// what is still queued first. Post after Close is the owner's bug: the
// owner stops posting (its wait group, its own goroutine having returned)
// before it closes.
package serial

import "sync"

// Queue runs posted functions in order on its goroutine. The zero value is
// not usable; use New.
type Queue struct {
	mu      sync.Mutex
	queue   []func()
	spare   []func() // the queue's previous backing array, for reuse
	running bool
	wake    chan struct{} // capacity 1: a post since the goroutine last looked
	stop    chan struct{}
	done    chan struct{}
}

// New returns an empty queue; its goroutine starts with the first Post.
func New() *Queue {
	return &Queue{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Post queues f, to run after everything posted before it. It does not
// wait for f.
func (q *Queue) Post(f func()) {
	q.mu.Lock()
	q.queue = append(q.queue, f)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.run()
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *Queue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		fs := q.queue
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
		more := len(q.queue) > 0
		q.mu.Unlock()
		if more {
			continue
		}
		select {
		case <-q.wake:
		case <-q.stop:
			q.mu.Lock()
			more := len(q.queue) > 0
			q.mu.Unlock()
			if !more {
				return
			}
		}
	}
}

// Close runs what is queued, stops the goroutine and waits for it. Call
// it once, after the last Post.
func (q *Queue) Close() {
	q.mu.Lock()
	running := q.running
	q.mu.Unlock()
	close(q.stop)
	if running {
		<-q.done
	}
}
