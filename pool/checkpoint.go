package pool

import (
	"context"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/meta"
)

// SaveCheckpoint records how far a vchannel's consumer has processed, for
// the owner of term of its pchannel. A lower term than the stored
// checkpoint's is ErrStaleTerm (a newer owner took over); within one term a
// checkpoint never moves back (ErrCheckpointBackwards). Saving the stored
// checkpoint again succeeds.
func (p *Pool) SaveCheckpoint(ctx context.Context, vchannel string, term int64, cp adaptor.Checkpoint) error {
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

// Checkpoint returns a vchannel's stored checkpoint (decode it with the
// WAL's ParseCheckpoint) and its term; ErrCheckpointUnknown when none was
// saved since the vchannel was allocated.
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
	return cur.CP, cur.Term, nil
}

// PruneTarget returns the earliest checkpoint of a pchannel's vchannels,
// decoded with parse (the pchannel WAL's ParseCheckpoint): everything
// before its Position is needed by none of them. It is ErrNoVChannels for a
// pchannel without vchannels and ErrCheckpointUnknown, naming the
// vchannel, while any of them has no checkpoint.
func (p *Pool) PruneTarget(ctx context.Context, pchannel string, parse func(string) (adaptor.Checkpoint, error)) (adaptor.Checkpoint, error) {
	p.mu.Lock()
	err := p.refreshLocked(ctx)
	known := false
	for _, pc := range p.pchannels {
		known = known || pc == pchannel
	}
	members := map[string]uint64{}
	for v := range p.members[pchannel] {
		members[v] = p.table[v].seq
	}
	p.mu.Unlock()
	switch {
	case err != nil:
		return adaptor.Checkpoint{}, err
	case !known:
		return adaptor.Checkpoint{}, errors.Wrapf(ErrUnknownPChannel, "pool %q: pchannel %q", p.cfg.Name, pchannel)
	case len(members) == 0:
		return adaptor.Checkpoint{}, errors.Wrapf(ErrNoVChannels, "pool %q: pchannel %q", p.cfg.Name, pchannel)
	}
	kvs, _, err := p.store.List(ctx, p.keys.checkpoints())
	if err != nil {
		return adaptor.Checkpoint{}, errors.Wrapf(err, "pool %q: list checkpoints", p.cfg.Name)
	}
	var (
		target adaptor.Checkpoint
		found  = 0
	)
	for _, kv := range kvs {
		v := strings.TrimPrefix(kv.Key, p.keys.checkpoints())
		seq, ok := members[v]
		if !ok {
			continue
		}
		var cur checkpointValue
		if err := decode(kv.Key, kv.Value, &cur, func() int { return cur.V }); err != nil {
			return adaptor.Checkpoint{}, err
		}
		if cur.Alloc != seq {
			continue // of an earlier allocation of the name
		}
		cp, err := parse(cur.CP)
		if err != nil {
			return adaptor.Checkpoint{}, errors.Wrapf(err, "pool %q: checkpoint of %q", p.cfg.Name, v)
		}
		if found == 0 || cp.Before(target) {
			target = cp
		}
		found++
		delete(members, v)
	}
	if len(members) > 0 {
		missing := make([]string, 0, len(members))
		for v := range members {
			missing = append(missing, v)
		}
		return adaptor.Checkpoint{}, errors.Wrapf(ErrCheckpointUnknown, "pool %q: pchannel %q: no checkpoint for %d of its vchannels (%s)",
			p.cfg.Name, pchannel, len(missing), strings.Join(firstSorted(missing, 5), ", "))
	}
	return target, nil
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
