package s3

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// start is where a scanner begins: a position, and whether the slots of its
// epoch below it are known to hold data (else the scanner checks a window
// of them first: a slot of the open epoch is delivered only after every
// slot before it).
type start struct {
	p        pos
	verified bool
}

// firstKept is the first position a reader may start at.
func (m *manifest) firstKept() pos {
	if t, ok := m.truncated(); ok {
		return t
	}
	if len(m.Epochs) > 0 {
		return pos{epoch: m.Epochs[0].Epoch}
	}
	return pos{epoch: m.NextEpoch}
}

// tailOf returns one past the last slot of e that holds data: the open
// epoch's first slot without data, or a sealed one's end+1.
func (o *Opener) tailOf(ctx context.Context, name string, m *manifest, e epochEntry) (uint64, error) {
	if e.Sealed {
		return uint64(e.end() + 1), nil
	}
	s, _, err := o.firstClosed(ctx, name, e, m.firstSlot(e.Epoch))
	return s, err
}

// startOf resolves a deliver policy against a fresh manifest.
func (w *wal) startOf(ctx context.Context, p cursor.Policy) (start, *manifest, error) {
	m, _, err := w.manifestNow(ctx)
	if err != nil {
		return start{}, nil, errors.Wrapf(err, "s3: read %s from %s", w.ch, p)
	}
	if m.Deleted {
		return start{}, nil, errors.Wrapf(walimpls.ErrPositionGone, "s3: read %s from %s: the channel was deleted", w.ch, p)
	}
	switch {
	case p.IsAll():
		return start{p: m.firstKept(), verified: true}, m, nil
	case p.IsLatest():
		e, ok := m.open()
		if !ok {
			return start{p: pos{epoch: m.NextEpoch}, verified: true}, m, nil
		}
		s, err := w.o.tailOf(ctx, w.ch.Name, m, e)
		if err != nil {
			return start{}, nil, errors.Wrapf(err, "s3: read %s from %s", w.ch, p)
		}
		return start{p: pos{epoch: e.Epoch, slot: s}, verified: true}, m, nil
	}
	if n, ok := p.Tail(); ok {
		if n < 1 {
			return start{}, nil, errors.Wrapf(walimpls.ErrInvalidPosition, "s3: read %s from %s: n must be at least 1", w.ch, p)
		}
		s, err := w.tailStart(ctx, m, n)
		if err != nil {
			return start{}, nil, errors.Wrapf(err, "s3: read %s from %s", w.ch, p)
		}
		return start{p: s, verified: true}, m, nil
	}
	id, inclusive, _ := p.StartID()
	at, err := posOf(id)
	if err != nil {
		return start{}, nil, errors.WithStack(fmt.Errorf("s3: read %s from %s: %w: %w", w.ch, p, err, walimpls.ErrInvalidPosition))
	}
	if !inclusive {
		if r, ok := m.removed(); ok && r == at {
			return start{p: m.firstKept(), verified: true}, m, nil
		}
		at.index++
	}
	if m.gone(at) {
		return start{}, nil, errors.Wrapf(walimpls.ErrPositionGone, "s3: read %s from %s: the log starts at %s", w.ch, p, m.firstKept())
	}
	return start{p: at}, m, nil
}

// tailStart returns a position from which at least the last n messages are
// delivered (every kept one when fewer are kept).
func (w *wal) tailStart(ctx context.Context, m *manifest, n int) (pos, error) {
	left := n
	var found pos
	err := w.o.walkBack(ctx, w.ch.Name, m, func(p pos, count uint32) bool {
		found = p
		left -= int(count - p.index)
		return left > 0
	})
	if err != nil {
		return pos{}, err
	}
	if left > 0 {
		return m.firstKept(), nil
	}
	return found, nil
}

// walkBack calls fn with every object holding kept data, newest first: its
// first kept position and its record count, until fn returns false.
func (o *Opener) walkBack(ctx context.Context, name string, m *manifest, fn func(p pos, count uint32) bool) error {
	for i := len(m.Epochs) - 1; i >= 0; i-- {
		e := m.Epochs[i]
		end, err := o.tailOf(ctx, name, m, e)
		if err != nil {
			return err
		}
		first := m.firstSlot(e.Epoch)
		for s := end; s > first; s-- {
			slot := s - 1
			info, err := o.headSlot(ctx, name, e.Epoch, slot)
			if err != nil {
				return err
			}
			if info.state != slotData {
				if m.gone(pos{epoch: e.Epoch, slot: slot}) {
					return nil
				}
				return errors.Newf("s3: %s: slot %d of epoch %d holds no data below the tail %d", name, slot, e.Epoch, end)
			}
			p := pos{epoch: e.Epoch, slot: slot}
			if t, ok := m.truncated(); ok && t.epoch == p.epoch && t.slot == p.slot {
				p.index = min(t.index, info.count)
			}
			if !fn(p, info.count) {
				return nil
			}
		}
	}
	return nil
}

// Last implements walimpls.WALImpl: the tail of the newest epoch holding
// data, its last record's ID.
func (w *wal) Last(ctx context.Context) (message.ID, error) {
	if w.closed.Load() {
		return message.ID{}, errors.Wrapf(walimpls.ErrClosed, "s3: last of %s", w.ch)
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, errors.Wrapf(err, "s3: last of %s", w.ch)
	}
	m, _, err := w.o.getManifest(ctx, w.ch.Name)
	if errors.Is(err, errNotFound) {
		return message.ID{}, nil
	}
	if err != nil {
		return message.ID{}, errors.Wrapf(err, "s3: last of %s", w.ch)
	}
	if m.Deleted {
		return message.ID{}, nil
	}
	var last message.ID
	err = w.o.walkBack(ctx, w.ch.Name, m, func(p pos, count uint32) bool {
		last = pos{epoch: p.epoch, slot: p.slot, index: count - 1}.id()
		return false
	})
	if err != nil {
		return message.ID{}, errors.Wrapf(err, "s3: last of %s", w.ch)
	}
	return last, nil
}

