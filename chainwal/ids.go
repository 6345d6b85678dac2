package chainwal

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// ParseID implements adaptor.WAL: a chain position's string (a bare
// backend ID is segment 0) decoded with its segment's backend. A position
// in a pruned segment decodes (reading from it is ErrPositionGone); one
// after the last segment is chain.ErrUnknownSegment.
func (w *wal) ParseID(s string) (message.ID, error) {
	p, err := cursor.ParsePosition(s)
	if err != nil {
		return message.ID{}, errors.Wrapf(err, "chainwal: %s", w.ch.Name)
	}
	if p.IsZero() {
		return message.ID{}, errors.Wrapf(message.ErrCorruptID, "chainwal: %s: an empty ID", w.ch.Name)
	}
	return w.idOf(p)
}

func (w *wal) idOf(p cursor.Position) (message.ID, error) {
	w.mu.Lock()
	c := w.c
	w.mu.Unlock()
	seg, err := c.Locate(p)
	var b chain.Backend
	switch {
	case errors.Is(err, walimpls.ErrPositionGone):
		// The ID of a pruned segment still decodes, as an opaque position
		// (its backend may be configured no more): reading from it is
		// ErrPositionGone, by its segment alone.
		return cursor.IDOf(p), nil
	case err != nil:
		return message.ID{}, errors.Wrapf(err, "chainwal: %s", w.ch.Name)
	default:
		b = seg.Backend
	}
	o, err := w.o.cfg.Openers.Opener(b)
	if err != nil {
		return message.ID{}, errors.Wrapf(err, "chainwal: %s: segment %d", w.ch.Name, p.Segment)
	}
	id, err := o.UnmarshalID(p.ID)
	if err != nil {
		return message.ID{}, errors.Wrapf(err, "chainwal: %s: segment %d's ID %q", w.ch.Name, p.Segment, p.ID)
	}
	return cursor.ChainID(p.Segment, id), nil
}

// ParseCheckpoint implements adaptor.WAL: a chain checkpoint (the
// adaptor's for segment 0), its position read as ParseID reads an ID.
func (w *wal) ParseCheckpoint(s string) (cursor.Checkpoint, error) {
	return cursor.ParseCheckpoint(s, w.ParseID)
}

// Truncate implements adaptor.WAL: see the package documentation.
func (w *wal) Truncate(ctx context.Context, upTo message.ID) error {
	p, err := positionOf(upTo)
	if err != nil {
		return errors.Wrapf(err, "chainwal: truncate %s", w.ch.Name)
	}
	if p.Segment > w.index {
		return errors.Wrapf(chain.ErrUnknownSegment, "chainwal: truncate %s: position %s is after the last segment %d", w.ch.Name, p, w.index)
	}
	if err := w.prune(ctx, p.Segment); err != nil {
		return err
	}
	if p.Segment < w.index {
		return nil // a sealed segment is kept whole until it is passed
	}
	_, bid, err := w.backendID(upTo)
	if err != nil {
		return err
	}
	return w.seg.Truncate(ctx, bid)
}

// backendID is the segment and backend ID of a chain ID, or of a bare
// backend ID (segment 0).
func (w *wal) backendID(id message.ID) (uint64, message.ID, error) {
	if seg, bid, ok := cursor.SplitID(id); ok {
		return seg, bid, nil
	}
	return 0, id, nil
}

// prune deletes the data of every kept segment before index and drops
// them from the chain.
func (w *wal) prune(ctx context.Context, index uint64) error {
	w.mu.Lock()
	c := w.c
	w.mu.Unlock()
	if index <= c.First() {
		return nil
	}
	for _, s := range c.Segments {
		if s.Index >= index {
			break
		}
		o, err := w.o.cfg.Openers.Opener(s.Backend)
		if err != nil {
			return errors.Wrapf(err, "chainwal: prune %s: segment %d", w.ch.Name, s.Index)
		}
		if err := o.Delete(ctx, s.Backend.Channel); err != nil && !errors.Is(err, walimpls.ErrNoChannel) {
			return errors.Wrapf(err, "chainwal: prune %s: delete segment %d on %s", w.ch.Name, s.Index, s.Backend)
		}
	}
	w.o.after(StepPruneDeleted, w.ch.Name)
	next, err := w.o.cfg.Store.DropFront(ctx, w.ch.Name, w.index, index)
	if err != nil {
		return errors.Wrapf(err, "chainwal: prune %s", w.ch.Name)
	}
	w.o.log.Info("segments pruned", "channel", w.ch.Name, "before", index, "first", next.First())
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.setChain(next)
}

// Close implements adaptor.WAL: it stops every scanner, then the writer.
// A scanner stopped so ends with an error matching walimpls.ErrClosed, as
// the adaptor's do when their WAL closes: its consumer can tell the WAL's
// end (a new term, a move, a shutdown) from the end of what it read.
func (w *wal) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	scanners := w.scanners
	w.scanners = nil
	w.mu.Unlock()
	reason := errors.Wrapf(walimpls.ErrClosed, "chainwal: %s at term %d closed", w.ch.Name, w.ch.Term)
	for s := range scanners {
		if st, ok := s.(stopper); ok {
			st.Stop(reason)
			<-st.Done()
			continue
		}
		_ = s.Close()
	}
	return w.seg.Close()
}

// stopper is a scanner that can be stopped with a reason its Error then
// reports (a lifecycle.Run's, as chainread's scanners are).
type stopper interface {
	Stop(reason error)
	Done() <-chan struct{}
}
