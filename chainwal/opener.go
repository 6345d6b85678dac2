package chainwal

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
)

// ErrInvalidConfig means a Config no Opener can run with.
var ErrInvalidConfig = errors.New("chainwal: invalid config")

// ErrUnknownBackend means a migration names a backend entry the node's
// configuration does not have.
var ErrUnknownBackend = errors.New("chainwal: unknown backend entry")

// Config is what an Opener needs; every field but Describe, Logger and WAL
// is required.
type Config struct {
	// Store holds the chains.
	Store *chain.Store
	// Openers opens each segment's backend by its entry name.
	Openers chainread.Openers
	// Default is the backend entry a channel without a chain begins on
	// (Channel is ignored: segment 0 uses the channel's own name).
	Default chain.Backend
	// Describe returns the backend entry a migration may name (Channel is
	// ignored), or an error; nil allows Default only.
	Describe func(name string) (chain.Backend, error)
	// WAL are the options of every segment's WAL; TimeTickFloor is set per
	// segment from its chain. Its hooks (OnFirstAppend) see the writers'
	// events, and each writer's OpenTimes are the chain WAL's.
	WAL adaptor.Options
	// FollowInterval is how often a scanner following the last segment
	// asks the store whether it was sealed (chainread); zero is
	// chainread's default.
	FollowInterval time.Duration
	// Logger logs migration steps; nil discards.
	Logger *slog.Logger
	// AfterStep, when set, is called after each step of a migration or a
	// prune this Opener takes, with the channel's name: for crash tests
	// (walnode's -crash-after kills the process there) and tracing. It
	// must not block.
	AfterStep func(step Step, channel string)
}

// Step names a point between two steps of a migration or a prune, where a
// crash leaves the work half-done for the next open to finish.
type Step string

// The steps AfterStep sees.
const (
	// StepFenced: the last segment is fenced at the migration's term and
	// its end read; the seal is not recorded.
	StepFenced Step = "fenced"
	// StepSealed: the seal and the new segment are recorded; the new
	// segment is not opened.
	StepSealed Step = "sealed"
	// StepOpened: the new segment's writer is open; nothing is appended
	// to it yet.
	StepOpened Step = "opened"
	// StepPruneDeleted: the pruned segments' data is deleted; they are
	// still in the chain.
	StepPruneDeleted Step = "prune-deleted"
)

// after calls AfterStep.
func (o *Opener) after(step Step, channel string) {
	if o.cfg.AfterStep != nil {
		o.cfg.AfterStep(step, channel)
	}
}

// Validate reports what is missing or wrong.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.Wrap(ErrInvalidConfig, "nil Store")
	case c.Openers == nil:
		return errors.Wrap(ErrInvalidConfig, "nil Openers")
	case c.Default.Name == "" || c.Default.Kind == "":
		return errors.Wrap(ErrInvalidConfig, "Default names no backend entry (Name and Kind are required)")
	case c.FollowInterval < 0:
		return errors.Wrapf(ErrInvalidConfig, "negative FollowInterval %s", c.FollowInterval)
	}
	if c.WAL.ReadOnly {
		return errors.Wrap(ErrInvalidConfig, "WAL options are a writer's: ReadOnly is not allowed")
	}
	if err := c.WAL.Validate(); err != nil {
		return errors.WithStack(errmark.Mark(err, ErrInvalidConfig))
	}
	return nil
}

// Opener opens channels as chains. Safe for concurrent use; it owns no
// goroutine and nothing to close (the store and openers are the caller's).
type Opener struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns an Opener.
func New(cfg Config) (*Opener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Opener{cfg: cfg, log: log}, nil
}

// SegmentChannel is the name of a channel's segment index on its backend:
// the channel's own name for segment 0 (a channel from before chains keeps
// its data), "<channel>-s<index>" for the others, so that no two segments
// of a chain share a backend channel, also when a chain comes back to a
// backend it was on.
func SegmentChannel(channel string, index uint64) string {
	if index == 0 {
		return channel
	}
	return channel + "-s" + strconv.FormatUint(index, 10)
}

// Chain returns channel's chain as stored; chain.ErrNotFound when it has
// none yet (its first open creates it).
func (o *Opener) Chain(ctx context.Context, channel string) (chain.Chain, error) {
	return o.cfg.Store.Get(ctx, channel)
}

