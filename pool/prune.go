package pool

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
)

// Activity is what a read of a pchannel's log found, per vchannel, up to a
// tail: the input PruneTarget decides on. The Pruner keeps one per
// pchannel it owns and extends it every round (see Pruner). The zero
// Activity knows nothing of the log: every vchannel is then taken to have
// messages after its checkpoint.
type Activity struct {
	// Tail is how far the log was read (a WAL.Tail checkpoint): every data
	// message with a timetick at or below Tail.TimeTick, from the oldest
	// one the log retained when the reading began, was read.
	Tail cursor.Checkpoint
	// VChannels summarises, per vchannel, the data messages read up to
	// Tail; a vchannel without an entry had none. PruneTarget neither keeps
	// nor changes the map.
	VChannels map[string]Written
}

// Written summarises a vchannel's messages in a read of its pchannel.
type Written struct {
	// FirstID is the lowest position among them: truncating the pchannel
	// at it keeps all of them.
	FirstID message.ID
	// LastTimeTick is the highest timetick among them.
	LastTimeTick uint64
}

// Target is how far a pchannel may be truncated, and why.
type Target struct {
	// Position is where to truncate (WAL.Truncate(Position)): every
	// vchannel of the pchannel resumes at or after it.
	Position message.ID
	// Tail is the Activity's tail the decision was made up to (zero when it
	// knew nothing of the log).
	Tail cursor.Checkpoint
	// HeldBy is the vchannel whose checkpoint, or first message, Position
	// is; empty when no vchannel holds the pchannel back and Position is
	// Tail's.
	HeldBy string
	// Held counts the vchannels that hold the pchannel back: with messages
	// after their checkpoint, or with messages and no checkpoint. Idle
	// counts the others: nothing after their checkpoint up to the tail, or
	// no checkpoint and no message.
	Held, Idle int
	// Moved counts the idle vchannels whose resume point PruneTarget moved
	// to the tail, because Position passes their checkpoint.
	Moved int
}

// PruneTarget decides how far a pchannel may be truncated, on what act
// found in its log: parse decodes checkpoints (the pchannel WAL's
// ParseCheckpoint). The rule, for each vchannel allocated to it:
//
//   - with a checkpoint and a message after it (a higher timetick, up to
//     act.Tail), it holds the pchannel back at its checkpoint;
//   - with a checkpoint and no message after it up to the tail, it holds
//     nothing back: it is idle;
//   - with no checkpoint and no message, it holds nothing back;
//   - with messages and no checkpoint, it holds the pchannel back at its
//     first message (Written.FirstID): its consumer, which has processed
//     nothing, reads from the oldest retained message and finds all of
//     them;
//   - a released vchannel holds nothing back.
//
// Target.Position is the earliest of what the vchannels hold, and the
// tail's position when none holds anything. Nothing a vchannel has not
// checkpointed is ever before it.
//
// An idle vchannel's checkpoint may lie before Position: PruneTarget then
// records, before it returns, that the vchannel resumes at the tail
// instead (nothing of it lies between), and Checkpoint gives that from
// then on. Truncate at Position only once PruneTarget returned it.
//
// With the zero Activity it knows nothing of the log: each vchannel holds
// the pchannel back at its checkpoint, and a vchannel without one makes it
// ErrCheckpointUnknown, naming the vchannel. A pchannel without vchannels
// is ErrNoVChannels.
func (p *Pool) PruneTarget(ctx context.Context, pchannel string, parse func(string) (cursor.Checkpoint, error), act Activity) (Target, error) {
	p.mu.Lock()
	err := p.refreshLocked(ctx)
	known := slices.Contains(p.pchannels, pchannel)
	members := map[string]uint64{}
	for v := range p.members[pchannel] {
		members[v] = p.table[v].seq
	}
	p.mu.Unlock()
	switch {
	case err != nil:
		return Target{}, err
	case !known:
		return Target{}, errors.Wrapf(ErrUnknownPChannel, "pool %q: pchannel %q", p.cfg.Name, pchannel)
	case len(members) == 0:
		return Target{}, errors.Wrapf(ErrNoVChannels, "pool %q: pchannel %q", p.cfg.Name, pchannel)
	}
	// Read after the log was (the Activity is older than what is read
	// here): a vchannel allocated since has no message up to the tail, and
	// a checkpoint saved since is later than the one read.
	own, err := p.checkpoints(ctx, members)
	if err != nil {
		return Target{}, err
	}
	rkey := p.keys.resume(pchannel)
	moved, rrev, err := p.resumePoints(ctx, rkey)
	if err != nil {
		return Target{}, err
	}

	in := make([]ruleVChannel, 0, len(members))
	for _, v := range slices.Sorted(maps.Keys(members)) {
		rv := ruleVChannel{name: v}
		if cp, ok := own[v]; ok {
			text := cp.CP
			if rp, ok := moved[v]; ok && rp.applies(members[v], cp) {
				text, rv.moved = rp.CP, true
			}
			if rv.resume, err = parse(text); err != nil {
				return Target{}, errors.Wrapf(err, "pool %q: checkpoint of %q", p.cfg.Name, v)
			}
		}
		rv.written, rv.wrote = act.VChannels[v]
		in = append(in, rv)
	}
	d, err := decide(act.Tail, in)
	if err != nil {
		return Target{}, errors.Wrapf(err, "pool %q: pchannel %q", p.cfg.Name, pchannel)
	}
	if len(d.missing) > 0 {
		return Target{}, errors.Wrapf(ErrCheckpointUnknown, "pool %q: pchannel %q: no checkpoint for %d of its vchannels (%s)",
			p.cfg.Name, pchannel, len(d.missing), strings.Join(firstSorted(d.missing, 5), ", "))
	}

	// The resume points the target needs: the ones it moves, and the ones
	// moved before that still apply.
	next := map[string]resumePoint{}
	for _, rv := range in {
		if rv.moved {
			next[rv.name] = moved[rv.name]
		}
	}
	for _, v := range d.move {
		next[v] = resumePoint{Alloc: members[v], From: own[v].TT, TT: act.Tail.TimeTick, CP: act.Tail.Marshal()}
	}
	if !maps.Equal(next, moved) {
		if err := p.saveResumePoints(ctx, rkey, next, rrev); err != nil {
			return Target{}, err
		}
	}
	d.target.Moved = len(d.move)
	return d.target, nil
}

