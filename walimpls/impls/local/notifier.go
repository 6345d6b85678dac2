package local

import "sync"

// notifier tells the waiters of asynchronous appends (submitAsync) their
// outcome on a goroutine of its own, in the order the rounds finished
// them: the flusher only queues them, and goes on with the next round
// while the callers' callbacks run. The journal starts it with the
// flusher and stops it once the flusher has returned.
type notifier struct {
	mu    sync.Mutex
	queue []*waiter
	spare []*waiter
	wake  chan struct{} // capacity 1
	stop  chan struct{}
	done  chan struct{}
}

func newNotifier() *notifier {
	return &notifier{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// post queues the finished waiters that have a notify; the others were
// told by done.
func (n *notifier) post(ws []*waiter) {
	if len(ws) == 0 {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, ws...)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) run() {
	defer close(n.done)
	for {
		n.mu.Lock()
		q := n.queue
		n.queue, n.spare = n.spare[:0], nil
		n.mu.Unlock()
		for i, w := range q {
			w.notify(w.err)
			q[i] = nil
		}
		n.mu.Lock()
		if n.spare == nil {
			n.spare = q[:0]
		}
		more := len(n.queue) > 0
		n.mu.Unlock()
		if more {
			continue
		}
		select {
		case <-n.wake:
		case <-n.stop:
			n.mu.Lock()
			more := len(n.queue) > 0
			n.mu.Unlock()
			if !more {
				return
			}
		}
	}
}

// close tells what is queued and stops the goroutine. Called after the
// flusher returned: nothing is posted after it.
func (n *notifier) close() {
	close(n.stop)
	<-n.done
}
