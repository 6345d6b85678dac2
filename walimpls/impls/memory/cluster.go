package memory

import (
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrInjected is the retryable error of an append failed on purpose by
// Cluster.FailNextAppends.
var ErrInjected = errors.New("memory: injected append failure")

// Cluster is the shared state of one in-memory backend: the channels' logs and
// the fault-injection knobs. Safe for concurrent use.
type Cluster struct {
	mu       sync.Mutex
	logs     map[string]*channelLog
	fencing  bool
	failNext int
	latency  time.Duration
	waiting  int // appends now waiting out latency
}

// NewCluster returns an empty cluster with fencing on.
func NewCluster() *Cluster {
	return &Cluster{logs: map[string]*channelLog{}, fencing: true}
}

// SetFencing turns backend fencing on or off for every channel of the
// cluster. Off, a lower term may still open and append.
func (c *Cluster) SetFencing(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fencing = on
}

// FencingEnabled reports whether backend fencing is on.
func (c *Cluster) FencingEnabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fencing
}

// FailNextAppends makes the next n appends, on any channel, fail with
// ErrInjected without storing anything.
func (c *Cluster) FailNextAppends(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failNext = max(n, 0)
}

// SetAppendLatency delays every later append by d before it is stored.
func (c *Cluster) SetAppendLatency(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latency = max(d, 0)
}

// WaitingAppends reports how many appends are waiting out the latency
// SetAppendLatency injected: a test waits until an append is held up
// instead of sleeping.
func (c *Cluster) WaitingAppends() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// log returns the channel's log, creating it.
func (c *Cluster) log(name string) *channelLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.logs[name]
	if !ok {
		l = newChannelLog()
		c.logs[name] = l
	}
	return l
}

// lookup returns the channel's log, if it exists; it creates nothing.
func (c *Cluster) lookup(name string) (*channelLog, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.logs[name]
	return l, ok
}

// deleteLog removes the channel's log: later opens of the name get a new
// one, and the WALs and scanners of the removed one are finished.
func (c *Cluster) deleteLog(name string) {
	c.mu.Lock()
	l, ok := c.logs[name]
	delete(c.logs, name)
	c.mu.Unlock()
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleted = true
	l.entries = nil
	l.broadcast()
}

// wait counts an append waiting out latency while wait runs.
func (c *Cluster) wait(wait func()) {
	c.mu.Lock()
	c.waiting++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
	}()
	wait()
}

// appendFaults returns the latency to apply and whether to fail the append.
func (c *Cluster) appendFaults() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failNext > 0 {
		c.failNext--
		return c.latency, true
	}
	return c.latency, false
}
