package retention

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/walimpls"
)

// Source gives a Retainer the channels this node owns.
type Source interface {
	// Channels lists the channels this node owns now.
	Channels() []string
	// WAL returns the available WAL of a channel this node owns, at the
	// term it owns it at; false when it has none.
	WAL(channel string) (adaptor.WAL, bool)
	// Appended reports whether an append to channel may have been
	// acknowledged with a timetick above since (true when unknown).
	Appended(channel string, since uint64) bool
}

// Step names a point of a round, for crash tests (Options.AfterStep).
type Step string

const (
	// StepFloor: the floor and the resume points are recorded, nothing
	// truncated yet.
	StepFloor Step = "floor-recorded"
	// StepTruncated: the log is truncated (and earlier segments of a
	// chain deleted).
	StepTruncated Step = "truncated"
)

// Options configure a Retainer. Store and Source are required.
type Options struct {
	Config Config
	Store  *consumers.Store
	Source Source
	// Chains, when set, reads a channel's chain: Stats then name each kept
	// segment's backend.
	Chains func(ctx context.Context, channel string) (chain.Chain, error)
	// Logger receives the retainer's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives its metrics; nil registers none.
	Registerer prometheus.Registerer
	// Clock drives its rounds and ages; default the real one.
	Clock clockwork.Clock
	// AfterStep, when set, is called after each Step of a round (crash
	// tests kill the process there).
	AfterStep func(step Step, channel string)

	// blocks are the ledgers' block bounds; zero: defaultBlocks (tests
	// set smaller ones, export_test.go).
	blocks blockBounds
}

// Retainer runs the rounds of every channel its Source owns. Start runs
// it; Close stops it and waits.
type Retainer struct {
	cfg     Config
	store   *consumers.Store
	src     Source
	chains  func(ctx context.Context, channel string) (chain.Chain, error)
	log     *slog.Logger
	clock   clockwork.Clock
	after   func(Step, string)
	metrics *metrics
	blocks  blockBounds

	// mu guards states (the map); each state's fields are owned by the
	// round of its channel (one at a time, the scheduler sees to it), but
	// for stats, which mu guards.
	mu     sync.Mutex
	states map[string]*state

	// notified are the channels commits named since the scheduler last
	// looked; wake tells it to look.
	notifyMu sync.Mutex
	notified map[string]bool
	wake     chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// state is what a retainer keeps of one channel it owns.
type state struct {
	term      int64
	ledger    *ledger
	policy    Policy
	truncated cursor.Checkpoint // what this term truncated to; zero: nothing
	segments  uint64            // the first kept segment's index, as last seen
	dropped   [2]int64          // messages, bytes the policy dropped at this term
	// fromOldest: a read from the floor met a truncated position; the
	// ledger reads from the oldest retained message instead.
	fromOldest bool
	stats      Stats // guarded by Retainer.mu
	hasStats   bool
}

// New returns a retainer; Start runs it.
func New(opts Options) (*Retainer, error) {
	if opts.Store == nil || opts.Source == nil {
		return nil, errors.Wrap(ErrInvalidConfig, "a consumers store and a source are required")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("metrics: %w: %w", ErrInvalidConfig, err))
	}
	if opts.blocks == (blockBounds{}) {
		opts.blocks = defaultBlocks
	}
	return &Retainer{cfg: opts.Config.withDefaults(), store: opts.Store, src: opts.Source, chains: opts.Chains, blocks: opts.blocks,
		log: opts.Logger.With("component", "retention"), clock: opts.Clock, after: opts.AfterStep, metrics: m,
		states: map[string]*state{}, notified: map[string]bool{}, wake: make(chan struct{}, 1)}, nil
}

// Start runs the retainer until Close.
func (r *Retainer) Start() {
	r.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel, r.done = cancel, make(chan struct{})
		go r.run(ctx)
	})
}

// Close stops the retainer, waits for its rounds, and removes its metrics;
// idempotent.
func (r *Retainer) Close() error {
	r.once.Do(func() {}) // one never started stays stopped
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
	r.metrics.unregister()
	return nil
}