// checkpoints returns the stored checkpoints of members (vchannel → the
// record that allocated it), leaving out those of earlier allocations.
func (p *Pool) checkpoints(ctx context.Context, members map[string]uint64) (map[string]checkpointValue, error) {
	kvs, _, err := p.store.List(ctx, p.keys.checkpoints())
	if err != nil {
		return nil, errors.Wrapf(err, "pool %q: list checkpoints", p.cfg.Name)
	}
	out := map[string]checkpointValue{}
	for _, kv := range kvs {
		v := strings.TrimPrefix(kv.Key, p.keys.checkpoints())
		seq, ok := members[v]
		if !ok {
			continue
		}
		var cur checkpointValue
		if err := decode(kv.Key, kv.Value, &cur, func() int { return cur.V }); err != nil {
			return nil, err
		}
		if cur.Alloc == seq {
			out[v] = cur
		}
	}
	return out, nil
}

// resumePoints reads a pchannel's moved resume points and the revision to
// replace them at (meta.Absent when there are none).
func (p *Pool) resumePoints(ctx context.Context, key string) (map[string]resumePoint, int64, error) {
	kv, err := p.store.Get(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return map[string]resumePoint{}, meta.Absent, nil
	}
	if err != nil {
		return nil, 0, errors.Wrapf(err, "pool %q: read %s", p.cfg.Name, key)
	}
	var rv resumeValue
	if err := decode(key, kv.Value, &rv, func() int { return rv.V }); err != nil {
		return nil, 0, err
	}
	if rv.VChannels == nil {
		rv.VChannels = map[string]resumePoint{}
	}
	return rv.VChannels, kv.Revision, nil
}

// saveResumePoints replaces a pchannel's moved resume points, conditional
// on the revision they were read at: a pruner that raced another decides
// again next round.
func (p *Pool) saveResumePoints(ctx context.Context, key string, points map[string]resumePoint, rev int64) error {
	var err error
	if len(points) == 0 {
		err = p.store.Delete(ctx, key, rev)
	} else {
		_, err = p.store.Put(ctx, key, encode(resumeValue{V: formatVersion, VChannels: points}), rev)
	}
	if err != nil {
		return errors.Wrapf(err, "pool %q: save resume points %s", p.cfg.Name, key)
	}
	return nil
}

// ruleVChannel is one vchannel as the prune rule sees it.
type ruleVChannel struct {
	name   string
	resume cursor.Checkpoint // where it resumes: its checkpoint, or a moved one; zero: none
	moved  bool              // resume is a moved resume point
	// written: its messages up to the tail, when wrote.
	written Written
	wrote   bool
}

// decision is what the prune rule decided.
type decision struct {
	target  Target
	move    []string // idle vchannels whose resume point moves to the tail
	missing []string // without a checkpoint, when the log is not known
}

// decide applies PruneTarget's rule to a pchannel's vchannels, on a read of
// its log up to tail (zero: none). Pure: no locks, no I/O.
func decide(tail cursor.Checkpoint, vcs []ruleVChannel) (decision, error) {
	known := !tail.IsZero()
	d := decision{target: Target{Tail: tail}}
	if known {
		d.target.Position = tail.Position
	}
	hold := func(at message.ID, v string) error {
		if d.target.Position.IsZero() {
			d.target.Position, d.target.HeldBy = at, v
			return nil
		}
		n, err := at.Compare(d.target.Position)
		if err != nil {
			return errors.Wrapf(err, "vchannel %q", v)
		}
		if n < 0 {
			d.target.Position, d.target.HeldBy = at, v
		}
		return nil
	}
	var idle []ruleVChannel
	for _, v := range vcs {
		var err error
		switch has := !v.resume.IsZero(); {
		case !known && !has:
			d.missing = append(d.missing, v.name)
		case !known:
			d.target.Held++
			err = hold(v.resume.Position, v.name)
		case has && v.wrote && v.written.LastTimeTick > v.resume.TimeTick:
			// Messages after its checkpoint.
			d.target.Held++
			err = hold(v.resume.Position, v.name)
		case has:
			d.target.Idle++
			if v.resume.TimeTick >= tail.TimeTick {
				// Its consumer is at or past the tail already: its own
				// point, which the tail would move back.
				err = hold(v.resume.Position, v.name)
			} else {
				idle = append(idle, v)
			}
		case v.wrote:
			// Messages, and nothing processed: from the first one.
			d.target.Held++
			err = hold(v.written.FirstID, v.name)
		default:
			d.target.Idle++
		}
		if err != nil {
			return decision{}, err
		}
	}
	if len(d.missing) > 0 {
		return d, nil
	}
	// An idle vchannel whose resume point the target passes resumes at the
	// tail: it has no message in between.
	for _, v := range idle {
		n, err := v.resume.Position.Compare(d.target.Position)
		if err != nil {
			return decision{}, errors.Wrapf(err, "vchannel %q", v.name)
		}
		if n < 0 {
			d.move = append(d.move, v.name)
		}
	}
	return d, nil
}
