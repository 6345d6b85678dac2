package consumers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/walimpls"
)

// Scope names one consumer of a channel.
type Scope struct {
	// Consumer is the consumer's name.
	Consumer string
	// VChannel is the vchannel it processes; "" for the whole channel.
	VChannel string
}

func (s Scope) String() string {
	if s.VChannel == "" {
		return "consumer " + s.Consumer
	}
	return "consumer " + s.Consumer + " of vchannel " + s.VChannel
}

// Validate reports an ErrInvalid error for a scope no store holds.
func (s Scope) Validate() error {
	if err := walimpls.ValidateChannelName(s.Consumer); err != nil {
		return errors.WithStack(fmt.Errorf("consumer name: %w: %w", ErrInvalid, err))
	}
	if s.VChannel != "" {
		if err := walimpls.ValidateChannelName(s.VChannel); err != nil {
			return errors.WithStack(fmt.Errorf("vchannel: %w: %w", ErrInvalid, err))
		}
	}
	return nil
}

// Checkpoint is one consumer's stored checkpoint.
type Checkpoint struct {
	Scope
	// Checkpoint is what the consumer committed last (an
	// cursor.Checkpoint's Marshal form) and TimeTick its timetick.
	Checkpoint string
	TimeTick   uint64
	// Term is the term of the owner that stored it, At when.
	Term int64
	At   time.Time
	// Resume, when set, is a later point the owner moved this vchannel
	// consumer to before it truncated past Checkpoint: its vchannel had no
	// message in between. ResumeTimeTick is its timetick.
	Resume         string
	ResumeTimeTick uint64
	// Revision is the store revision of the record.
	Revision int64
}

// ResumeAt is where the consumer resumes: Resume when set, Checkpoint
// otherwise.
func (c Checkpoint) ResumeAt() string {
	if c.Resume != "" {
		return c.Resume
	}
	return c.Checkpoint
}

// Floor is a channel's truncation point: its owner truncates the log
// before it (at its position), and no commit before it is stored.
type Floor struct {
	// Checkpoint is the point (an cursor.Checkpoint's Marshal form); ""
	// when the channel was never truncated.
	Checkpoint string
	TimeTick   uint64
	// Term is the term of the owner that recorded it, At when.
	Term int64
	At   time.Time
	// Revision is the store revision of the record; 0 when there is none.
	Revision int64
}

// Channel is what the store holds for one channel.
type Channel struct {
	Name string
	// Consumers are the channel's consumers, ordered by vchannel then name
	// (the channel's own consumers first).
	Consumers []Checkpoint
	Floor     Floor
}

// Find returns the consumer of scope sc, if the channel has it.
func (c Channel) Find(sc Scope) (Checkpoint, bool) {
	for _, cp := range c.Consumers {
		if cp.Scope == sc {
			return cp, true
		}
	}
	return Checkpoint{}, false
}

// Parser decodes a channel's checkpoints (adaptor.WAL.ParseCheckpoint), so
// that the store can order their positions.
type Parser func(string) (cursor.Checkpoint, error)

// Options configure a Store; the zero value takes the defaults.
type Options struct {
	// Prefix is where the keys live in the meta store; default
	// DefaultPrefix. It must end with "/".
	Prefix string
	// Clock stamps the records (Checkpoint.At, Floor.At); default the
	// real one.
	Clock clockwork.Clock
}

// Store keeps the consumers' checkpoints in a meta.Store. Safe for
// concurrent use, in one process or several on the same store.
type Store struct {
	kv    meta.Store
	keys  keys
	clock clockwork.Clock
}

// maxConflicts bounds the retries of a write that met another's.
const maxConflicts = 32

