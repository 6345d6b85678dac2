// Package hlc is a hybrid logical clock for timeticks: the physical time in
// milliseconds in the high bits and a logical counter in the low LogicalBits,
// so that timeticks stay close to wall time yet strictly increase even when
// the wall clock stalls or steps back.
package hlc

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// LogicalBits is the width of the logical counter: 2^18 timeticks per
// millisecond before the clock runs ahead of wall time.
const LogicalBits = 18

// Compose builds a timetick from a physical time and a logical counter.
func Compose(physical time.Time, logical uint64) uint64 {
	return uint64(physical.UnixMilli())<<LogicalBits | logical&(1<<LogicalBits-1)
}

// Physical returns the wall time a timetick was taken at (ms precision).
func Physical(tt uint64) time.Time { return time.UnixMilli(int64(tt >> LogicalBits)) }

// Clock allocates strictly increasing timeticks. Safe for concurrent use.
type Clock struct {
	wall clockwork.Clock
	mu   sync.Mutex
	last uint64
}

// New returns a clock whose physical time is wall's (the real clock when
// nil).
func New(wall clockwork.Clock) *Clock {
	if wall == nil {
		wall = clockwork.NewRealClock()
	}
	return &Clock{wall: wall}
}

// Allocate returns a timetick above every one it returned or observed.
func (c *Clock) Allocate(context.Context) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tt := Compose(c.wall.Now(), 0)
	if tt <= c.last {
		tt = c.last + 1
	}
	c.last = tt
	return tt, nil
}

// Observe raises the clock above tt, for example above the timeticks
// recovered from a log.
func (c *Clock) Observe(tt uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = max(c.last, tt)
}
