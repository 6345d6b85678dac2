package chainread

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Openers gives the opener of a segment's backend. The Reader never
// closes what it returns: the caller owns the openers.
type Openers interface {
	// Opener returns the opener of b (by its Name; Kind and Params are
	// what the chain recorded, for an Openers that checks them), or an
	// error matching ErrNoOpener.
	Opener(b chain.Backend) (walimpls.Opener, error)
}

// OpenerMap is Openers from a map of backend entry names (chain.Backend.Name)
// to their openers.
type OpenerMap map[string]walimpls.Opener

// Opener implements Openers.
func (m OpenerMap) Opener(b chain.Backend) (walimpls.Opener, error) {
	if o, ok := m[b.Name]; ok && o != nil {
		return o, nil
	}
	return nil, errors.Wrapf(ErrNoOpener, "backend %q (kind %s, channel %s)", b.Name, b.Kind, b.Channel)
}

// DefaultFollowInterval is Config.FollowInterval's default.
const DefaultFollowInterval = 250 * time.Millisecond

// Config is what a Reader reads. The zero value of every field but Chain
// and Openers is valid.
type Config struct {
	// Chain is the channel's chain; it must validate.
	Chain chain.Chain
	// Openers opens each segment's backend.
	Openers Openers
	// Options are each segment's WAL options; ReadOnly is forced. The
	// zero value takes the adaptor's defaults. Its Logger also receives
	// the scanners' own logs.
	Options adaptor.Options
	// Writer, when set, is the open writer of the chain's last segment
	// (its owner's WAL): scanners read the last segment through it instead
	// of a read-only WAL of their own, so that they see an append as soon
	// as its writer releases it, without waiting for a watermark in the
	// log. Only the segment that is last in Chain is read through it: a
	// segment a scanner learns of later (Follow) is read through a
	// read-only WAL. The Reader never closes it.
	Writer adaptor.WAL
	// Follow, when set, returns the channel's chain as it is now, for
	// example func(ctx context.Context) (chain.Chain, error) { return
	// store.Get(ctx, channel) }. A scanner that follows the last segment
	// live asks it every FollowInterval, and learns from it that the
	// segment was sealed (a migration): it then delivers the segment up
	// to its seal's End and goes on with the next segments (see the
	// package documentation). It is called on the scanner's goroutine,
	// with a context that the scanner's Close cancels, and the scanner
	// delivers nothing while it waits: it should answer promptly. Nil
	// keeps a scanner on the chain it started with: a seal recorded after
	// it started is never learned.
	Follow func(ctx context.Context) (chain.Chain, error)
	// FollowInterval is how often a scanner following the last segment
	// live asks Follow; default DefaultFollowInterval (250ms). It is how
	// long, at most, a scanner goes on waiting on a segment sealed under
	// it before it reads the segment's rest and moves to the next: the
	// delay a migration adds to live delivery. Each live scanner reads
	// the store once per interval (four reads a second at the default):
	// lower it for quicker hops, raise it when many scanners share a
	// store.
	FollowInterval time.Duration
	// Clock schedules the asks of Follow; default the real clock. Tests
	// give a clockwork.FakeClock and advance it instead of sleeping.
	Clock clockwork.Clock
}

// Validate reports a Config New refuses.
func (c Config) Validate() error {
	if c.Openers == nil {
		return errors.Wrap(ErrNoOpener, "chainread: nil Openers")
	}
	if err := c.Chain.Validate(); err != nil {
		return errors.Wrap(err, "chainread")
	}
	if c.FollowInterval < 0 {
		return errors.Newf("chainread: FollowInterval is negative (%s)", c.FollowInterval)
	}
	c.Options.ReadOnly = true
	if err := c.Options.Validate(); err != nil {
		return errors.Wrap(err, "chainread")
	}
	return nil
}

