package pulsartest

import (
	"bufio"
	"net"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/atomic"
)

// conn is one client connection. Two goroutines serve it, both owned by the
// broker (counted in Broker.wg):
//
//   - readLoop reads and decodes frames and hands each command to the
//     broker's loop goroutine;
//   - writeLoop writes the frames queued by send, in order.
//
// The fields under "loop-owned" are touched only by the loop goroutine. The
// outgoing queue is guarded by mu.
type conn struct {
	id     uint64
	nc     net.Conn
	remote string

	mu     sync.Mutex // guards out and closed
	out    []outFrame
	closed bool

	wake      chan struct{} // capacity 1: frames were queued
	done      chan struct{} // closed by shutdown: writeLoop exits
	closeOnce sync.Once
	// readerGone is set by readLoop when the socket failed, before the loop
	// has processed the drop: a reconnecting client's new registration may
	// then replace this connection's stale ones at once.
	readerGone atomic.Bool

	// loop-owned
	connected bool
	producers map[uint64]*producer
	consumers map[uint64]*consumer
	// fenced maps the ids of producers refused with ProducerFenced to
	// their topic, until the client closes them.
	fenced map[uint64]*topic
}

// outFrame is a frame to write, not before at (zero: at once): head (sizes
// and command), then entry (stored bytes, shared, never modified).
type outFrame struct {
	head  []byte
	entry []byte
	at    time.Time
}

func newConn(id uint64, nc net.Conn) *conn {
	return &conn{
		id:        id,
		nc:        nc,
		remote:    nc.RemoteAddr().String(),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		producers: map[uint64]*producer{},
		consumers: map[uint64]*consumer{},
		fenced:    map[uint64]*topic{},
	}
}

// send queues a frame. Frames go out in the order they were queued; a frame
// with a time waits until then and holds back the frames behind it.
func (c *conn) send(head, entry []byte, at time.Time) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.out = append(c.out, outFrame{head: head, entry: entry, at: at})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// shutdown closes the socket and stops writeLoop; readLoop then fails its
// read and exits. Safe to call more than once and from any goroutine.
func (c *conn) shutdown() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.out = nil
		c.mu.Unlock()
		close(c.done)
		_ = c.nc.Close()
	})
}

// writeLoop writes queued frames until shutdown, a frame with a time not
// before then on clock. A write error closes the socket, which makes
// readLoop report the connection gone.
func (c *conn) writeLoop(wg *sync.WaitGroup, clock clockwork.Clock) {
	defer wg.Done()
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	failed := false
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			q := c.out
			c.out = nil
			c.mu.Unlock()
			if len(q) == 0 || failed {
				break
			}
			for _, f := range q {
				if d := clock.Until(f.at); !f.at.IsZero() && d > 0 {
					if err := bw.Flush(); err != nil {
						failed = true
						_ = c.nc.Close()
						break
					}
					if timer == nil {
						timer = clock.NewTimer(d)
					} else {
						timer.Reset(d)
					}
					select {
					case <-timer.Chan():
					case <-c.done:
						return
					}
				}
				_, err := bw.Write(f.head)
				if err == nil && len(f.entry) > 0 {
					_, err = bw.Write(f.entry)
				}
				if err != nil {
					failed = true
					_ = c.nc.Close()
					break
				}
			}
			if !failed {
				if err := bw.Flush(); err != nil {
					failed = true
					_ = c.nc.Close()
				}
			}
		}
	}
}