// Notify says that a consumer of channel committed: its round runs within
// Config.CommitDelay.
func (r *Retainer) Notify(channel string) {
	r.notifyMu.Lock()
	r.notified[channel] = true
	r.notifyMu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the last measure of channel, false before its first round
// at the term this node owns it at.
func (r *Retainer) Stats(channel string) (Stats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[channel]
	if st == nil || !st.hasStats {
		return Stats{}, false
	}
	return st.stats, true
}

// run is the scheduler: it decides which channel's round is due, and runs
// them on Config.Workers goroutines, at most one round per channel at a
// time.
func (r *Retainer) run(ctx context.Context) {
	defer close(r.done)
	work := make(chan string)
	finished := make(chan string)
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range work {
				rctx, cancel := context.WithTimeout(ctx, roundTimeout(r.cfg))
				_, err := r.Round(rctx, ch)
				cancel()
				if err != nil && ctx.Err() == nil {
					r.log.Warn("retention round failed", "channel", ch, "error", err.Error())
				}
				select {
				case finished <- ch:
				case <-ctx.Done():
				}
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
	}()

	q := newDueQueue()
	running := map[string]bool{}
	again := map[string]bool{}
	ticker := r.clock.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	everyOwned := func() {
		now := r.clock.Now()
		owned := r.src.Channels()
		for _, ch := range owned {
			q.push(ch, now)
		}
		r.forgetAllBut(owned)
	}
	everyOwned()
	for {
		now := r.clock.Now()
		var send chan string
		var next string
		var timer clockwork.Timer
		var fire <-chan time.Time
		if ch, at, ok := q.peek(); ok {
			if at.After(now) {
				timer = r.clock.NewTimer(at.Sub(now))
				fire = timer.Chan()
			} else {
				send, next = work, ch
			}
		}
		select {
		case <-ctx.Done():
			stopTimer(timer)
			return
		case <-ticker.Chan():
			everyOwned()
		case <-r.wake:
			r.notifyMu.Lock()
			names := r.notified
			r.notified = map[string]bool{}
			r.notifyMu.Unlock()
			for ch := range names {
				q.push(ch, now.Add(r.cfg.CommitDelay))
			}
		case send <- next:
			q.pop()
			running[next] = true
		case ch := <-finished:
			delete(running, ch)
			if again[ch] {
				delete(again, ch)
				q.push(ch, r.clock.Now())
			}
		case <-fire:
		}
		stopTimer(timer)
		// A channel whose round runs waits for it: the round after starts
		// from what it found.
		for {
			ch, _, ok := q.peek()
			if !ok || !running[ch] {
				break
			}
			q.pop()
			again[ch] = true
		}
	}
}

func stopTimer(t clockwork.Timer) {
	if t != nil {
		t.Stop()
	}
}

// roundTimeout bounds one round: long enough to read a channel's retained
// log on its first round.
func roundTimeout(c Config) time.Duration { return max(time.Minute, 6*c.Interval) }

// forgetAllBut drops the state and series of every channel not in owned.
func (r *Retainer) forgetAllBut(owned []string) {
	keep := make(map[string]bool, len(owned))
	for _, ch := range owned {
		keep[ch] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.states {
		if !keep[ch] {
			delete(r.states, ch)
			r.metrics.forget(ch)
		}
	}
}

// Result is what one round of a channel did.
type Result struct {
	Channel string
	Term    int64
	// Target is where the rule let the log go from, HeldBy why.
	Target cursor.Checkpoint
	HeldBy string
	// Truncated is where the round truncated the log; zero when it did not
	// (nothing new to release, or a consumer committed meanwhile).
	Truncated cursor.Checkpoint
	// Moved counts the idle vchannel consumers moved to the tail.
	Moved int
	// Dropped counts what the policy dropped that no consumer committed
	// on: messages, bytes.
	Dropped [2]int64
	// Read is false when the round read nothing new (nothing appended
	// since the last round).
	Read bool
}

// Round runs one round of channel now; Start's scheduler calls it, tests
// may too (never two of one channel at once).
func (r *Retainer) Round(ctx context.Context, channel string) (res Result, err error) {
	start := r.clock.Now()
	defer func() { r.metrics.round(err, r.clock.Since(start)) }()
	res.Channel = channel
	w, ok := r.src.WAL(channel)
	if !ok {
		r.forget(channel)
		return res, nil
	}
	term := w.Channel().Term
	res.Term = term
	st := r.stateOf(channel, term)

	// The log, up to a tail taken now, when something may be new (or the
	// last read did not reach its tail).
	if !st.ledger.caughtUp() || r.src.Appended(channel, st.ledger.tail.TimeTick) {
		if st.ledger.at.IsZero() && !st.fromOldest {
			// The first read starts at the floor, where an earlier owner
			// truncated the log (or was about to).
			read, err := r.store.Load(ctx, channel)
			if err != nil {
				return res, err
			}
			if read.Floor.Checkpoint != "" {
				f, err := w.ParseCheckpoint(read.Floor.Checkpoint)
				if err != nil {
					return res, errors.Wrapf(err, "retention: %s: the floor", channel)
				}
				st.ledger.from = f.Position
			}
		}
		tail, err := w.Tail(ctx)
		if err != nil {
			return res, errors.Wrapf(err, "retention: %s: the tail", channel)
		}
		if err := st.ledger.advance(ctx, w, tail); err != nil {
			if errors.Is(err, walimpls.ErrPositionGone) {
				// Truncated under it (by another than the retainer, or
				// past a floor that was not the last): read again, from
				// the oldest message.
				st.fromOldest = !st.ledger.from.IsZero()
				st.ledger = newLedger(st.policy, r.blocks)
			}
			return res, errors.Wrapf(err, "retention: %s", channel)
		}
		res.Read = true
	}

	// A consumer that commits while the round decides makes its writes
	// conflict: decide again on what it wrote.
	for attempt := 0; ; attempt++ {
		res, err = r.release(ctx, channel, w, st, res)
		if !errors.Is(err, meta.ErrConflict) || attempt == maxAttempts-1 || ctx.Err() != nil {
			return res, err
		}
	}
}

// maxAttempts bounds a round's decisions that met a commit.
const maxAttempts = 3

// release decides on the consumers as the store has them and the ledger,
// records the floor and truncates: the second half of a round.
func (r *Retainer) release(ctx context.Context, channel string, w adaptor.WAL, st *state, res Result) (_ Result, err error) {
	term := st.term
	read, err := r.store.Load(ctx, channel)
	if err != nil {
		return res, err
	}
	in, err := inputOf(read, st, w.ParseCheckpoint, r.clock.Now())
	if err != nil {
		return res, errors.Wrapf(err, "retention: %s", channel)
	}
	d, err := decide(in)
	if err != nil {
		return res, errors.Wrapf(err, "retention: %s", channel)
	}
	res.Target, res.HeldBy, res.Moved = d.target, d.heldBy, len(d.moves)
	defer func() { r.publish(ctx, channel, st, read, d, err) }()

	if !st.truncated.IsZero() && !st.truncated.Before(d.target) {
		return res, nil // nothing new to release
	}
	// Up to the oldest data message there are only watermarks to release;
	// but the first truncation at a term goes through whatever the floor
	// says: it finishes what an earlier owner's round left half done (a
	// prune of sealed segments), which reading from the floor never meets.
	first := st.truncated.IsZero() && read.Floor.Checkpoint != ""
	if bs := st.ledger.blocks; len(bs) > 0 && !bs[0].first.LT(d.target.Position) && !first {
		return res, nil
	}
	floor, err := r.store.Advance(ctx, read, term, d.target, d.moves, w.ParseCheckpoint)
	if err != nil {
		return res, err
	}
	r.step(StepFloor, channel)
	// A commit that landed before the floor is seen here; one after it met
	// the floor and was refused.
	again, err := r.store.Load(ctx, channel)
	if err != nil {
		return res, err
	}
	upTo, err := safePoint(d.target, again, w.ParseCheckpoint)
	if err != nil {
		return res, errors.Wrapf(err, "retention: %s", channel)
	}
	if !st.truncated.IsZero() && !st.truncated.Before(upTo) {
		return res, nil
	}
	if err := w.Truncate(ctx, upTo.Position); err != nil {
		r.metrics.truncations.WithLabelValues("error").Inc()
		return res, errors.Wrapf(err, "retention: %s: truncate at %s", channel, upTo)
	}
	r.step(StepTruncated, channel)
	r.metrics.truncations.WithLabelValues("ok").Inc()
	st.truncated, res.Truncated = upTo, upTo
	if !d.kept.IsZero() {
		// What the policy dropped: the part of what went that lay at or
		// after where the log would have been kept without it.
		res.Dropped = droppedPast(d.kept, st.ledger.blocks, upTo.Position)
		st.dropped[0] += res.Dropped[0]
		st.dropped[1] += res.Dropped[1]
		r.metrics.dropped(channel, res.Dropped)
		r.log.Info("retention policy dropped what no consumer committed on", "channel", channel, "term", term,
			"messages", res.Dropped[0], "bytes", res.Dropped[1], "max_age", st.policy.MaxAge, "max_bytes", st.policy.MaxBytes,
			"kept_from", upTo.Marshal())
	}
	st.ledger.truncated(upTo.Position)
	if err := st.ledger.recount(ctx, w, upTo.Position); err != nil {
		r.log.Debug("retention: the first block stays counted whole", "channel", channel, "error", err.Error())
	}
	r.log.Debug("truncated", "channel", channel, "term", term, "at", upTo.Marshal(), "held_by", d.heldBy,
		"floor", floor.Checkpoint, "moved", len(d.moves))
	return res, nil
}

func (r *Retainer) step(s Step, channel string) {
	if r.after != nil {
		r.after(s, channel)
	}
}

// stateOf returns channel's state at term, a new one when the term moved.
func (r *Retainer) stateOf(channel string, term int64) *state {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[channel]
	policy := r.cfg.For(channel)
	if st == nil || st.term != term || st.policy != policy {
		st = &state{term: term, policy: policy, ledger: newLedger(policy, r.blocks)}
		r.states[channel] = st
		r.metrics.forget(channel)
	}
	return st
}

// forget drops channel's state: this node no longer owns it.
func (r *Retainer) forget(channel string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.states[channel]; ok {
		delete(r.states, channel)
		r.metrics.forget(channel)
	}
}

// inputOf is the rule's input: the consumers read, parsed, and the ledger.
func inputOf(read consumers.Channel, st *state, parse consumers.Parser, now time.Time) (input, error) {
	in := input{now: now, tail: st.ledger.tail, vchannels: st.ledger.vchannels, blocks: st.ledger.blocks, policy: st.policy}
	for _, c := range read.Consumers {
		resume, err := resumeOf(c, parse)
		if err != nil {
			return input{}, err
		}
		in.consumers = append(in.consumers, consumer{scope: c.Scope, resume: resume})
	}
	return in, nil
}

// resumeOf is where a stored consumer resumes (consumers.Checkpoint's
// ResumeAt, what the Checkpoints RPC tells it to read after): its resume
// point when the owner moved it, else its checkpoint. Not "the later of
// the two": a resume point is a tail, whose position is the watermark
// before its own, so it may follow the consumer's checkpoint by timetick
// and precede it by position, and a truncation at the checkpoint's
// position would then take the position the consumer reads from.
func resumeOf(c consumers.Checkpoint, parse consumers.Parser) (cursor.Checkpoint, error) {
	if c.Resume == "" {
		own, err := parse(c.Checkpoint)
		if err != nil {
			return cursor.Checkpoint{}, errors.Wrapf(err, "%s", c.Scope)
		}
		return own, nil
	}
	moved, err := parse(c.Resume)
	if err != nil {
		return cursor.Checkpoint{}, errors.Wrapf(err, "%s: resume point", c.Scope)
	}
	return moved, nil
}

// safePoint is the earliest of target and every consumer's resume point in
// again, a read made after the floor was recorded.
func safePoint(target cursor.Checkpoint, again consumers.Channel, parse consumers.Parser) (cursor.Checkpoint, error) {
	upTo := target
	for _, c := range again.Consumers {
		resume, err := resumeOf(c, parse)
		if err != nil {
			return cursor.Checkpoint{}, err
		}
		n, err := resume.Position.Compare(upTo.Position)
		if err != nil {
			return cursor.Checkpoint{}, errors.Wrapf(err, "%s", c.Scope)
		}
		if n < 0 {
			upTo = resume
		}
	}
	return upTo, nil
}

// droppedPast is the part of what a truncation at upTo removes from
// blocks (whole blocks before it, as ledger.truncated does) that lay at or
// after kept: the blocks that began there.
func droppedPast(kept message.ID, blocks []block, upTo message.ID) [2]int64 {
	var out [2]int64
	for _, b := range blocks {
		if !b.last.LT(upTo) {
			break
		}
		if !b.first.LT(kept) {
			out[0] += b.messages
			out[1] += b.bytes
		}
	}
	return out
}