// NewStore returns a store over kv; the caller owns kv.
func NewStore(kv meta.Store, opts Options) (*Store, error) {
	if kv == nil {
		return nil, errors.Wrap(ErrInvalid, "consumers: a meta store is required")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Prefix[len(opts.Prefix)-1] != '/' {
		return nil, errors.Wrapf(ErrInvalid, "consumers: prefix %q must end with /", opts.Prefix)
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	return &Store{kv: kv, keys: keys{prefix: opts.Prefix}, clock: opts.Clock}, nil
}

// Load returns what the store holds for channel (an empty Channel when
// nothing), read at one revision.
func (s *Store) Load(ctx context.Context, channel string) (Channel, error) {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return Channel{}, errors.WithStack(fmt.Errorf("consumers: %w: %w", ErrInvalid, err))
	}
	kvs, _, err := s.kv.List(ctx, s.keys.channel(channel))
	if err != nil {
		return Channel{}, errors.Wrapf(err, "consumers: load channel %s", channel)
	}
	chs, err := s.collect(kvs)
	if err != nil {
		return Channel{}, err
	}
	if c, ok := chs[channel]; ok {
		return c, nil
	}
	return Channel{Name: channel}, nil
}

// List returns every channel with a consumer or a floor, by name.
func (s *Store) List(ctx context.Context) ([]Channel, error) {
	kvs, _, err := s.kv.List(ctx, s.keys.prefix)
	if err != nil {
		return nil, errors.Wrap(err, "consumers: list")
	}
	chs, err := s.collect(kvs)
	if err != nil {
		return nil, err
	}
	out := make([]Channel, 0, len(chs))
	for _, c := range chs {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Channel) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// collect decodes listed keys into channels.
func (s *Store) collect(kvs []meta.KV) (map[string]Channel, error) {
	out := map[string]Channel{}
	for _, kv := range kvs {
		channel, floor, sc, ok := s.keys.parse(kv.Key)
		if !ok {
			continue
		}
		c := out[channel]
		c.Name = channel
		if floor {
			f, err := decodeFloor(kv)
			if err != nil {
				return nil, err
			}
			c.Floor = f
		} else {
			cp, err := decodeCheckpoint(kv, sc)
			if err != nil {
				return nil, err
			}
			c.Consumers = append(c.Consumers, cp)
		}
		out[channel] = c
	}
	for name, c := range out {
		slices.SortFunc(c.Consumers, func(a, b Checkpoint) int {
			return cmp.Or(cmp.Compare(a.VChannel, b.VChannel), cmp.Compare(a.Consumer, b.Consumer))
		})
		out[name] = c
	}
	return out, nil
}

func decodeFloor(kv meta.KV) (Floor, error) {
	var v floorValue
	if err := decode(kv.Key, kv.Value, &v, func() int { return v.V }); err != nil {
		return Floor{}, err
	}
	return Floor{Checkpoint: v.CP, TimeTick: v.TT, Term: v.Term, At: v.At, Revision: kv.Revision}, nil
}

func decodeCheckpoint(kv meta.KV, sc Scope) (Checkpoint, error) {
	var v checkpointValue
	if err := decode(kv.Key, kv.Value, &v, func() int { return v.V }); err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Scope: sc, Checkpoint: v.CP, TimeTick: v.TT, Term: v.Term, At: v.At,
		Resume: v.Resume, ResumeTimeTick: v.RTT, Revision: kv.Revision}, nil
}

func (c Checkpoint) value() checkpointValue {
	return checkpointValue{V: formatVersion, CP: c.Checkpoint, TT: c.TimeTick, Term: c.Term, At: c.At.UTC(),
		Resume: c.Resume, RTT: c.ResumeTimeTick}
}

// get reads one key: its value and revision, or revision meta.Absent when
// it does not exist.
func (s *Store) get(ctx context.Context, key string) (meta.KV, error) {
	kv, err := s.kv.Get(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return meta.KV{Key: key, Revision: meta.Absent}, nil
	}
	return kv, err
}

// Commit stores cp as the checkpoint of the consumer sc of channel, for the
// channel's owner at term; parse decodes the channel's checkpoints. It
// returns the checkpoint as stored. A commit before the stored checkpoint
// is ErrBackwards, one before the channel's floor ErrTruncated, one through
// an owner of a lower term than the stored checkpoint's or the floor's
// ErrStaleTerm; each is a *RefusedError naming what is stored. Committing
// the stored checkpoint again returns it and writes nothing.
func (s *Store) Commit(ctx context.Context, channel string, sc Scope, cp cursor.Checkpoint, term int64, parse Parser) (Checkpoint, error) {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return Checkpoint{}, errors.WithStack(fmt.Errorf("consumers: commit: %w: %w", ErrInvalid, err))
	}
	if err := sc.Validate(); err != nil {
		return Checkpoint{}, errors.Wrapf(err, "consumers: commit on %s", channel)
	}
	if cp.IsZero() {
		return Checkpoint{}, errors.Wrapf(ErrInvalid, "consumers: commit on %s, %s: the zero checkpoint", channel, sc)
	}
	if parse == nil {
		return Checkpoint{}, errors.Wrapf(ErrInvalid, "consumers: commit on %s: no checkpoint parser", channel)
	}
	fkey, ckey := s.keys.floor(channel), s.keys.consumer(channel, sc)
	for range maxConflicts {
		fkv, err := s.get(ctx, fkey)
		if err != nil {
			return Checkpoint{}, errors.Wrapf(err, "consumers: commit on %s: read the floor", channel)
		}
		ckv, err := s.get(ctx, ckey)
		if err != nil {
			return Checkpoint{}, errors.Wrapf(err, "consumers: commit on %s, %s: read the checkpoint", channel, sc)
		}
		refused := &RefusedError{Channel: channel, Scope: sc}
		next := Checkpoint{Scope: sc, Checkpoint: cp.Marshal(), TimeTick: cp.TimeTick, Term: term, At: s.clock.Now().UTC()}
		if ckv.Revision != meta.Absent {
			cur, err := decodeCheckpoint(ckv, sc)
			if err != nil {
				return Checkpoint{}, err
			}
			refused.Stored = cur
			if cur.Term > term {
				refused.Reason, refused.detail = ErrStaleTerm, fmt.Sprintf("term %d, the stored checkpoint is of term %d", term, cur.Term)
				return Checkpoint{}, errors.WithStack(refused)
			}
			stored, err := parse(cur.Checkpoint)
			if err != nil {
				return Checkpoint{}, errors.WithStack(fmt.Errorf("consumers: channel %s, %s: the stored checkpoint %q: %w: %w", channel, sc, cur.Checkpoint, ErrInvalid, err))
			}
			n, err := cp.Compare(stored)
			if err != nil {
				return Checkpoint{}, errors.WithStack(fmt.Errorf("consumers: channel %s, %s: %s against the stored %s: %w: %w", channel, sc, cp, stored, ErrInvalid, err))
			}
			switch {
			case n < 0:
				refused.Reason, refused.detail = ErrBackwards, fmt.Sprintf("%s is before the stored %s", cp.Marshal(), cur.Checkpoint)
				return Checkpoint{}, errors.WithStack(refused)
			case n == 0:
				return cur, nil
			}
			// A resume point the owner moved it to stays while the
			// consumer's own checkpoint is before it.
			if cur.Resume != "" {
				if r, err := parse(cur.Resume); err == nil && cp.Before(r) {
					next.Resume, next.ResumeTimeTick = cur.Resume, cur.ResumeTimeTick
				}
			}
		}
		if fkv.Revision != meta.Absent {
			f, err := decodeFloor(fkv)
			if err != nil {
				return Checkpoint{}, err
			}
			refused.Floor = f
			if f.Term > term {
				refused.Reason, refused.detail = ErrStaleTerm, fmt.Sprintf("term %d, the channel was truncated at term %d", term, f.Term)
				return Checkpoint{}, errors.WithStack(refused)
			}
			if before, err := positionBefore(cp, f.Checkpoint, parse); err != nil {
				return Checkpoint{}, errors.Wrapf(err, "consumers: commit on %s, %s", channel, sc)
			} else if before {
				refused.Reason, refused.detail = ErrTruncated, fmt.Sprintf("%s is before the truncation point %s", cp.Marshal(), f.Checkpoint)
				return Checkpoint{}, errors.WithStack(refused)
			}
		}
		rev, err := s.kv.Commit(ctx, meta.Txn{
			Conds: []meta.Cond{{Key: fkey, Revision: fkv.Revision}, {Key: ckey, Revision: ckv.Revision}},
			Puts:  []meta.KV{{Key: ckey, Value: encode(next.value())}},
		})
		if errors.Is(err, meta.ErrConflict) {
			continue // a truncation or another commit of this consumer: decide again
		}
		if err != nil {
			return Checkpoint{}, errors.Wrapf(err, "consumers: commit on %s, %s", channel, sc)
		}
		next.Revision = rev
		return next, nil
	}
	return Checkpoint{}, errors.Wrapf(meta.ErrConflict, "consumers: commit on %s, %s: changed %d times under it", channel, sc, maxConflicts)
}

