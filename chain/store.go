package chain

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/walimpls"
)

// maxAttempts bounds how often one change reads again after another
// writer got there first.
const maxAttempts = 64

// Options configure a Store. The zero value is valid.
type Options struct {
	// CheckBackend, when set, checks a migration's target when the
	// migration is requested and again just before Seal writes it into the
	// chain: for example that its kind is registered and its params build
	// an opener. Its error refuses the change.
	CheckBackend func(ctx context.Context, b Backend) error
	// Clock gives the times recorded in the chain, in UTC; nil is the real
	// clock. Tests pass a fake one so that recorded times are known.
	Clock clockwork.Clock
}

// Store reads and changes chains in a meta.Store. Every change is a
// conditional write (see the package documentation); a change whose answer
// was lost may have been applied, and calling it again is a no-op or an
// error that says it happened. Safe for concurrent use.
type Store struct {
	kv   meta.Store
	opts Options
}

// NewStore returns a Store over kv, which it does not close.
func NewStore(kv meta.Store, opts Options) *Store {
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	return &Store{kv: kv, opts: opts}
}

// MigrationRequest asks to move a channel's writes to another backend.
type MigrationRequest struct {
	// Segment is the last segment as the caller read it.
	Segment uint64
	// Target is where the next segment will live.
	Target Backend
	// Term will seal Segment and open the next one; the caller took it
	// from the channel's term authority.
	Term int64
	// By names who asked, for operators.
	By string
}

// SealRequest records the end of a fenced segment.
type SealRequest struct {
	// Segment is the segment sealed: the chain's last.
	Segment uint64
	// Term is the pending migration's term, at which the segment was
	// fenced on its backend.
	Term int64
	// End is the last message of the segment read after the fence ("" for
	// none), in its backend's marshaled form.
	End string
	// TimeTick is the highest timetick of the segment up to End, or the
	// previous seal's when it holds none.
	TimeTick uint64
}

// Get returns channel's chain; ErrNotFound when it has none.
func (s *Store) Get(ctx context.Context, channel string) (Chain, error) {
	c, _, err := s.get(ctx, channel)
	return c, err
}

// Create records channel's first segment, on b from term firstTerm.
// ErrExists when the channel has a chain.
func (s *Store) Create(ctx context.Context, channel string, b Backend, firstTerm int64) (Chain, error) {
	b.Params = compactJSON(b.Params)
	c := Chain{Channel: channel, Segments: []Segment{{Backend: b, FirstTerm: firstTerm, Created: s.now()}}}
	data, err := Encode(c)
	if err != nil {
		return Chain{}, err
	}
	if _, err := s.kv.Put(ctx, Key(channel), data, meta.Absent); err != nil {
		if errors.Is(err, meta.ErrConflict) {
			return Chain{}, errors.Wrapf(ErrExists, "chain %s", channel)
		}
		return Chain{}, errors.Wrapf(err, "chain %s: create", channel)
	}
	return c, nil
}

// BeginMigration records a pending migration (step 1). Asking again for
// the pending one is a no-op; see the package documentation for the
// refusals.
func (s *Store) BeginMigration(ctx context.Context, channel string, req MigrationRequest) (Chain, error) {
	req.Target.Params = compactJSON(req.Target.Params)
	if err := req.Target.Validate(); err != nil {
		return Chain{}, errors.Wrapf(err, "chain %s: migration target", channel)
	}
	if err := s.checkBackend(ctx, channel, req.Target); err != nil {
		return Chain{}, err
	}
	return s.update(ctx, channel, func(c *Chain) (bool, error) {
		last := c.Last()
		if p := c.Pending; p != nil {
			if last.Index == req.Segment && p.Term == req.Term && p.By == req.By && p.Target.Equal(req.Target) {
				return false, nil
			}
			return false, errors.Wrapf(ErrMigrationPending, "chain %s: segment %d has a %s: finish it or cancel it first", channel, last.Index, *p)
		}
		if last.Index != req.Segment {
			return false, mismatch(*c, req.Segment)
		}
		switch {
		case req.Target.Name == last.Backend.Name:
			return false, errors.Wrapf(ErrSameBackend, "chain %s: segment %d is on %s already", channel, last.Index, last.Backend)
		case req.Term <= last.FirstTerm:
			return false, errors.Wrapf(ErrStaleTerm, "chain %s: migration at term %d, but segment %d began at term %d: take a new term",
				channel, req.Term, last.Index, last.FirstTerm)
		case len(c.Segments) >= MaxSegments:
			return false, errors.Wrapf(ErrInvalid, "chain %s keeps %d segments, the most it may: prune it first", channel, len(c.Segments))
		}
		c.Pending = &Migration{Target: req.Target, Term: req.Term, By: req.By, At: s.now()}
		return true, nil
	})
}