// Reader starts scanners over one chain.
type Reader struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns a Reader.
func New(cfg Config) (*Reader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Chain = cfg.Chain.Clone()
	cfg.Options.ReadOnly = true
	if cfg.FollowInterval == 0 {
		cfg.FollowInterval = DefaultFollowInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	log := cfg.Options.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reader{cfg: cfg, log: log.With("channel", cfg.Chain.Channel)}, nil
}

// Chain returns the chain the Reader was given. Scanners that learn later
// chains (Config.Follow) keep them to themselves: this one does not change.
func (r *Reader) Chain() chain.Chain { return r.cfg.Chain.Clone() }

// ReadOption configures a scanner.
type ReadOption struct {
	// Name identifies the scanner in logs and metrics.
	Name string
	// DeliverPolicy says where to start; the zero value is cursor.All. Its
	// positions are chain IDs (cursor.ChainID, cursor.IDOf) or bare IDs
	// of segment 0's backend. cursor.Tail is refused.
	DeliverPolicy cursor.Policy
	// Filter selects what is delivered, in every segment (adaptor.Filter).
	Filter adaptor.Filter
}

// startPosition returns the chain position p starts at (StartFrom,
// StartAfter, After) and true; false for a policy without one.
func startPosition(p cursor.Policy) (cursor.Position, bool) {
	id, _, ok := p.StartID()
	if !ok {
		return cursor.Position{}, false
	}
	return cursor.PositionOf(id), true
}

// firstSegment decides where a scanner of policy p starts in c: the index
// of the first segment it reads. A position in a dropped segment is
// walimpls.ErrPositionGone, one after the last chain.ErrUnknownSegment.
// Pure logic.
func firstSegment(c chain.Chain, p cursor.Policy) (uint64, error) {
	switch {
	case p.IsAll():
		return c.First(), nil
	case p.IsLatest():
		return c.Last().Index, nil
	}
	if tt, ok := p.FromTimeTick(); ok {
		for _, s := range c.Segments {
			if s.Seal == nil || s.Seal.TimeTick >= tt {
				return s.Index, nil
			}
		}
		return c.Last().Index, nil
	}
	pos, ok := startPosition(p)
	if !ok {
		// A tail counts one backend log's entries, not a chain's messages.
		return 0, errors.Wrapf(adaptor.ErrInvalidOptions, "chainread: start %s: not a chain's start", p)
	}
	if err := pos.Validate(); err != nil {
		// Both causes stay visible to errors.Is (cockroachdb's Wrapf takes
		// one %w).
		return 0, errors.WithStack(fmt.Errorf("chainread: start %s: %w: %w", p, err, walimpls.ErrInvalidPosition))
	}
	if pos.IsZero() {
		return 0, errors.Wrapf(walimpls.ErrInvalidPosition, "chainread: start %s: an empty position", p)
	}
	s, err := c.Locate(pos)
	if err != nil {
		return 0, err
	}
	return s.Index, nil
}

// segmentPolicy decides how the scanner reads a segment under policy p:
// where the segment's scanner starts (decode turns the start's backend
// ID, as a string, into the segment backend's ID) and what it filters.
// first says whether the segment is where the scanner started. Pure logic
// but for decode.
func segmentPolicy(p cursor.Policy, f adaptor.Filter, first bool, decode func(string) (message.ID, error)) (cursor.Policy, adaptor.Filter, error) {
	if !first {
		if _, ok := p.FromTimeTick(); ok {
			return p, f, nil
		}
		if cp, ok := p.After(); ok {
			f.TimeTickAbove = max(f.TimeTickAbove, cp.TimeTick)
		}
		return cursor.All(), f, nil
	}
	pos, ok := startPosition(p)
	if !ok {
		return p, f, nil
	}
	bid, err := decode(pos.ID)
	if err != nil {
		return cursor.Policy{}, f, err
	}
	return p.WithStartID(bid), f, nil
}

// Read starts a scanner that delivers one message per receive. ctx bounds
// the start (the first segment's open); the scanner outlives it.
func (r *Reader) Read(ctx context.Context, opt ReadOption) (walimpls.Scanner, error) {
	return r.start(ctx, opt, false)
}

// ReadBatches starts a scanner that delivers what Read's does, several
// messages per receive.
func (r *Reader) ReadBatches(ctx context.Context, opt ReadOption) (walimpls.BatchScanner, error) {
	return r.start(ctx, opt, true)
}