// positionBefore reports whether cp's position is before the position of
// the checkpoint text at.
func positionBefore(cp cursor.Checkpoint, at string, parse Parser) (bool, error) {
	f, err := parse(at)
	if err != nil {
		return false, errors.WithStack(fmt.Errorf("the floor %q: %w: %w", at, ErrInvalid, err))
	}
	n, err := cp.Position.Compare(f.Position)
	if err != nil {
		return false, errors.WithStack(fmt.Errorf("%s against the floor %s: %w: %w", cp, f, ErrInvalid, err))
	}
	return n < 0, nil
}

// Drop removes the consumer sc of channel: it no longer holds the log back.
// Dropping a consumer that has no checkpoint is ErrNotFound.
func (s *Store) Drop(ctx context.Context, channel string, sc Scope) error {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return errors.WithStack(fmt.Errorf("consumers: drop: %w: %w", ErrInvalid, err))
	}
	if err := sc.Validate(); err != nil {
		return errors.Wrapf(err, "consumers: drop on %s", channel)
	}
	key := s.keys.consumer(channel, sc)
	kv, err := s.get(ctx, key)
	if err != nil {
		return errors.Wrapf(err, "consumers: drop on %s, %s", channel, sc)
	}
	if kv.Revision == meta.Absent {
		return errors.Wrapf(ErrNotFound, "consumers: channel %s, %s", channel, sc)
	}
	if err := s.kv.Delete(ctx, key, meta.Any); err != nil {
		return errors.Wrapf(err, "consumers: drop on %s, %s", channel, sc)
	}
	return nil
}

