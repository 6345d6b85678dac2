package adaptor

import "sync"

// callbacks runs the callbacks of AppendAsync on one goroutine the WAL
// owns, one at a time, in the order their appends were answered: an
// answer comes from a backend's goroutine (or a retrying one), which must
// not run a caller's code, nor be held up by the adaptor's own completion
// of the append, which runs here too; one goroutine for all callbacks
// costs less than one per append. The goroutine starts with the first
// post and runs until close; close runs what is still queued first.
type callbacks struct {
	mu      sync.Mutex
	queue   []func()
	spare   []func() // the queue's previous backing array, for reuse
	running bool
	wake    chan struct{} // buffered: a post since the goroutine last looked
	stop    chan struct{}
	done    chan struct{}
}

func newCallbacks() *callbacks {
	return &callbacks{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// post queues f. The WAL posts only while its wait group counts the
// append, so never after close.
func (c *callbacks) post(f func()) {
	c.mu.Lock()
	c.queue = append(c.queue, f)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.run()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *callbacks) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		q := c.queue
		c.queue, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		for i, f := range q {
			f()
			q[i] = nil
		}
		c.mu.Lock()
		if c.spare == nil {
			c.spare = q[:0]
		}
		more := len(c.queue) > 0
		c.mu.Unlock()
		if more {
			continue
		}
		select {
		case <-c.wake:
		case <-c.stop:
			c.mu.Lock()
			more := len(c.queue) > 0
			c.mu.Unlock()
			if !more {
				return
			}
		}
	}
}

// close stops the goroutine once the queue is empty, and waits for it.
func (c *callbacks) close() {
	c.mu.Lock()
	running := c.running
	c.mu.Unlock()
	close(c.stop)
	if running {
		<-c.done
	}
}
