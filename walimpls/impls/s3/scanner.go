package s3

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/scanout"
)

// scanner reads a channel's objects in order (see the package doc,
// "Reading"). Its goroutine, run, owns everything below Run.
type scanner struct {
	*lifecycle.Run
	w   *wal
	h   *hub
	out *scanout.Out

	readAheadBytes int
	// next is the next position to deliver; from is the next slot to
	// read, below next.slot while the scanner checks that the slots
	// before its start hold data.
	next     pos
	from     uint64
	verified bool
	man      *manifest

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// pend are the fetches under way, for slots pendEpoch/pendFrom+i.
	pend      []*future
	pendEpoch uint64
	pendFrom  uint64
	lastSize  int
	catching  bool // the last fetch of the open epoch found data
}

var (
	_ walimpls.Scanner      = (*scanner)(nil)
	_ walimpls.BatchScanner = (*scanner)(nil)
)

// future is one slot's GET.
type future struct {
	done chan struct{}
	f    fetched
	miss bool
	err  error // the GET's own failure
}

func newScanner(w *wal, opt walimpls.ReadOption, st start, m *manifest, batches bool) *scanner {
	ra := opt.ReadAheadBytes
	if ra <= 0 {
		ra = w.o.cfg.ReadAheadBytes
	}
	s := &scanner{Run: lifecycle.NewRun(), w: w, h: w.hub, out: scanout.New(batches, 0), readAheadBytes: ra,
		next: st.p, from: st.p.slot, verified: st.verified, man: m}
	s.ctx, s.cancel = context.WithCancel(s.Context())
	s.h.addReader()
	return s
}

// Chan implements walimpls.Scanner.
func (s *scanner) Chan() <-chan message.Immutable { return s.out.Chan() }

// Batches implements walimpls.BatchScanner.
func (s *scanner) Batches() <-chan []message.Immutable { return s.out.Batches() }

func (s *scanner) run() {
	err := s.deliver()
	if s.Stopped() {
		err = nil
	}
	s.cancel()
	s.wg.Wait()
	s.h.dropReader()
	s.w.scans.Remove(s)
	s.out.Close()
	s.End(err)
}

// manifest returns the newest manifest known: the scanner's or its hub's.
func (s *scanner) manifest() *manifest {
	if hm := s.h.manifest(); hm != nil && hm.Rev > s.man.Rev {
		s.man = hm
	}
	return s.man
}

func (s *scanner) gone() error {
	m := s.manifest()
	if m.Deleted {
		return errors.Wrapf(walimpls.ErrPositionGone, "s3: scanner of %s at %s: the channel was deleted", s.w.ch, s.next)
	}
	return errors.Wrapf(walimpls.ErrPositionGone, "s3: scanner of %s at %s: the log now starts at %s", s.w.ch, s.next, m.firstKept())
}

// refresh reads the manifest from the store.
func (s *scanner) refresh() error {
	m, _, err := s.w.o.getManifest(s.ctx, s.w.ch.Name)
	if errors.Is(err, errNotFound) {
		m = &manifest{Deleted: true, Rev: ^uint64(0)}
	} else if err != nil {
		return errors.Wrapf(err, "s3: scanner of %s", s.w.ch)
	}
	s.h.noteManifest(m)
	if m.Rev > s.man.Rev {
		s.man = m
	}
	return nil
}

// epochAt returns the first epoch the manifest lists at or after e.
func (m *manifest) epochAt(e uint64) (epochEntry, bool) {
	for _, x := range m.Epochs {
		if x.Epoch >= e {
			return x, true
		}
	}
	return epochEntry{}, false
}

func (s *scanner) deliver() error {
	for {
		if s.Stopped() {
			return nil
		}
		m := s.manifest()
		if m.gone(s.next) {
			return s.gone()
		}
		e, ok := m.epochAt(s.next.epoch)
		if !ok {
			// Beyond every epoch the manifest lists: wait for a newer one.
			if err := s.await(slotKey{s.next.epoch, s.from}, true); err != nil {
				return err
			}
			continue
		}
		if e.Epoch > s.next.epoch {
			s.next = pos{epoch: e.Epoch, slot: m.firstSlot(e.Epoch)}
			s.from, s.verified = s.next.slot, true
			continue
		}
		if !s.verified {
			s.verified = true
			if !e.Sealed {
				// Deliver a slot of the open epoch only after the window
				// before it was seen holding data.
				first := m.firstSlot(e.Epoch)
				if s.from > first+e.window() {
					s.from -= e.window()
				} else {
					s.from = first
				}
			}
		}
		if e.Sealed && int64(s.from) > e.end() {
			s.next = pos{epoch: e.Epoch + 1}
			s.from = 0
			continue
		}
		fu := s.fetch(e, m)
		select {
		case <-fu.done:
		case <-s.Stopping():
			return nil
		}
		key := s.w.o.keys.slot(s.w.ch.Name, e.Epoch, s.from)
		switch {
		case fu.err != nil:
			if s.Stopped() {
				return nil
			}
			return errors.Wrapf(fu.err, "s3: scanner of %s: read %s", s.w.ch, key)
		case fu.f.err != nil:
			return errors.Wrapf(fu.f.err, "s3: scanner of %s", s.w.ch)
		case fu.miss && e.Sealed:
			s.dropPending()
			if err := s.refresh(); err != nil {
				return err
			}
			if s.man.gone(s.next) {
				return s.gone()
			}
			if x, ok := s.man.entry(e.Epoch); ok && x.Sealed && int64(s.from) <= x.end() {
				return errors.Newf("s3: scanner of %s: %s is missing, but epoch %d is sealed at slot %d and not truncated there",
					s.w.ch, key, e.Epoch, x.end())
			}
		case fu.miss || fu.f.obj.kind == kindFence:
			// The end for now: wait for the slot, or for a manifest that
			// seals the epoch.
			s.dropPending()
			s.catching = false
			if err := s.await(slotKey{e.Epoch, s.from}, !fu.miss); err != nil {
				return err
			}
		default:
			s.catching = true
			if err := s.deliverObject(fu.f.obj); err != nil {
				return err
			}
		}
	}
}