// Move is a resume point Advance records for an idle vchannel consumer.
type Move struct {
	Scope
	Resume cursor.Checkpoint
}

// Advance records the floor of channel for its owner at term, on the state
// read (Load) the owner decided on: first the resume points of moves (in as
// many store commits as they need, each conditional on its consumers'
// records as read), then the floor (conditional on the floor as read). A
// floor that is not after the one read changes nothing. A consumer that
// committed since the read makes it ErrConflict (meta.ErrConflict), and a
// floor of a later term ErrStaleTerm: decide again on a new read. The
// caller truncates only after Advance returned, and only up to what a Load
// after it still allows (see the package documentation).
func (s *Store) Advance(ctx context.Context, read Channel, term int64, floor cursor.Checkpoint, moves []Move, parse Parser) (Floor, error) {
	channel := read.Name
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return Floor{}, errors.WithStack(fmt.Errorf("consumers: advance: %w: %w", ErrInvalid, err))
	}
	if read.Floor.Term > term {
		return Floor{}, errors.Wrapf(ErrStaleTerm, "consumers: advance %s at term %d: the floor is of term %d", channel, term, read.Floor.Term)
	}
	if floor.IsZero() {
		return Floor{}, errors.Wrapf(ErrInvalid, "consumers: advance %s: the zero floor", channel)
	}
	if read.Floor.Checkpoint != "" {
		cur, err := parse(read.Floor.Checkpoint)
		if err != nil {
			return Floor{}, errors.WithStack(fmt.Errorf("consumers: advance %s: the floor %q: %w: %w", channel, read.Floor.Checkpoint, ErrInvalid, err))
		}
		n, err := floor.Compare(cur)
		if err != nil {
			return Floor{}, errors.WithStack(fmt.Errorf("consumers: advance %s: %s against the floor %s: %w: %w", channel, floor, cur, ErrInvalid, err))
		}
		if n <= 0 {
			return read.Floor, nil // not after it: the floor only moves forward
		}
	}
	now := s.clock.Now().UTC()
	const chunk = meta.MaxCommitOps / 2
	for len(moves) > 0 {
		part := moves[:min(chunk, len(moves))]
		moves = moves[len(part):]
		txn := meta.Txn{}
		for _, m := range part {
			cur, ok := read.Find(m.Scope)
			if !ok {
				return Floor{}, errors.Wrapf(ErrNotFound, "consumers: advance %s: move of %s", channel, m.Scope)
			}
			cur.Resume, cur.ResumeTimeTick = m.Resume.Marshal(), m.Resume.TimeTick
			key := s.keys.consumer(channel, m.Scope)
			txn.Conds = append(txn.Conds, meta.Cond{Key: key, Revision: cur.Revision})
			txn.Puts = append(txn.Puts, meta.KV{Key: key, Value: encode(cur.value())})
		}
		if _, err := s.kv.Commit(ctx, txn); err != nil {
			return Floor{}, errors.Wrapf(err, "consumers: advance %s: resume points", channel)
		}
	}
	f := Floor{Checkpoint: floor.Marshal(), TimeTick: floor.TimeTick, Term: term, At: now}
	key := s.keys.floor(channel)
	rev, err := s.kv.Commit(ctx, meta.Txn{
		Conds: []meta.Cond{{Key: key, Revision: read.Floor.Revision}},
		Puts:  []meta.KV{{Key: key, Value: encode(floorValue{V: formatVersion, CP: f.Checkpoint, TT: f.TimeTick, Term: term, At: now})}},
	})
	if err != nil {
		return Floor{}, errors.Wrapf(err, "consumers: advance %s: the floor", channel)
	}
	f.Revision = rev
	return f, nil
}

// Delete removes everything the store holds for channel (the channel was
// deleted).
func (s *Store) Delete(ctx context.Context, channel string) error {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return errors.WithStack(fmt.Errorf("consumers: delete: %w: %w", ErrInvalid, err))
	}
	kvs, _, err := s.kv.List(ctx, s.keys.channel(channel))
	if err != nil {
		return errors.Wrapf(err, "consumers: delete %s", channel)
	}
	for _, kv := range kvs {
		if err := s.kv.Delete(ctx, kv.Key, meta.Any); err != nil {
			return errors.Wrapf(err, "consumers: delete %s", channel)
		}
	}
	return nil
}