// CancelMigration removes the migration pending at term on segment, the
// last (before its seal only; a sealed migration is undone by migrating
// again).
func (s *Store) CancelMigration(ctx context.Context, channel string, segment uint64, term int64) (Chain, error) {
	return s.update(ctx, channel, func(c *Chain) (bool, error) {
		if seg, ok := c.Segment(segment); ok && seg.Seal != nil && seg.Seal.Term == term {
			return false, errors.Wrapf(ErrSegmentMismatch, "chain %s: segment %d was %s: too late to cancel; migrate again to undo it",
				channel, segment, *seg.Seal)
		}
		if c.Last().Index != segment {
			return false, mismatch(*c, segment)
		}
		if err := pendingAt(*c, term); err != nil {
			return false, err
		}
		c.Pending = nil
		return true, nil
	})
}

// Seal seals the last segment at the pending migration's term with its
// end, and appends the next segment on the migration's target, in one
// conditional write (step 3). Sealing again what is sealed at req.Term is
// a no-op that returns the stored chain, whose End is the one readers use.
func (s *Store) Seal(ctx context.Context, channel string, req SealRequest) (Chain, error) {
	if req.End != "" {
		if err := cursor.ValidateID("seal end", req.End); err != nil {
			return Chain{}, errmark.Mark(errors.Wrapf(err, "chain %s: seal", channel), ErrInvalid)
		}
	}
	return s.update(ctx, channel, func(c *Chain) (bool, error) {
		if seg, ok := c.Segment(req.Segment); ok && seg.Seal != nil && seg.Seal.Term == req.Term {
			return false, nil
		}
		if c.Last().Index != req.Segment {
			return false, mismatch(*c, req.Segment)
		}
		if err := pendingAt(*c, req.Term); err != nil {
			return false, err
		}
		m := *c.Pending
		if err := s.checkBackend(ctx, channel, m.Target); err != nil {
			return false, err
		}
		now := s.now()
		last := &c.Segments[len(c.Segments)-1]
		last.Seal = &Seal{Term: req.Term, End: req.End, TimeTick: req.TimeTick, At: now}
		c.Segments = append(c.Segments, Segment{Index: last.Index + 1, Backend: m.Target, FirstTerm: m.Term, Created: now})
		c.Pending = nil
		return true, nil
	})
}

// DropFront drops the segments before index before, which the pruner
// found wholly below every checkpoint and deleted from their backends.
// last is the chain's last segment as the caller read it; it is never
// dropped. Segments dropped already are not an error.
func (s *Store) DropFront(ctx context.Context, channel string, last, before uint64) (Chain, error) {
	if before > last {
		return Chain{}, errors.Wrapf(ErrInvalid, "chain %s: drop before segment %d: the last segment %d is never dropped", channel, before, last)
	}
	return s.update(ctx, channel, func(c *Chain) (bool, error) {
		if c.Last().Index != last {
			return false, mismatch(*c, last)
		}
		if before <= c.First() {
			return false, nil
		}
		c.Segments = append([]Segment(nil), c.Segments[before-c.First():]...)
		return true, nil
	})
}

