package local

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
)

// maxSpares bounds the prepared segment files kept ahead of need: one
// zero-filled, plus one recycled from a truncated segment.
const maxSpares = 2

// preparer is the background goroutine that keeps spare segment files ready,
// installs one when the flusher asks, and deletes segments that truncation
// has freed. A freed segment of full size is kept as a spare instead
// (recycling: its blocks are already written, so the journal overwrites them
// as cheaply as pre-zeroed ones, and nothing has to be zero-filled); a
// zero-filled spare is made only when there is no spare at all. Recycled
// spares are installed first. It owns the spare files.
type preparer struct {
	s       *Store
	req     chan uint64
	resp    chan installResult
	gc      chan struct{} // capacity 1
	stop    chan struct{}
	stopped chan struct{}
	zeros   []byte

	spares []spare // owned by run; recycled ones first
	nextID int     // names the next spare file

	// The readings of the free space (doc.go, Disk space), owned by run,
	// which hands each one to the Store's diskGuard. diskReq asks for one
	// (capacity 1): nil from the flusher, from a test a channel that run
	// closes once it has taken the reading.
	diskReq  chan chan struct{}
	fresh    bool   // the last reading was taken since run last waited
	lastFree uint64 // the last successful reading
	lastOK   bool   // the last reading succeeded
	readErr  bool   // the last reading failed (logged once per run of failures)
	deferred bool   // no room to prepare a spare ahead of need

	// collections counts the collection passes run has finished, so that
	// a test can wait for the one a truncation asked for instead of
	// sleeping; deferrals counts the times run found no room to prepare a
	// spare ahead of need.
	collections atomic.Uint64
	deferrals   atomic.Uint64
}

type spare struct {
	f        File
	name     string
	recycled bool
}

type installResult struct {
	f        File
	recycled bool
	err      error
}

