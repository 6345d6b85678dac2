package local

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Delete implements walimpls.Opener: the channel leaves the store for good,
// for every Opener of the store (doc.go, Deleting a channel). It returns
// once the delete frame is synced and the deletion published: the
// channel's writers are fenced (Deleted), its scanners end with
// ErrPositionGone, and the segments held only by its messages go with the
// next collection. A name without a channel is deleted already. A Delete
// whose context ends once the deletion is framed returns the context's
// error, and the deletion is still carried out.
func (o *Opener) Delete(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return errors.Wrap(err, "local: delete")
	}
	if err := ctx.Err(); err != nil {
		return errors.Wrapf(err, "local: delete %q", name)
	}
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return errors.Wrapf(walimpls.ErrClosed, "local: delete %q on a closed opener", name)
	}
	if _, err := o.s.j.submit(ctx, request{kind: reqDelete, name: name}); err != nil {
		return errors.Wrapf(err, "local: delete %q", name)
	}
	return nil
}

// Delete implements walimpls.Opener; see Opener.Delete.
func (s *Store) Delete(ctx context.Context, name string) error {
	return s.def.Delete(ctx, name)
}

// publishDelete makes a deletion visible to the channel's WALs: every
// writer is fenced with Deleted set, the index goes, and the scanners wake
// to find the channel deleted. It returns how many writers were not fenced
// before. Called by the flusher.
func (ch *channel) publishDelete() (fenced int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.deleted.Store(true)
	for w := range ch.writers {
		if w.fence(&walimpls.FencedError{Deleted: true}) {
			fenced++
		}
	}
	ch.entries = nil
	close(ch.notify)
	ch.notify = make(chan struct{})
	return fenced
}

// forgetInSegments drops deleted channels from every live segment's
// per-channel last seqs, so that they hold no segment back from
// collection and the segments keep no pointer to them.
func (s *Store) forgetInSegments(deleted []*channel) {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	for _, seg := range s.segments {
		for _, ch := range deleted {
			delete(seg.chans, ch)
		}
	}
}
