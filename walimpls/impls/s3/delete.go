package s3

import (
	"context"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Delete implements walimpls.Opener (see the package doc, "Truncating and
// deleting"): it seals the open epoch with a fence that says so, writes the
// tombstone, fences this Opener's WALs of the channel, and deletes every
// object of the deleted channel but the manifest and the fences.
func (o *Opener) Delete(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return err
	}
	if o.isClosed() {
		return errors.Wrapf(walimpls.ErrClosed, "s3: delete %q on a closed opener", name)
	}
	if err := ctx.Err(); err != nil {
		return errors.Wrapf(err, "s3: delete %q", name)
	}
	var tomb *manifest
	for tomb == nil {
		cur, etag, err := o.getManifest(ctx, name)
		switch {
		case errors.Is(err, errNotFound):
			return nil // never opened
		case err != nil:
			return errors.Wrapf(err, "s3: delete %q", name)
		case cur.Deleted:
			tomb = cur // deleted already: clean up again, in case a Delete stopped half-way
			continue
		}
		if e, ok := cur.open(); ok {
			if _, err := o.seal(ctx, name, cur, e, cur.Term, true); err != nil {
				return errors.Wrapf(err, "s3: delete %q", name)
			}
		}
		next := &manifest{Rev: cur.Rev, NextEpoch: cur.NextEpoch, Deleted: true}
		err = o.putManifest(ctx, name, next, etag)
		if errors.Is(err, errPrecondition) {
			continue
		}
		if err != nil {
			return errors.Wrapf(err, "s3: delete %q: write the tombstone", name)
		}
		tomb = next
		o.log.Info("deleted", "channel", name, "nextEpoch", next.NextEpoch)
	}
	if h := o.hubOf(name); h != nil {
		h.noteManifest(tomb)
	}
	for _, w := range o.walsOf(name) {
		if w.ch.Mode == walimpls.ReadWrite && w.epoch.Epoch < tomb.NextEpoch {
			w.fenceLocal(fencedError(w.ch, 0, true))
		}
	}
	return o.sweep(ctx, name, tomb.NextEpoch)
}

// sweep deletes the objects of a deleted channel's epochs (those below
// below): every one but the manifest and each epoch's fences.
func (o *Opener) sweep(ctx context.Context, name string, below uint64) error {
	prefix := o.keys.channel(name)
	type epochKeys struct {
		slots []uint64
		hint  bool
	}
	epochs := map[uint64]*epochKeys{}
	var order []uint64
	err := o.st.list(ctx, prefix, func(key string) {
		e, s, isHint, ok := parseSlotKey(strings.TrimPrefix(key, prefix))
		if !ok || e >= below {
			return
		}
		ek := epochs[e]
		if ek == nil {
			ek = &epochKeys{}
			epochs[e] = ek
			order = append(order, e)
		}
		if isHint {
			ek.hint = true
		} else {
			ek.slots = append(ek.slots, s)
		}
	})
	if err != nil {
		return errors.Wrapf(err, "s3: delete %q: list", name)
	}
	var doomed []string
	for _, e := range order {
		ek := epochs[e]
		if ek.hint {
			doomed = append(doomed, o.keys.hint(name, e))
		}
		slices.Sort(ek.slots)
		kept, err := o.fencesOf(ctx, name, e, ek.slots)
		if err != nil {
			return errors.Wrapf(err, "s3: delete %q", name)
		}
		for _, s := range ek.slots {
			if !kept[s] {
				doomed = append(doomed, o.keys.slot(name, e, s))
			}
		}
	}
	if err := o.st.remove(ctx, doomed); err != nil {
		return errors.Wrapf(err, "s3: delete %q: the tombstone is written, deleting the objects failed", name)
	}
	return nil
}

// fencesOf finds the fences among an epoch's slots (sorted): HEADs from the
// top find the highest, whose seal-from bounds where the others lie; a
// stalled writer's flushes may lie above and between them (see the package
// doc, "Truncating and deleting").
func (o *Opener) fencesOf(ctx context.Context, name string, epoch uint64, slots []uint64) (map[uint64]bool, error) {
	kept := map[uint64]bool{}
	i := len(slots) - 1
	var top slotInfo
	for ; i >= 0; i-- {
		info, err := o.headSlot(ctx, name, epoch, slots[i])
		if err != nil {
			return nil, err
		}
		if info.state == slotFence {
			kept[slots[i]], top = true, info
			break
		}
	}
	if i < 0 || !top.hasSealFrom {
		return kept, nil
	}
	for i--; i >= 0 && slots[i] >= top.sealFrom; i-- {
		info, err := o.headSlot(ctx, name, epoch, slots[i])
		if err != nil {
			return nil, err
		}
		if info.state == slotFence {
			kept[slots[i]] = true
		}
	}
	return kept, nil
}