// Open implements walmanager.WALOpener: it opens ch's chain at ch.Term,
// finishing a migration pending at or below it (see the package
// documentation).
func (o *Opener) Open(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
	c, sealedNow, err := o.chainAt(ctx, ch)
	if err != nil {
		return nil, err
	}
	last := c.Last()
	opener, err := o.cfg.Openers.Opener(last.Backend)
	if err != nil {
		return nil, errors.Wrapf(err, "chainwal: open %s at term %d: segment %d", ch.Name, ch.Term, last.Index)
	}
	opts := o.cfg.WAL
	opts.TimeTickFloor = max(opts.TimeTickFloor, floorOf(c))
	opts.MetricsChannel = ch.Name
	seg, err := adaptor.Open(ctx, opener, adaptor.Channel{Name: last.Backend.Channel, Term: ch.Term}, opts)
	if err != nil {
		return nil, errors.Wrapf(err, "chainwal: open %s at term %d: segment %d on %s", ch.Name, ch.Term, last.Index, last.Backend)
	}
	w, err := newWAL(o, ch, c, seg)
	if err != nil {
		_ = seg.Close()
		return nil, err
	}
	if sealedNow {
		o.after(StepOpened, ch.Name)
	}
	return w, nil
}

// chainAt reads ch's chain, creating it or finishing its pending
// migration as an open at ch.Term must (sealed: this call sealed), and
// checks that ch.Term may write its last segment.
func (o *Opener) chainAt(ctx context.Context, ch adaptor.Channel) (c chain.Chain, sealed bool, err error) {
	c, err = o.cfg.Store.Get(ctx, ch.Name)
	if errors.Is(err, chain.ErrNotFound) {
		b := o.cfg.Default
		b.Channel = ch.Name
		c, err = o.cfg.Store.Create(ctx, ch.Name, b, 0)
		if errors.Is(err, chain.ErrExists) {
			c, err = o.cfg.Store.Get(ctx, ch.Name)
		}
	}
	if err != nil {
		return chain.Chain{}, false, errors.Wrapf(err, "chainwal: open %s at term %d", ch.Name, ch.Term)
	}
	if p := c.Pending; p != nil && p.Term <= ch.Term {
		if c, err = o.seal(ctx, c); err != nil {
			return chain.Chain{}, false, err
		}
		sealed = true
	}
	if last := c.Last(); last.FirstTerm > ch.Term {
		return chain.Chain{}, false, walimpls.MarkNotStored(errors.Wrapf(&walimpls.FencedError{Channel: ch.Name, Term: ch.Term, CurrentTerm: last.FirstTerm},
			"chainwal: open %s: its segment %d on %s began at term %d", ch.Name, last.Index, last.Backend, last.FirstTerm))
	}
	return c, sealed, nil
}

// seal runs steps 2 and 3 of c's pending migration: fence the last
// segment at the migration's term, read its end, record the seal.
func (o *Opener) seal(ctx context.Context, c chain.Chain) (chain.Chain, error) {
	p, last := *c.Pending, c.Last()
	where := errors.Wrapf
	opener, err := o.cfg.Openers.Opener(last.Backend)
	if err != nil {
		return chain.Chain{}, where(err, "chainwal: %s: seal segment %d for the %s", c.Channel, last.Index, p)
	}
	// The target is checked before the fence: a node that cannot open it
	// would fence the old segment's writer and then fail to seal, leaving
	// the channel unwritable until someone cancels.
	if _, err := o.cfg.Openers.Opener(p.Target); err != nil {
		return chain.Chain{}, where(err, "chainwal: %s: this node cannot open the target of the %s: fix its configuration, or cancel the migration (walctl migrate -cancel)", c.Channel, p)
	}
	start := time.Now()
	floor := floorOf(c)
	opts := o.cfg.WAL
	opts.TimeTickFloor = 0
	opts.Metrics = nil // the sealing open is not the segment's writer
	end, err := adaptor.FenceEnd(ctx, opener, adaptor.Channel{Name: last.Backend.Channel, Term: p.Term}, floor, opts)
	if err != nil {
		return chain.Chain{}, where(err, "chainwal: %s: fence segment %d on %s for the %s", c.Channel, last.Index, last.Backend, p)
	}
	o.after(StepFenced, c.Channel)
	req := chain.SealRequest{Segment: last.Index, Term: p.Term, TimeTick: end.TimeTick}
	if !end.Last.IsZero() {
		req.End = end.Last.Marshal()
	}
	sealed, err := o.cfg.Store.Seal(ctx, c.Channel, req)
	if err != nil {
		return chain.Chain{}, where(err, "chainwal: %s: record the seal of segment %d for the %s", c.Channel, last.Index, p)
	}
	o.after(StepSealed, c.Channel)
	o.log.Info("segment sealed", "channel", c.Channel, "segment", last.Index, "backend", last.Backend.String(),
		"term", p.Term, "end", req.End, "timetick", req.TimeTick, "next", sealed.Last().Backend.String(), "took", time.Since(start))
	return sealed, nil
}

// floorOf is the timetick c's last segment's writer allocates above: the
// last seal's.
func floorOf(c chain.Chain) uint64 {
	if n := len(c.Segments); n > 1 {
		return c.Segments[n-2].Seal.TimeTick
	}
	return 0
}