// Remove removes channel's chain, whose segments' data the caller deleted
// from their backends first (a channel deleted for good). last is the
// chain's last segment as the caller read it: a chain that moved on since
// is ErrSegmentMismatch and stays. A chain already gone is not an error.
func (s *Store) Remove(ctx context.Context, channel string, last uint64) error {
	for attempt := 1; ; attempt++ {
		cur, rev, err := s.get(ctx, channel)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		case cur.Last().Index != last:
			return mismatch(cur, last)
		}
		err = s.kv.Delete(ctx, Key(channel), rev)
		switch {
		case err == nil, errors.Is(err, meta.ErrNotFound):
			return nil
		case !errors.Is(err, meta.ErrConflict) || attempt == maxAttempts:
			return errors.Wrapf(err, "chain %s: remove", channel)
		}
	}
}

// List returns every chain in the store, in channel name order.
func (s *Store) List(ctx context.Context) ([]Chain, error) {
	kvs, _, err := s.kv.List(ctx, keyPrefix)
	if err != nil {
		return nil, errors.Wrap(err, "chain: list")
	}
	out := make([]Chain, 0, len(kvs))
	for _, kv := range kvs {
		c, err := Decode(kv.Key, kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// update reads channel's chain, lets change decide on a copy, and writes
// the copy conditionally on the revision read when change reports it
// changed something; after a conflict it reads and decides again. It
// returns the chain as stored.
func (s *Store) update(ctx context.Context, channel string, change func(c *Chain) (bool, error)) (Chain, error) {
	for attempt := 1; ; attempt++ {
		cur, rev, err := s.get(ctx, channel)
		if err != nil {
			return Chain{}, err
		}
		next := cur.Clone()
		changed, err := change(&next)
		switch {
		case err != nil:
			return Chain{}, err
		case !changed:
			return cur, nil
		}
		data, err := Encode(next)
		if err != nil {
			return Chain{}, err
		}
		_, err = s.kv.Put(ctx, Key(channel), data, rev)
		switch {
		case err == nil:
			return next, nil
		case !errors.Is(err, meta.ErrConflict) || attempt == maxAttempts:
			return Chain{}, errors.Wrapf(err, "chain %s: write", channel)
		}
	}
}

func (s *Store) get(ctx context.Context, channel string) (Chain, int64, error) {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return Chain{}, 0, errmark.Mark(errors.Wrap(err, "chain"), ErrInvalid)
	}
	key := Key(channel)
	kv, err := s.kv.Get(ctx, key)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return Chain{}, 0, errmark.Mark(errors.Wrapf(err, "chain %s", channel), ErrNotFound)
		}
		return Chain{}, 0, errors.Wrapf(err, "chain %s: read", channel)
	}
	c, err := Decode(key, kv.Value)
	if err != nil {
		return Chain{}, 0, err
	}
	return c, kv.Revision, nil
}

func (s *Store) checkBackend(ctx context.Context, channel string, b Backend) error {
	if s.opts.CheckBackend == nil {
		return nil
	}
	if err := s.opts.CheckBackend(ctx, b); err != nil {
		return errors.Wrapf(err, "chain %s: backend %s refused", channel, b)
	}
	return nil
}

func (s *Store) now() time.Time { return s.opts.Clock.Now().UTC() }

// mismatch is the ErrSegmentMismatch of a caller that decided on segment
// want of c.
func mismatch(c Chain, want uint64) error {
	last := c.Last()
	what := "the chain moved on"
	if want < c.First() {
		what = "that segment was pruned"
	}
	return errors.Wrapf(ErrSegmentMismatch, "chain %s: the last segment is %d on %s, not %d (%s): read the chain again and decide again",
		c.Channel, last.Index, last.Backend, want, what)
}

// pendingAt reports why c has no migration pending at term.
func pendingAt(c Chain, term int64) error {
	switch {
	case c.Pending == nil:
		return errors.Wrapf(ErrNoMigration, "chain %s: segment %d has no migration pending (cancelled, or never requested)", c.Channel, c.Last().Index)
	case c.Pending.Term != term:
		return errors.Wrapf(ErrMigrationMismatch, "chain %s: the pending migration is a %s, not at term %d", c.Channel, *c.Pending, term)
	}
	return nil
}
