package pool

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/meta"
)

// SaveCheckpoint records how far a vchannel's consumer has processed, for
// the owner of term of its pchannel. A lower term than the stored
// checkpoint's is ErrStaleTerm (a newer owner took over); within one term a
// checkpoint never moves back (ErrCheckpointBackwards). Saving the stored
// checkpoint again succeeds.
func (p *Pool) SaveCheckpoint(ctx context.Context, vchannel string, term int64, cp cursor.Checkpoint) error {
	m, err := p.member(ctx, vchannel)
	if err != nil {
		return err
	}
	if cp.IsZero() {
		return errors.Wrapf(ErrInvalidVChannel, "pool %q: vchannel %q: the zero checkpoint is not saved", p.cfg.Name, vchannel)
	}
	key := p.keys.checkpoint(vchannel)
	want := checkpointValue{V: formatVersion, Alloc: m.seq, Term: term, TT: cp.TimeTick, CP: cp.Marshal()}
	for range maxConflicts {
		expect := meta.Absent
		kv, err := p.store.Get(ctx, key)
		switch {
		case err == nil:
			var cur checkpointValue
			if err := decode(key, kv.Value, &cur, func() int { return cur.V }); err != nil {
				return err
			}
			expect = kv.Revision
			if cur.Alloc == m.seq {
				switch {
				case cur.Term > term:
					return errors.Wrapf(ErrStaleTerm, "pool %q: vchannel %q: checkpoint of term %d, the stored one is of term %d", p.cfg.Name, vchannel, term, cur.Term)
				case cur.Term == term && cp.TimeTick < cur.TT:
					return errors.Wrapf(ErrCheckpointBackwards, "pool %q: vchannel %q: timetick %d, the stored checkpoint is at %d", p.cfg.Name, vchannel, cp.TimeTick, cur.TT)
				}
			}
		case !errors.Is(err, meta.ErrNotFound):
			return errors.Wrapf(err, "pool %q: read checkpoint of %q", p.cfg.Name, vchannel)
		}
		_, err = p.store.Put(ctx, key, encode(want), expect)
		if errors.Is(err, meta.ErrConflict) {
			continue // a concurrent save: decide again on what it wrote
		}
		if err != nil {
			return errors.Wrapf(err, "pool %q: save checkpoint of %q", p.cfg.Name, vchannel)
		}
		return nil
	}
	return errors.Wrapf(meta.ErrConflict, "pool %q: checkpoint of %q changed %d times under this save", p.cfg.Name, vchannel, maxConflicts)
}

// Checkpoint returns where a vchannel resumes (decode it with the WAL's
// ParseCheckpoint) and the term of its stored checkpoint;
// ErrCheckpointUnknown when none was saved since the vchannel was
// allocated (its consumer then reads from the oldest retained message).
//
// That is the stored checkpoint, or a later point when the pruner
// truncated its pchannel past the checkpoint of a vchannel that had no
// message after it (see PruneTarget): the vchannel resumes where the
// pruner read the log up to, and nothing of it lies between. A later save
// of its own checkpoint, or of the same one again, is not refused for it.
// A consumer that resumes from a checkpoint it kept itself, rather than
// from this one, may find it truncated (walimpls.ErrPositionGone); so may
// one whose Checkpoint call raced the pruner: ask again.
func (p *Pool) Checkpoint(ctx context.Context, vchannel string) (string, int64, error) {
	m, err := p.member(ctx, vchannel)
	if err != nil {
		return "", 0, err
	}
	key := p.keys.checkpoint(vchannel)
	kv, err := p.store.Get(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return "", 0, errors.Wrapf(ErrCheckpointUnknown, "pool %q: vchannel %q", p.cfg.Name, vchannel)
	}
	if err != nil {
		return "", 0, errors.Wrapf(err, "pool %q: read checkpoint of %q", p.cfg.Name, vchannel)
	}
	var cur checkpointValue
	if err := decode(key, kv.Value, &cur, func() int { return cur.V }); err != nil {
		return "", 0, err
	}
	if cur.Alloc != m.seq {
		return "", 0, errors.Wrapf(ErrCheckpointUnknown, "pool %q: vchannel %q (the stored one is of an earlier allocation)", p.cfg.Name, vchannel)
	}
	moved, _, err := p.resumePoints(ctx, p.keys.resume(m.pchannel))
	if err != nil {
		return "", 0, err
	}
	if rp, ok := moved[vchannel]; ok && rp.applies(m.seq, cur) {
		return rp.CP, cur.Term, nil
	}
	return cur.CP, cur.Term, nil
}

// member returns a vchannel's allocation, reading the store when the cache
// does not know it.
func (p *Pool) member(ctx context.Context, vchannel string) (member, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return member{}, errors.Wrapf(ErrClosed, "pool %q", p.cfg.Name)
	}
	if m, ok := p.table[vchannel]; ok {
		return m, nil
	}
	if err := p.refreshLocked(ctx); err != nil {
		return member{}, err
	}
	if m, ok := p.table[vchannel]; ok {
		return m, nil
	}
	return member{}, errors.Wrapf(ErrNotAllocated, "pool %q: vchannel %q", p.cfg.Name, vchannel)
}
