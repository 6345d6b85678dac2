// Package backoff computes capped exponential retry waits and sleeps them
// under a context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
)

// Config is a capped exponential backoff. The zero value waits 10ms, doubling
// to at most 1s, with ±20% jitter.
type Config struct {
	Initial time.Duration
	Max     time.Duration
	// NoJitter turns the ±20% jitter off (for step-by-step tests).
	NoJitter bool
	// Clock times Wait; nil is the real clock.
	Clock clockwork.Clock
}

func (c Config) withDefaults() Config {
	if c.Initial <= 0 {
		c.Initial = 10 * time.Millisecond
	}
	if c.Max <= 0 {
		c.Max = time.Second
	}
	if c.Max < c.Initial {
		c.Max = c.Initial
	}
	return c
}

// Delay returns the wait before retry number attempt (0-based).
func (c Config) Delay(attempt int) time.Duration {
	c = c.withDefaults()
	d := c.Initial
	for i := 0; i < attempt && d < c.Max; i++ {
		d *= 2
	}
	d = min(d, c.Max)
	if !c.NoJitter {
		d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	}
	return d
}

// Wait sleeps Delay(attempt), or returns ctx's error when it ends first.
func (c Config) Wait(ctx context.Context, attempt int) error {
	clock := c.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	t := clock.NewTimer(c.Delay(attempt))
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