func newPreparer(s *Store) *preparer {
	return &preparer{
		s:       s,
		req:     make(chan uint64),
		resp:    make(chan installResult),
		gc:      make(chan struct{}, 1),
		diskReq: make(chan chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

// isSpareName reports whether a file of the root is a spare; spares left
// over by a crash are removed on open.
func isSpareName(name string) bool {
	return strings.HasPrefix(name, "spare-") && strings.HasSuffix(name, ".tmp")
}

func (p *preparer) spareName() string {
	p.nextID++
	return p.s.path("spare-" + strconv.Itoa(p.nextID) + ".tmp")
}

// install asks the preparer to turn a spare into segment num and returns
// the open file. Called by the flusher only.
func (p *preparer) install(num uint64) installResult {
	p.req <- num
	return <-p.resp
}

// requestGC asks for a pass over the oldest segments; it never blocks.
func (p *preparer) requestGC() {
	select {
	case p.gc <- struct{}{}:
	default:
	}
}

// close stops the preparer and waits for it. The flusher must have stopped,
// since it may be waiting in install.
func (p *preparer) close() {
	close(p.stop)
	<-p.stopped
}

// requestDiskCheck asks for a reading of the free space; it never
// blocks.
func (p *preparer) requestDiskCheck() {
	select {
	case p.diskReq <- nil:
	default:
	}
}

func (p *preparer) run() {
	defer close(p.stopped)
	defer func() {
		for _, sp := range p.spares {
			_ = sp.f.Close()
		}
	}()
	// recheck reads the free space again every DiskCheckInterval while
	// it is below a watermark, so that the pressure ends once space is
	// freed (by others too) even when nothing is written.
	var recheck clockwork.Timer
	defer func() {
		if recheck != nil {
			recheck.Stop()
		}
	}()
	var prepErr error
	for {
		if len(p.spares) == 0 && prepErr == nil && p.spareFits() {
			// Prepare ahead of need, so a segment switch only renames.
			prepErr = p.prepare()
		}
		p.fresh = false
		var recheckC <-chan time.Time
		if p.s.disk.load() != diskOK {
			if recheck == nil {
				recheck = p.s.cfg.clock.NewTimer(p.s.cfg.DiskCheckInterval)
			}
			recheckC = recheck.Chan()
		} else if recheck != nil {
			recheck.Stop()
			recheck = nil
		}
		select {
		case taken := <-p.diskReq:
			p.checkDisk()
			if taken != nil {
				close(taken)
			}
		case <-recheckC:
			recheck = nil
			p.checkDisk()
		case num := <-p.req:
			if len(p.spares) == 0 {
				// Try again: the disk may have had room since.
				prepErr = p.prepare()
			}
			var r installResult
			if len(p.spares) == 0 {
				r.err = prepErr
			} else {
				r = p.installSpare(num)
			}
			p.resp <- r
		case <-p.gc:
			p.collectSegments()
		case <-p.stop:
			return
		}
	}
}

// prepare writes a spare segment full of zeros and syncs it: overwriting
// pre-zeroed blocks makes the journal's fdatasyncs cheaper than extending a
// file or writing into unwritten (merely fallocated) extents.
func (p *preparer) prepare() error {
	s := p.s
	name := p.spareName()
	f, err := s.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return errors.Wrap(err, "local: create spare segment")
	}
	if p.zeros == nil {
		p.zeros = make([]byte, 1<<20)
	}
	for off := int64(0); off < s.cfg.SegmentBytes; {
		n := min(int64(len(p.zeros)), s.cfg.SegmentBytes-off)
		if _, err := f.WriteAt(p.zeros[:n], off); err != nil {
			_ = f.Close()
			_ = s.fs.Remove(name)
			return errors.Wrap(err, "local: zero-fill spare segment")
		}
		off += n
		select {
		case <-p.stop:
			// Closing: a half-zeroed spare is removed on the next open.
			_ = f.Close()
			return errors.New("local: closing")
		default:
		}
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = s.fs.Remove(name)
		return errors.Wrap(err, "local: sync spare segment")
	}
	p.spares = append(p.spares, spare{f: f, name: name})
	if p.s.disk.levels.enabled() {
		// The journal took a segment's worth of space.
		p.checkDisk()
	}
	return nil
}

// checkDisk reads the free space of the root's file system and hands the
// reading to the Store's diskGuard. A failed reading leaves the pressure
// as it was; the first of a run of failures is logged.
func (p *preparer) checkDisk() {
	s := p.s
	free, err := s.fs.FreeBytes(s.cfg.Dir)
	defer s.m.diskChecks.Inc() // once the reading is taken and logged
	p.fresh = true
	if err != nil {
		if !p.readErr {
			s.log.Warn("cannot read the free space of the root's file system; the disk watermarks keep their last state", "err", err)
		}
		p.lastOK, p.readErr = false, true
		return
	}
	p.lastFree, p.lastOK, p.readErr = free, true, false
	s.disk.observe(free)
}

// spareFits reports whether a spare may be zero-filled ahead of need: not
// when that would take the free space below the hard watermark (doc.go,
// Disk space). It reads the free space unless run just did. A spare that
// a segment switch needs now is prepared whatever the free space: the
// watermark keeps room for it.
func (p *preparer) spareFits() bool {
	l := p.s.disk.levels
	if l.hard == 0 {
		return true
	}
	if !p.fresh {
		p.checkDisk()
	}
	if !p.lastOK {
		return true // unknown: as without a watermark
	}
	fits := l.spareFits(p.lastFree, p.s.cfg.SegmentBytes)
	if !fits {
		if !p.deferred {
			p.s.log.Info("not preparing the next segment ahead of need: it would take the free disk space below the hard watermark",
				"free_bytes", p.lastFree, "hard_watermark", l.hard, "segment_bytes", p.s.cfg.SegmentBytes)
		}
		p.deferrals.Add(1)
	}
	p.deferred = !fits
	return fits
}

// installSpare renames the first spare to segment num and syncs the
// directory, so that the segment's name is durable before anything in it is
// acknowledged.
func (p *preparer) installSpare(num uint64) installResult {
	s := p.s
	sp := p.spares[0]
	p.spares = p.spares[1:]
	if err := s.fs.Rename(sp.name, s.path(segmentName(num))); err != nil {
		_ = sp.f.Close()
		return installResult{err: errors.Wrapf(err, "local: install segment %d", num)}
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		_ = sp.f.Close()
		return installResult{err: errors.Wrapf(err, "local: sync directory for segment %d", num)}
	}
	return installResult{f: sp.f, recycled: sp.recycled}
}

// collectSegments deletes (or recycles) the oldest segments that no channel
// needs any more. The segment after the one it frees is listed, so its
// start frame is durable (doc.go, Truncation).
func (p *preparer) collectSegments() {
	defer p.collections.Add(1)
	s := p.s
	freed := false
	defer func() {
		if freed && s.disk.levels.enabled() {
			// Read the space given back now, not at the next check: the
			// appends refused for it may go again.
			p.checkDisk()
		}
	}()
	for {
		s.segMu.Lock()
		// The last segment is the one the journal writes (or the one that
		// ends the log); it is never deleted.
		if len(s.segments) < 2 {
			s.segMu.Unlock()
			return
		}
		oldest := s.segments[0]
		for ch, last := range oldest.chans {
			if last >= ch.keep.Load() {
				s.segMu.Unlock()
				return
			}
		}
		s.segments = s.segments[1:]
		n := len(s.segments)
		s.segMu.Unlock()
		freed = true
		s.m.segments.Set(float64(n))
		// Readers still holding the file read frames of another segment (or
		// fail once it is closed) and learn from the truncation point that
		// their position is gone. Under disk pressure the segment is
		// deleted, not kept as a spare: a spare's blocks are not free
		// space, and the pressure ends only once the file system has room.
		if len(p.spares) < maxSpares && p.s.disk.load() == diskOK && p.recycle(oldest) {
			s.log.Debug("recycled truncated segment", "segment", oldest.num)
		} else {
			if err := s.fs.Remove(s.path(segmentName(oldest.num))); err != nil && !os.IsNotExist(err) {
				s.log.Warn("cannot delete truncated segment", "segment", oldest.num, "err", err)
			}
			_ = oldest.f.Close()
			s.log.Debug("deleted truncated segment", "segment", oldest.num)
		}
		// The next segment goes only once this one is gone for good: the
		// file system may make unsynced directory changes durable in any
		// order, and a later deletion without this one is a gap.
		if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
			s.log.Warn("cannot sync the directory after freeing a segment; freeing no more for now", "segment", oldest.num, "err", err)
			return
		}
	}
}

// recycle keeps a freed segment of full size as a spare. A crash before it
// is installed leaves either the old segment (replayed, and ignored as
// truncated) or a spare file (removed on open).
func (p *preparer) recycle(seg *segment) bool {
	s := p.s
	if size, err := seg.f.Size(); err != nil || size != s.cfg.SegmentBytes {
		return false
	}
	name := p.spareName()
	if err := s.fs.Rename(s.path(segmentName(seg.num)), name); err != nil {
		return false
	}
	p.spares = append([]spare{{f: seg.f, name: name, recycled: true}}, p.spares...)
	s.m.recycled.Inc()
	return true
}
