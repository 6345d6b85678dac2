package pool

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
)

// WALSource gives the pruner the WAL of a pchannel this node owns; false
// when it owns none.
type WALSource func(pchannel string) (adaptor.WAL, bool)

// Pruner truncates each pchannel this node owns at its PruneTarget, once
// per interval. Start runs it; Close stops it and waits.
type Pruner struct {
	pool     *Pool
	wals     WALSource
	interval time.Duration
	log      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewPruner returns a pruner of p's pchannels whose WALs wals gives.
func NewPruner(p *Pool, wals WALSource, interval time.Duration) (*Pruner, error) {
	if p == nil || wals == nil || interval <= 0 {
		return nil, errors.Wrapf(ErrInvalidConfig, "pruner: pool, WAL source and a positive interval are required (interval %s)", interval)
	}
	return &Pruner{pool: p, wals: wals, interval: interval, log: p.log.With("component", "pruner")}, nil
}

// Start runs the pruner until Close.
func (r *Pruner) Start() {
	r.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel, r.done = cancel, make(chan struct{})
		go r.run(ctx)
	})
}

func (r *Pruner) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := r.PruneOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("prune round failed", "error", err)
		}
	}
}

// Pruned is what one round did to a pchannel.
type Pruned struct {
	PChannel string
	// Target is where it was truncated; zero when it was not (Err says why).
	Target adaptor.Checkpoint
	Err    error
}

// PruneOnce truncates every owned pchannel at its target now. A pchannel
// without vchannels, or with a vchannel that has no checkpoint yet, is left
// alone (its Pruned.Err says why); the error is for the round itself.
func (r *Pruner) PruneOnce(ctx context.Context) ([]Pruned, error) {
	if err := r.pool.Refresh(ctx); err != nil {
		return nil, err
	}
	var out []Pruned
	for _, pc := range r.pool.PChannels() {
		w, ok := r.wals(pc)
		if !ok {
			continue
		}
		res := Pruned{PChannel: pc}
		target, err := r.pool.PruneTarget(ctx, pc, w.ParseCheckpoint)
		if err == nil {
			err = w.Truncate(ctx, target.Position)
		}
		if err == nil {
			res.Target = target
			r.log.Debug("pruned", "pchannel", pc, "target", target)
		} else {
			res.Err = err
			if !errors.IsAny(err, ErrNoVChannels, ErrCheckpointUnknown) {
				r.log.Warn("pchannel not pruned", "pchannel", pc, "error", err)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// Close stops the pruner and waits for it; idempotent.
func (r *Pruner) Close() error {
	r.once.Do(func() {}) // a pruner never started stays stopped
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	return nil
}