// Truncate implements walimpls.WALImpl (see the package doc, "Truncating
// and deleting"): the manifest first, conditional on this WAL's epoch
// still being the open one, then the objects wholly before upTo.
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	if err := w.checkWrite(ctx, "truncate"); err != nil {
		return err
	}
	p, err := posOf(upTo)
	if err != nil {
		return errors.WithStack(fmt.Errorf("s3: truncate %s: %w: %w", w.ch, err, walimpls.ErrInvalidPosition))
	}
	for {
		m, etag, err := w.manifestNow(ctx)
		if err != nil {
			return errors.Wrapf(err, "s3: truncate %s", w.ch)
		}
		if err := w.stillOwner(m); err != nil {
			return err
		}
		if m.gone(p) || m.firstKept() == p {
			return nil // at or below the first message kept
		}
		prev, err := w.checkTruncation(ctx, m, p)
		if err != nil {
			return err
		}
		next := m.clone()
		next.Truncated, next.Removed = toManifestPos(p), nil
		if prev != nil {
			next.Removed = toManifestPos(*prev)
		}
		var dropped []epochEntry
		for len(next.Epochs) > 0 && next.Epochs[0].Epoch < p.epoch {
			dropped = append(dropped, next.Epochs[0])
			next.Epochs = next.Epochs[1:]
		}
		err = w.o.putManifest(ctx, w.ch.Name, next, etag)
		if errors.Is(err, errPrecondition) {
			continue
		}
		if err != nil {
			return errors.Wrapf(err, "s3: truncate %s to %s: write manifest", w.ch, p)
		}
		w.hub.noteManifest(next)
		// The objects wholly before p: fences are never deleted (a
		// sealed epoch's fence lies after its end).
		var doomed []string
		for _, e := range dropped {
			for s := m.firstSlot(e.Epoch); int64(s) <= e.end(); s++ {
				doomed = append(doomed, w.o.keys.slot(w.ch.Name, e.Epoch, s))
			}
			doomed = append(doomed, w.o.keys.hint(w.ch.Name, e.Epoch))
		}
		for s := m.firstSlot(p.epoch); s < p.slot; s++ {
			doomed = append(doomed, w.o.keys.slot(w.ch.Name, p.epoch, s))
		}
		if err := w.o.st.remove(ctx, doomed); err != nil {
			return errors.Wrapf(err, "s3: truncate %s to %s: the manifest says so, deleting the objects before it failed", w.ch, p)
		}
		w.log.Debug("truncated", "to", p.String(), "objects", len(doomed))
		return nil
	}
}

// stillOwner returns the fence of this WAL when the manifest says another
// open or a Delete took the channel.
func (w *wal) stillOwner(m *manifest) error {
	e, ok := m.open()
	switch {
	case m.Deleted:
		err := fencedError(w.ch, 0, true)
		w.wr.fence(err)
		return walimpls.MarkNotStored(err)
	case !ok || e.Epoch != w.epoch.Epoch:
		err := fencedError(w.ch, m.Term, false)
		w.wr.fence(err)
		return walimpls.MarkNotStored(err)
	}
	return nil
}

// checkTruncation checks that p is a stored message (at or before the last
// one) and returns the message just before it, if any.
func (w *wal) checkTruncation(ctx context.Context, m *manifest, p pos) (*pos, error) {
	invalid := func(why string) error {
		return errors.Wrapf(walimpls.ErrInvalidPosition, "s3: truncate %s to %s: %s", w.ch, p, why)
	}
	e, ok := m.entry(p.epoch)
	if !ok {
		return nil, invalid("no message there")
	}
	if e.Sealed && int64(p.slot) > e.end() {
		return nil, invalid("beyond the end of its epoch")
	}
	info, err := w.o.headSlot(ctx, w.ch.Name, p.epoch, p.slot)
	if err != nil {
		return nil, errors.Wrapf(err, "s3: truncate %s to %s", w.ch, p)
	}
	if info.state != slotData || p.index >= info.count {
		return nil, invalid("beyond the last message")
	}
	if p.index > 0 {
		return &pos{epoch: p.epoch, slot: p.slot, index: p.index - 1}, nil
	}
	// The last message of the previous object holding data: the slot
	// before p's in its epoch, or the end of an earlier epoch.
	q := pos{epoch: p.epoch, slot: p.slot}
	if p.slot == m.firstSlot(p.epoch) {
		found := false
		for i := len(m.Epochs) - 1; i >= 0; i-- {
			x := m.Epochs[i]
			if x.Epoch < p.epoch && x.Sealed && x.end() >= int64(m.firstSlot(x.Epoch)) {
				q, found = pos{epoch: x.Epoch, slot: uint64(x.end()) + 1}, true
				break
			}
		}
		if !found {
			return nil, nil
		}
	}
	info, err = w.o.headSlot(ctx, w.ch.Name, q.epoch, q.slot-1)
	if err != nil {
		return nil, errors.Wrapf(err, "s3: truncate %s to %s", w.ch, p)
	}
	if info.state != slotData || info.count == 0 {
		return nil, errors.Newf("s3: truncate %s to %s: the object before it, slot %d of epoch %d, holds no data", w.ch, p, q.slot-1, q.epoch)
	}
	prev := &pos{epoch: q.epoch, slot: q.slot - 1, index: info.count - 1}
	return prev, nil
}