// await waits until the hub holds slot k or a newer manifest.
func (s *scanner) await(k slotKey, wantManifest bool) error {
	rev := s.man.Rev
	for {
		if f, ok := s.h.lookup(k); ok {
			if f.err != nil {
				return errors.Wrapf(f.err, "s3: scanner of %s", s.w.ch)
			}
			if f.obj.kind == kindData {
				return nil
			}
			wantManifest = true
		}
		if m := s.manifest(); m.Rev != rev {
			return nil
		}
		changed, done := s.h.wait(k, wantManifest)
		select {
		case <-changed:
		case <-s.Stopping():
		}
		done()
		if s.Stopped() {
			return nil
		}
	}
}

// fetch returns the future of slot s.from of e, starting the read-ahead
// behind it.
func (s *scanner) fetch(e epochEntry, m *manifest) *future {
	if len(s.pend) > 0 && (s.pendEpoch != e.Epoch || s.pendFrom != s.from) {
		s.dropPending()
	}
	if len(s.pend) == 0 {
		s.pendEpoch, s.pendFrom = e.Epoch, s.from
	}
	// How far ahead: a window of objects within the read-ahead bytes,
	// to the end of a sealed epoch; in the open epoch only while
	// catching up.
	n := 1
	if e.Sealed || s.catching {
		n = s.w.o.cfg.ReadAhead
		if s.lastSize > 0 {
			n = min(n, max(1, s.readAheadBytes/s.lastSize))
		} else {
			n = 1
		}
	}
	if e.Sealed {
		n = int(min(uint64(n), uint64(e.end()+1)-s.from))
	}
	for len(s.pend) < n {
		s.pend = append(s.pend, s.start(e.Epoch, s.pendFrom+uint64(len(s.pend)), e.Sealed))
	}
	fu := s.pend[0]
	s.pend = s.pend[1:]
	s.pendFrom++
	return fu
}

// start begins one slot's GET (or takes it from the hub).
func (s *scanner) start(epoch, slot uint64, sealed bool) *future {
	fu := &future{done: make(chan struct{})}
	if f, ok := s.h.lookup(slotKey{epoch, slot}); ok {
		fu.f = f
		close(fu.done)
		return fu
	}
	if !sealed && s.h.awaitsOwn(slotKey{epoch, slot}) {
		// The Opener's writer hands it over once acknowledged (a
		// sealed epoch's slots up to its end are all in the store).
		fu.miss = true
		close(fu.done)
		return fu
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(fu.done)
		key := s.w.o.keys.slot(s.w.ch.Name, epoch, slot)
		body, _, err := s.w.o.st.get(s.ctx, key)
		switch {
		case errors.Is(err, errNotFound):
			fu.miss = true
		case err != nil:
			fu.err = err
		default:
			obj, err := decodeObject(key, body, epoch, slot)
			fu.f = fetched{obj: obj, err: err}
		}
	}()
	return fu
}

// dropPending forgets the fetches under way (their goroutines end on
// their own; run waits for them).
func (s *scanner) dropPending() {
	s.pend = nil
}

// deliverObject hands over the messages of the object at s.from at or
// after s.next, then moves on to the next slot.
func (s *scanner) deliverObject(obj *object) error {
	s.lastSize = obj.size
	slot := s.from
	s.from++
	if slot < s.next.slot {
		return nil // a slot before the start, checked for data only
	}
	first := uint32(0)
	if slot == s.next.slot {
		first = s.next.index
	}
	s.next = pos{epoch: obj.epoch, slot: slot + 1}
	if int(first) >= len(obj.msgs) {
		return nil
	}
	batch := s.out.Slice(len(obj.msgs) - int(first))
	for i := int(first); i < len(obj.msgs); i++ {
		batch = append(batch, message.NewImmutable(obj.msgs[i], pos{epoch: obj.epoch, slot: slot, index: uint32(i)}.id()))
	}
	if n := s.out.Deliver(s.Stopping(), batch); n < len(batch) {
		return nil // stopping
	}
	return nil
}
