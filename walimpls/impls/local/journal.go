package local

import (
	"sync"
	"time"

	"github.com/streamwal/streamwal/utility/serial"
)

// recovered is the journal state that recovery hands to the flusher.
type recovered struct {
	active     *segment // nil for an empty store
	off        int64
	limit      int64 // the bytes the active segment may fill
	nextSeq    uint64
	nextChanID uint32
	live       liveSet
	marked     bool // the root has its journal marker
}

// journal is the group-committed segment stream, in two halves.
//
// Deciding happens when a record is submitted, under mu, in the
// submitter's goroutine: fencing, sequence numbers, where the record goes
// (segment switches included), and its frame, appended to the pending
// batch. Doing is the flusher goroutine's (run): it takes the pending batch
// as a whole, installs new segments, writes, syncs per the policy,
// publishes the records to the channels' indexes and acknowledges the
// waiters. So a SyncNone append costs its submitter no hand-off to another
// goroutine: it is acknowledged once framed, and its write overlaps the
// appends that follow.
//
// Its jobs, one file each:
//
//   - submit.go: admission (disk pressure, the pending batch's room) and
//     queueing a request with its waiter;
//   - framer.go: deciding a record under mu (fencing, seqs, claims,
//     deletes) and framing it into the pending batch;
//   - switch.go: segment switching, decided by the framer (fit) and carried
//     out by the flusher (installSegment);
//   - batch.go: the batch handed from framers to the flusher;
//   - flush.go: the flusher's loop, its writes and fdatasync;
//   - publish.go: publishing a written round to the channels' indexes and
//     the segment list, acknowledging its waiters, and waiting for it;
//   - this file: the state, its owners and the sticky error.
//
// The frame format itself is frame.go's (framing) and body.go's (bodies).
type journal struct {
	s *Store

	// mu guards the framing state below and the channels' journal views
	// (channel.w).
	mu       sync.Mutex
	err      error         // sticky: set once a write or sync failed
	failedCh chan struct{} // closed when err is set
	closing  bool
	pend     *batch        // framed, not yet taken by the flusher
	free     *batch        // the batch the flusher gave back, for reuse
	room     chan struct{} // closed when the flusher takes pend; nil if nobody waits
	fseg     uint64        // segment being framed, 0 before the first one
	foff     int64         // where the next frame goes in fseg
	flimit   int64         // the bytes fseg may fill (its recorded size)
	fsynced  int64         // bytes of fseg known synced: the frames' synced field
	fresh    bool          // fseg holds nothing but its start frame
	nextSeq  uint64
	nextChan uint32
	live     liveSet // what the next segment start frame lists

	wake    chan struct{} // capacity 1
	stopped chan struct{} // closed when run returns
	// notes tells asynchronous appends their outcome (submitAsync), in
	// round order, on a goroutine of its own: the flusher goes on with the
	// next round while the callers' completions run. Closed after the
	// flusher returned.
	notes *serial.Queue
	final error // the final sync's error, read after stopped

	// Owned by the flusher goroutine.
	active   *segment
	woff     int64     // end of the bytes written to the active segment
	synced   int64     // bytes of the active segment known durable
	lastSync time.Time // on walimpls.WithClock
	// diskAsked is when the flusher last asked the preparer to read the
	// free space (on walimpls.WithClock; doc.go, Disk space).
	diskAsked time.Time
	marked    bool // the root has its journal marker
	// newSegs are the segments started this round, listed when it is
	// published; a failed round leaves them here for close to close.
	newSegs []*segment
}

func newJournal(s *Store, rs recovered) *journal {
	j := &journal{
		s:        s,
		failedCh: make(chan struct{}),
		pend:     &batch{},
		free:     &batch{},
		foff:     rs.off,
		flimit:   rs.limit,
		fsynced:  rs.off,
		nextSeq:  rs.nextSeq,
		nextChan: rs.nextChanID,
		live:     rs.live,
		wake:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
		notes:    serial.New(),
		active:   rs.active,
		woff:     rs.off,
		synced:   rs.off,
		lastSync: s.cfg.clock.Now(),
		marked:   rs.marked,
	}
	j.diskAsked = j.lastSync // New has just read the free space
	if rs.active != nil {
		j.fseg = rs.active.num
	}
	return j
}

// close stops the flusher after it has written and synced everything
// framed, and returns the final sync's error.
func (j *journal) close() error {
	j.mu.Lock()
	j.closing = true
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.stopped
	for _, seg := range j.newSegs {
		_ = seg.f.Close() // a failed round's; the journal failed already
	}
	j.newSegs = nil
	j.notes.Close()
	return j.final
}

// fail makes err sticky and returns it marked with ErrJournalFailed. Sticky
// because the kernel may have dropped the pages a failed write or sync could
// not write, so a later success would prove nothing: every later submit and
// round gets this error, and only reopening (recovery) brings the root back.
func (j *journal) fail(err error) error {
	j.mu.Lock()
	err = j.failLocked(err)
	j.mu.Unlock()
	return err
}

// failLocked is fail with mu held.
func (j *journal) failLocked(err error) error {
	if j.err != nil {
		return j.err
	}
	j.err = &journalError{dir: j.s.cfg.Dir, cause: err}
	close(j.failedCh)
	j.s.log.Error("journal failed; refusing every later append", "err", j.err)
	return j.err
}

func (j *journal) failed() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}
