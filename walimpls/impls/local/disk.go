package local

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
)

// The disk watermarks (doc.go, Disk space). Deciding is here: what a
// reading of the free space means (diskLevels.next, with hysteresis), and
// how long a throttled append waits (pacer); both are pure logic. Doing is
// the preparer's, which owns the readings (preparer.checkDisk), and the
// submitters', which each ask diskGuard.admit before they take the
// journal's mutex.

// diskPressure is the state a free-space reading puts the journal in.
type diskPressure int32

const (
	diskOK   diskPressure = iota // at or above the soft watermark: appends pass
	diskSoft                     // below the soft watermark: appends are throttled
	diskHard                     // below the hard watermark: appends are refused
)

func (p diskPressure) String() string {
	switch p {
	case diskOK:
		return "ok"
	case diskSoft:
		return "below the soft watermark"
	case diskHard:
		return "below the hard watermark"
	}
	return "unknown"
}

// diskLevels are the watermarks in bytes (0: off) and the margin a reading
// must clear above a watermark to leave the state below it.
type diskLevels struct {
	soft, hard, margin uint64
}

// enabled reports whether a watermark is on, so that the free space is
// read at all.
func (l diskLevels) enabled() bool { return l.soft > 0 || l.hard > 0 }

// next is the pressure after a reading of free bytes in state cur. A state
// is entered as soon as the free space is below its watermark, and left
// only once it is at least margin above it: so a reading that wobbles
// around a watermark does not flip the state at each check.
func (l diskLevels) next(cur diskPressure, free uint64) diskPressure {
	switch {
	case free < l.hard:
		return diskHard
	case cur == diskHard && free < l.hard+l.margin:
		return diskHard
	case free < l.soft:
		return diskSoft
	case cur != diskOK && free < l.soft+l.margin:
		return diskSoft
	}
	return diskOK
}

// spareFits reports whether zero-filling a spare segment of size bytes
// ahead of need leaves free at or above the hard watermark.
func (l diskLevels) spareFits(free uint64, size int64) bool {
	return l.hard == 0 || free >= l.hard+uint64(size)
}

// paceBurst is how far ahead of its schedule a throttled append may run
// without waiting: a short burst passes at once, a sustained stream is
// held to the rate.
const paceBurst = 50 * time.Millisecond

// pacer schedules throttled appends at a rate (the generic cell rate
// algorithm): each append's bytes are scheduled after those of the appends
// before it, and an append waits until its schedule is within paceBurst of
// now.
type pacer struct {
	next time.Time // when the bytes reserved so far are paid for
}

// reserve schedules size bytes at rate bytes per second and returns how
// long their append waits.
func (p *pacer) reserve(now time.Time, size int, rate int64) time.Duration {
	if p.next.Before(now) {
		p.next = now
	}
	// size is at most a segment (1 GiB) and rate at least 1: no overflow.
	p.next = p.next.Add(time.Duration(int64(size) * int64(time.Second) / rate))
	return max(p.next.Sub(now)-paceBurst, 0)
}

// diskGuard holds the disk pressure and applies it to appends. The
// preparer alone changes it (observe); submitters read it.
type diskGuard struct {
	levels diskLevels
	rate   int64 // Config.DiskSoftWriteRate
	dir    string
	clock  clockwork.Clock
	m      *metrics
	log    *slog.Logger

	// now is the last reading and the pressure it decided, together; a
	// new pressure is stored under mu.
	now atomic.Pointer[diskReading]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when the pressure changes
	pace    pacer
}

// diskReading is a reading of the free space and the pressure it decided.
type diskReading struct {
	free     uint64
	pressure diskPressure
}

func newDiskGuard(cfg Config, m *metrics, log *slog.Logger) *diskGuard {
	g := &diskGuard{
		levels:  cfg.diskLevels(),
		rate:    cfg.DiskSoftWriteRate,
		dir:     cfg.Dir,
		clock:   cfg.clock,
		m:       m,
		log:     log,
		changed: make(chan struct{}),
	}
	g.now.Store(&diskReading{})
	return g
}

func (g *diskGuard) load() diskPressure { return g.now.Load().pressure }

// observe takes a reading of the free space: it moves the pressure as
// diskLevels.next decides, and logs each crossing once. Called by the
// owner of the readings (the preparer, or New before it starts).
func (g *diskGuard) observe(free uint64) {
	g.m.diskFree.Set(float64(free))
	cur := g.load()
	r := &diskReading{free: free, pressure: g.levels.next(cur, free)}
	next := r.pressure
	if next == cur {
		g.now.Store(r)
		return
	}
	g.mu.Lock()
	g.now.Store(r)
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
	g.m.diskPressure.Set(float64(next))
	attrs := []any{"free_bytes", free, "soft_watermark", g.levels.soft, "hard_watermark", g.levels.hard}
	switch next {
	case diskHard:
		g.log.Warn("free disk space below the hard watermark: refusing appends until truncation frees space", attrs...)
	case diskSoft:
		if cur == diskOK {
			g.log.Warn("free disk space below the soft watermark: throttling appends", append(attrs, "bytes_per_second", g.rate)...)
		} else {
			g.log.Info("free disk space back above the hard watermark: appends throttled, no longer refused", attrs...)
		}
	case diskOK:
		g.log.Info("free disk space back above the watermarks: appends no longer held back", attrs...)
	}
}

// admit holds an append of size frame bytes back as the pressure says: at
// once when there is none, refused with ErrDiskFull below the hard
// watermark, and paced at the soft write rate below the soft one. A paced
// append waits on the clock without any lock held, and goes on early when
// the pressure changes, ctx ends (its error) or stopped is closed (the
// journal then refuses it as closed). Nothing is framed when it fails.
func (g *diskGuard) admit(ctx context.Context, size int, stopped <-chan struct{}) error {
	switch g.load() {
	case diskOK:
		return nil
	case diskHard:
		return g.refuse()
	}
	g.mu.Lock()
	d := g.pace.reserve(g.clock.Now(), size, g.rate)
	changed := g.changed
	g.mu.Unlock()
	if d > 0 {
		g.m.throttledAppends.Inc()
		start := g.clock.Now()
		err := g.wait(ctx, d, changed, stopped)
		g.m.throttleSeconds.Add(g.clock.Since(start).Seconds())
		if err != nil {
			return err
		}
	}
	if g.load() == diskHard {
		return g.refuse()
	}
	return nil
}

// wait waits d, or until the pressure is no longer soft, stopped is closed
// or ctx ends (its error).
func (g *diskGuard) wait(ctx context.Context, d time.Duration, changed, stopped <-chan struct{}) error {
	t := g.clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.Chan():
			return nil
		case <-changed:
			g.mu.Lock()
			p, next := g.load(), g.changed
			g.mu.Unlock()
			if p != diskSoft {
				return nil
			}
			changed = next
		case <-stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *diskGuard) refuse() error {
	g.m.refusedAppends.Inc()
	return errors.Wrapf(ErrDiskFull, "local: %s has %d bytes free, below the hard watermark of %d: appends are refused until truncation frees space",
		g.dir, g.now.Load().free, g.levels.hard)
}
