package pool

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// WALSource gives the pruner the WAL of a pchannel this node owns; false
// when it owns none.
type WALSource func(pchannel string) (adaptor.WAL, bool)

// Pruner truncates each pchannel this node owns at its PruneTarget, once
// per interval. Start runs it; Close stops it and waits.
//
// It learns from the log itself which vchannels have messages after their
// checkpoints, whoever wrote them (this node, an earlier owner, an append
// straight to the pchannel's WAL with a vchannel property): each round
// takes the WAL's Tail and reads the pchannel up to it, continuing from
// the previous round's tail (the first round after the pruner starts, or
// after it lost and regained the pchannel, reads from its oldest retained
// message). So a vchannel that was never written, or has nothing after its
// checkpoint, does not hold its pchannel back (see PruneTarget for the
// rule), and a restarted pruner decides as the one before it did.
//
// What it keeps per pchannel is a timetick and a position per allocated
// vchannel that was written; a round appends a watermark (Tail) and reads
// what was appended since the last one. A read-only WAL cannot say where its tail is: its pchannel is
// not pruned (Pruned.Err). Messages of a vchannel name appended before the
// vchannel was allocated are not its own: allocate before writing.
type Pruner struct {
	pool     *Pool
	wals     WALSource
	interval time.Duration
	log      *slog.Logger

	// mu serializes rounds (PruneOnce) and guards cursors.
	mu      sync.Mutex
	cursors map[string]*progress // by pchannel

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewPruner returns a pruner of p's pchannels whose WALs wals gives.
func NewPruner(p *Pool, wals WALSource, interval time.Duration) (*Pruner, error) {
	if p == nil || wals == nil || interval <= 0 {
		return nil, errors.Wrapf(ErrInvalidConfig, "pruner: pool, WAL source and a positive interval are required (interval %s)", interval)
	}
	return &Pruner{pool: p, wals: wals, interval: interval, log: p.log.With("component", "pruner"), cursors: map[string]*progress{}}, nil
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
	t := r.pool.opts.Clock.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if _, err := r.PruneOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("prune round failed", "error", err)
		}
	}
}

// Pruned is what one round did to a pchannel.
type Pruned struct {
	PChannel string
	// Target is where it was truncated and why (how many vchannels held
	// it back, how many were idle); zero when it was not (Err says why).
	Target Target
	Err    error
}

// PruneOnce truncates every owned pchannel at its target now. A pchannel
// without vchannels is left alone (its Pruned.Err says why), and so is one
// whose log could not be read up to its tail; the error is for the round
// itself. Rounds run one at a time.
func (r *Pruner) PruneOnce(ctx context.Context) ([]Pruned, error) {
	if err := r.pool.Refresh(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Pruned
	for _, pc := range r.pool.PChannels() {
		w, ok := r.wals(pc)
		if !ok {
			delete(r.cursors, pc) // another node prunes it meanwhile
			continue
		}
		res := Pruned{PChannel: pc}
		target, err := r.prune(ctx, pc, w)
		if err == nil {
			res.Target = target
			r.log.Debug("pruned", "pchannel", pc, "position", target.Position, "held_by", target.HeldBy,
				"held", target.Held, "idle", target.Idle, "moved", target.Moved)
		} else {
			res.Err = err
			if !errors.Is(err, ErrNoVChannels) {
				r.log.Warn("pchannel not pruned", "pchannel", pc, "error", err)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// prune reads pc's log up to its tail, decides and truncates. Assumes r.mu
// is held.
func (r *Pruner) prune(ctx context.Context, pc string, w adaptor.WAL) (Target, error) {
	c := r.cursors[pc]
	if c == nil || c.term != w.Channel().Term {
		c = &progress{term: w.Channel().Term, seen: map[string]Written{}}
		r.cursors[pc] = c
	}
	act, err := c.advance(ctx, w)
	if err != nil {
		delete(r.cursors, pc) // read it again from its oldest message
		return Target{}, err
	}
	target, err := r.pool.PruneTarget(ctx, pc, w.ParseCheckpoint, act)
	if err == nil || errors.Is(err, ErrNoVChannels) {
		// Forget the vchannels that are not (or no longer) allocated here,
		// as PruneTarget read them after the log: one allocated later has
		// no message of its own up to this tail. (After another error the
		// pool may not have read them since the tail was taken.)
		c.keep(r.pool.VChannels(pc))
	}
	if err != nil {
		return Target{}, err
	}
	if err := w.Truncate(ctx, target.Position); err != nil {
		return Target{}, err
	}
	return target, nil
}

// progress is how far a pruner has read one pchannel's log, and what it
// found there per vchannel. Owned by the Pruner's round (Pruner.mu).
type progress struct {
	term int64             // of the WAL it reads through
	at   cursor.Checkpoint // read up to this tail; zero: nothing read yet
	seen map[string]Written
}

// advance reads w from where the cursor stands up to a tail it takes now,
// and returns what the cursor knows up to it. A failed advance may have
// noted part of the read: the cursor is then dropped.
func (c *progress) advance(ctx context.Context, w adaptor.WAL) (Activity, error) {
	tail, err := w.Tail(ctx)
	if err != nil {
		return Activity{}, errors.Wrap(err, "pruner: the tail of the log")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := w.ReadBatches(ctx, adaptor.ReadOption{
		Name:          "pool-pruner",
		DeliverPolicy: cursor.After(c.at),
		Filter:        adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTimeTick}},
	})
	if err != nil {
		return Activity{}, errors.Wrapf(err, "pruner: read after %s", c.at)
	}
	defer func() { _ = s.Close() }()
	for {
		select {
		case batch, ok := <-s.Batches():
			if !ok {
				err := s.Error()
				if err == nil {
					err = errors.New("the scanner ended")
				}
				return Activity{}, errors.Wrapf(err, "pruner: read after %s up to the tail %s", c.at, tail)
			}
			for _, m := range batch {
				if adaptor.CaughtUp(m, tail) {
					c.at = tail
					return Activity{Tail: tail, VChannels: c.seen}, nil
				}
				c.note(m, tail)
			}
		case <-ctx.Done():
			return Activity{}, errors.Wrapf(ctx.Err(), "pruner: read after %s up to the tail %s", c.at, tail)
		}
	}
}

// note records a data message read at or below the tail.
func (c *progress) note(m message.Immutable, tail cursor.Checkpoint) {
	v := m.VChannel()
	tt, ok := m.TimeTick()
	if m.Kind() != message.KindData || v == "" || !ok || tt > tail.TimeTick {
		return
	}
	w, seen := c.seen[v]
	if !seen || m.ID().LT(w.FirstID) {
		w.FirstID = m.ID()
	}
	w.LastTimeTick = max(w.LastTimeTick, tt)
	c.seen[v] = w
}

// keep forgets every vchannel but members.
func (c *progress) keep(members []string) {
	keep := make(map[string]bool, len(members))
	for _, v := range members {
		keep[v] = true
	}
	for v := range c.seen {
		if !keep[v] {
			delete(c.seen, v)
		}
	}
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
