package local

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/utility/serial"
	"github.com/streamwal/streamwal/walimpls"
)

type reqKind uint8

const (
	reqAppend reqKind = iota
	reqTerm
	reqTruncate
	reqDelete
)

// request is one record (or one decision) to submit to the journal.
type request struct {
	kind reqKind
	ch   *channel // nil for reqDelete, which looks its channel up when framed
	name string   // reqDelete: the channel to delete
	term int64    // the writer's term; for reqTerm the term to store
	// gen is the writer's claim on the channel (reqAppend, reqTruncate):
	// the record is refused unless it is still the channel's latest.
	gen uint64
	// bodies (reqAppend) are the encoded messages of one batch, in order:
	// they are framed together, contiguous, and acknowledged together.
	bodies [][]byte
	// reqTruncate: the first seq to keep and the last one removed.
	keep, lastRemoved uint64
}

// waiter is a submitter waiting for the flush round that carries its
// record; the flusher finishes it.
type waiter struct {
	done chan struct{}
	err  error
	// seq is the request's seq, set under the journal's mutex as it is
	// framed, before the flusher can take it.
	seq uint64
	// notify, when set, is told the outcome by notes, for a
	// submitter that does not wait (submitAsync).
	notify func(error)
}

// finishWaiters sets the outcome of the waiters of recs and closes their
// done; notes tells those with a notify. Called by the flusher.
func (j *journal) finishWaiters(recs []rec, err error) {
	var told []*waiter
	for _, r := range recs {
		if r.w == nil {
			continue
		}
		r.w.err = err
		close(r.w.done)
		if r.w.notify != nil {
			told = append(told, r.w)
		}
	}
	if len(told) > 0 {
		j.notes.Post(func() {
			for _, w := range told {
				w.notify(w.err)
			}
		})
	}
}

// rec is one framed record, or one decision that waits for a round, in
// framing order.
type rec struct {
	kind  reqKind
	ch    *channel // reqDelete: the deleted channel, nil if there was none
	entry entry    // reqAppend: where the message is (one rec per message)
	term  int64    // reqTerm: the term stored
	gen   uint64   // reqTerm: the claim taken
	// reqTruncate: the truncation point stored.
	keep, lastRemoved uint64
	wrote             bool // a term, truncate or delete frame was written
	// w is nil when nobody waits (SyncNone appends); a batch's waiter is
	// on its last message's rec only.
	w *waiter
}

// piece is a run of framed bytes of one segment, contiguous from off.
type piece struct {
	seg uint64
	off int64 // segment offset of buf[0]
	buf []byte
	// start is set when the piece begins segment seg: buf then starts with
	// startLen bytes reserved for the segment start frame (seq startSeq),
	// which the flusher encodes once it has installed the segment's file,
	// because the frame says whether that file is a recycled one.
	start    *segmentStart
	startSeq uint64
	startLen int
	// seal is set on a piece that starts a segment after another one: the
	// seal frame to write into the previous segment once the new one's file
	// is in place.
	seal *sealPlan
}

// sealPlan is a seal frame the framer reserved in segment seg at off, with
// sequence number seq, naming the segment that follows.
type sealPlan struct {
	seg uint64
	off int64
	seq uint64
}

// batch is what submitters framed since the flusher last took the pending
// batch: the flusher writes it in one round.
type batch struct {
	pieces   []piece
	recs     []rec
	bytes    int
	needSync bool // it holds a term, truncate or delete frame, or starts a segment
}

func (b *batch) empty() bool { return len(b.pieces) == 0 && len(b.recs) == 0 }

// newPiece starts a piece, reusing the buffer of an earlier round's piece.
func (b *batch) newPiece(seg uint64, off int64) *piece {
	n := len(b.pieces)
	if n < cap(b.pieces) {
		b.pieces = b.pieces[:n+1]
		b.pieces[n] = piece{seg: seg, off: off, buf: b.pieces[n].buf[:0]}
	} else {
		b.pieces = append(b.pieces, piece{seg: seg, off: off})
	}
	return &b.pieces[n]
}

// reset empties b for reuse, keeping its buffers.
func (b *batch) reset() {
	clear(b.recs) // drop the channel and waiter pointers
	b.recs = b.recs[:0]
	for i := range b.pieces {
		b.pieces[i].start, b.pieces[i].seal = nil, nil
		if cap(b.pieces[i].buf) > maxKeptPieceBytes {
			b.pieces[i].buf = nil
		}
	}
	b.pieces = b.pieces[:0]
	b.bytes = 0
	b.needSync = false
}

// maxKeptPieceBytes bounds the write buffers kept from one round to the
// next (a round with a huge record does not pin its buffer).
const maxKeptPieceBytes = 8 << 20

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
	lastSync time.Time // on Config.Clock
	// diskAsked is when the flusher last asked the preparer to read the
	// free space (on Config.Clock; doc.go, Disk space).
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
		lastSync: s.cfg.Clock.Now(),
		marked:   rs.marked,
	}
	j.diskAsked = j.lastSync // New has just read the free space
	if rs.active != nil {
		j.fseg = rs.active.num
	}
	return j
}

// submit frames r into the pending batch and waits as the policy requires:
// a SyncNone append returns once framed, every other request once the
// round that carries it is written (and synced, per the policy, and always
// for term and truncate records) and published. It returns the seq of an
// appended message, or the claim a reqTerm took. Refusals (fencing, size),
// a failed or closing journal and a context that ends before the record is
// framed are returned at once, marked walimpls.MarkNotStored: nothing was
// framed. A request abandoned by its context after it was framed is still
// carried out, and its error is not marked. A reqAppend's seq is the first
// of its batch; the batch's other messages have the seqs that follow.
func (j *journal) submit(ctx context.Context, r request) (uint64, error) {
	var w *waiter
	if r.kind != reqAppend || j.s.cfg.Sync != SyncNone {
		w = &waiter{done: make(chan struct{})}
	}
	seq, err := j.enqueue(ctx, r, w)
	if err != nil || w == nil {
		return seq, err
	}
	select {
	case <-w.done:
		return seq, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// submitAsync is submit telling done instead of waiting: before it
// returns when the request is refused or needs no round (a SyncNone
// append), else from the flusher once the round that carries it is done.
func (j *journal) submitAsync(ctx context.Context, r request, done func(uint64, error)) {
	if r.kind == reqAppend && j.s.cfg.Sync == SyncNone {
		done(j.enqueue(ctx, r, nil))
		return
	}
	w := &waiter{done: make(chan struct{})}
	w.notify = func(err error) { done(w.seq, err) }
	if _, err := j.enqueue(ctx, r, w); err != nil {
		done(0, err)
	}
}

// enqueue frames r into the pending batch, with w (nil: nobody waits) on
// its last record. Its errors are submit's refusals.
func (j *journal) enqueue(ctx context.Context, r request, w *waiter) (uint64, error) {
	size := frameSize(0)
	if r.kind == reqAppend {
		size = 0
		for _, body := range r.bodies {
			size += frameSize(len(body))
		}
	}
	if r.kind == reqAppend {
		// Disk pressure holds appends back before they take the mutex: a
		// throttled one waits without holding anybody up, and every other
		// record (the ones that free space among them) passes.
		if err := j.s.disk.admit(ctx, size, j.stopped); err != nil {
			return 0, walimpls.MarkNotStored(err)
		}
	}
	j.mu.Lock()
	if err := j.admit(ctx, size); err != nil {
		j.mu.Unlock()
		return 0, walimpls.MarkNotStored(err)
	}
	kick := j.pend.empty()
	seq, err := j.frame(r, w)
	if w != nil {
		w.seq = seq
	}
	j.mu.Unlock()
	if err != nil {
		return 0, walimpls.MarkNotStored(err)
	}
	if kick {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
	return seq, nil
}

// admit checks that the journal takes records, and waits until the pending
// batch has room for size more bytes: a round writes at most MaxBatchBytes
// (a larger record, or batch of messages, alone), and a submitter that does
// not wait for its round cannot run ahead of the disk by more than that.
// Called with mu held, which it releases while it waits.
func (j *journal) admit(ctx context.Context, size int) error {
	for {
		if j.err != nil {
			return j.err
		}
		if j.closing {
			return errors.Wrap(walimpls.ErrClosed, "local: store closed")
		}
		if j.pend.bytes == 0 || j.pend.bytes+size <= j.s.cfg.MaxBatchBytes {
			return nil
		}
		if j.room == nil {
			j.room = make(chan struct{})
		}
		room := j.room
		j.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			j.mu.Lock()
			return ctx.Err()
		}
		j.mu.Lock()
	}
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

// fail makes err sticky and returns it marked with ErrJournalFailed.
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

// checkClaim reports a *walimpls.FencedError when a later open claimed the
// channel after the writer of term and claim gen: what the journal would
// decide for its next record now.
func (j *journal) checkClaim(ch *channel, term int64, gen uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return ch.fencedLocked(term, gen)
}

// fencedLocked is the fencing decision for a record of the writer of term
// and claim gen. Called with the journal's mu held.
func (ch *channel) fencedLocked(term int64, gen uint64) error {
	if ch.w.deleted {
		return &walimpls.FencedError{Channel: ch.name, Term: term, Deleted: true}
	}
	if gen != ch.w.gen {
		return &walimpls.FencedError{Channel: ch.name, Term: term, CurrentTerm: ch.w.term}
	}
	return nil
}

// framedLastSeq returns the seq of the channel's last framed message: it
// runs ahead of the published one by the records not yet written, which
// SyncNone has acknowledged already.
func (j *journal) framedLastSeq(ch *channel) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return ch.w.lastSeq
}

// awaitPublished waits until the channel's published state covers seq,
// when seq is a framed message of the channel (SyncNone acknowledges an
// append before the flusher publishes it). It returns at once for a seq
// beyond the channel's last framed message, and with the journal's error
// when the records will never be published.
func (j *journal) awaitPublished(ctx context.Context, ch *channel, seq uint64) error {
	for {
		ch.mu.RLock()
		last, notify := ch.lastSeq, ch.notify
		ch.mu.RUnlock()
		if seq <= last {
			return nil
		}
		j.mu.Lock()
		framed, err := ch.w.lastSeq, j.err
		j.mu.Unlock()
		if seq > framed {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-notify:
		case <-j.failedCh:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// frame decides r and appends its frame, if it needs one, to the pending
// batch; with w set it lists r for the round to acknowledge. Called with mu
// held.
func (j *journal) frame(r request, w *waiter) (uint64, error) {
	if r.kind == reqDelete {
		return 0, j.frameDelete(r.name, w)
	}
	ch := r.ch
	if r.kind == reqTerm {
		if ch.w.deleted {
			// The open found the channel before a Delete took it.
			return 0, errChannelDeleted
		}
		if !ch.w.defined && j.nextChan == maxChannelID {
			return 0, errors.Newf("local: open %q: the store has defined %d channels over its life, as many as channel ids allow", ch.name, maxChannelID-1)
		}
		if r.term < ch.w.term {
			return 0, &walimpls.FencedError{Channel: ch.name, Term: r.term, CurrentTerm: ch.w.term}
		}
	} else if err := ch.fencedLocked(r.term, r.gen); err != nil {
		return 0, err
	}
	b := j.pend
	switch r.kind {
	case reqAppend:
		return j.frameBatch(ch, r.bodies, w)
	case reqTerm:
		// The claim: every earlier writer's next record is refused.
		ch.w.gen++
		gen := ch.w.gen
		if ch.w.defined && r.term == ch.w.term {
			// An open at the stored term: nothing to store, but the answer
			// waits for the round, after every earlier record of this term.
			b.recs = append(b.recs, rec{kind: reqTerm, ch: ch, term: r.term, gen: gen, w: w})
			return gen, nil
		}
		if !ch.w.defined {
			ch.w.id = j.nextChan
			j.nextChan++
			ch.w.defined = true
			j.live.add(ch)
		}
		ch.w.term = r.term
		if err := j.putMeta(typeTerm, ch.w.id, encodeTerm(r.term, ch.name)); err != nil {
			return 0, err
		}
		b.recs = append(b.recs, rec{kind: reqTerm, ch: ch, term: r.term, gen: gen, wrote: true, w: w})
		b.needSync = true
		return gen, nil
	case reqTruncate:
		if r.keep <= ch.w.keep {
			b.recs = append(b.recs, rec{kind: reqTruncate, ch: ch, w: w})
			return 0, nil
		}
		ch.w.keep = r.keep
		ch.w.lastRemoved = max(ch.w.lastRemoved, r.lastRemoved)
		if err := j.putMeta(typeTruncate, ch.w.id, encodeTruncate(ch.w.keep, ch.w.lastRemoved)); err != nil {
			return 0, err
		}
		b.recs = append(b.recs, rec{kind: reqTruncate, ch: ch, keep: r.keep, lastRemoved: r.lastRemoved, wrote: true, w: w})
		b.needSync = true
	}
	return 0, nil
}

// maxChannelID bounds the channel ids: a segment start frame's next id is
// at most this (doc.go, Deleting a channel).
const maxChannelID = 1<<32 - 1

// frameDelete decides a Delete of name (doc.go, Deleting a channel): it
// takes the channel out of the store and out of the live set, marks it so
// that every later record of its writers and claim of its openers is
// refused, and frames its delete frame when the channel is on disk. The
// waiter goes with the round, with or without a frame. Called with mu held.
func (j *journal) frameDelete(name string, w *waiter) error {
	s := j.s
	s.mu.Lock()
	ch := s.channels[name]
	s.mu.Unlock()
	b := j.pend
	if ch == nil {
		b.recs = append(b.recs, rec{kind: reqDelete, w: w})
		return nil
	}
	wrote := ch.w.defined
	if wrote {
		// Framed before the channel leaves the live set: a segment the
		// frame starts lists the channel, and the frame then ends it.
		if err := j.putMeta(typeDelete, ch.w.id, encodeDelete(name)); err != nil {
			return err
		}
		j.live.remove(ch)
		b.needSync = true
	}
	ch.w.deleted = true
	// Only a delete (under mu) removes a channel from the map, so it is
	// still ch: an Open from now on finds a new channel, whose first
	// record is framed after this one.
	s.mu.Lock()
	delete(s.channels, name)
	s.mu.Unlock()
	b.recs = append(b.recs, rec{kind: reqDelete, ch: ch, wrote: wrote, w: w})
	return nil
}

// frameBatch frames the messages of one batch, in order and contiguous in
// one segment: every frame but the last carries flagMore, so that recovery
// keeps the batch whole or drops it whole (doc.go, Batches). A batch that
// does not fit in the rest of this segment starts the next one; a batch
// that fits in no segment is refused, with nothing framed. The waiter goes
// with the last message: the round acknowledges the batch once. It returns
// the first message's seq. Called with mu held, after the fencing check.
func (j *journal) frameBatch(ch *channel, bodies [][]byte, w *waiter) (uint64, error) {
	if len(bodies) == 0 {
		return 0, errors.AssertionFailedf("local: an empty batch reached the journal")
	}
	size := int64(0)
	for _, body := range bodies {
		size += int64(frameSize(len(body)))
	}
	if room, ok := j.fit(size); !ok {
		// One message always fits (Config.Validate), unless its encoding
		// (many tiny properties) is far above its Size.
		return 0, errors.Wrapf(&walimpls.TooLargeError{Size: int(size), Limit: int(room)},
			"a batch of %d messages does not fit in one segment (segmentBytes %d, less its start frame and seal)",
			len(bodies), j.s.cfg.SegmentBytes)
	}
	first := j.nextSeq
	b := j.pend
	for i, body := range bodies {
		r := rec{kind: reqAppend, ch: ch}
		flags := flagMore
		if i == len(bodies)-1 {
			flags, r.w = 0, w
		}
		r.entry = j.putFrame(typeMessage, ch.w.id, body, flags)
		b.recs = append(b.recs, r)
	}
	ch.w.lastSeq = j.nextSeq - 1
	return first, nil
}

// putMeta frames a term, truncate or delete record. Such a record not
// fitting in an empty segment (a start frame listing a vast number of live
// channels) fails the journal: the channels' journal view already moved
// ahead of the log. Called with mu held.
func (j *journal) putMeta(typ frameType, chanID uint32, body []byte) error {
	if _, ok := j.fit(int64(frameSize(len(body)))); !ok {
		return j.failLocked(errors.Newf("local: a %d-byte record does not fit in a %d-byte segment after its start frame", len(body), j.s.cfg.SegmentBytes))
	}
	j.putFrame(typ, chanID, body, 0)
	return nil
}

// fit makes room for size bytes of frames in the segment being framed,
// starting the next segment when they do not fit in this one: every
// segment keeps sealReserve bytes for the seal frame that will end it and
// its end marker. When they would not fit even in an empty segment it
// frames nothing and returns false, with the room such a segment has for
// frames. Called with mu held.
func (j *journal) fit(size int64) (room int64, ok bool) {
	if j.fseg != 0 && j.foff+size+sealReserve <= j.flimit {
		return 0, true
	}
	if j.fseg != 0 && j.fresh {
		// Nothing but its start frame: the next segment has no more room.
		return j.flimit - j.foff - sealReserve, false
	}
	st, stSize := j.nextStart()
	room = j.s.cfg.SegmentBytes - int64(stSize) - sealReserve
	if size > room {
		return room, false
	}
	j.startSegment(st, stSize)
	return 0, true
}

// putFrame frames one record into the pending batch, in the segment being
// framed, which fit made room in. Called with mu held.
func (j *journal) putFrame(typ frameType, chanID uint32, body []byte, flags uint8) entry {
	size := int64(frameSize(len(body)))
	b := j.pend
	var p *piece
	if n := len(b.pieces); n > 0 && b.pieces[n-1].seg == j.fseg {
		p = &b.pieces[n-1]
	} else {
		p = b.newPiece(j.fseg, j.foff)
	}
	seq := j.nextSeq
	j.nextSeq++
	off := j.foff
	p.buf = appendFrame(p.buf, frameHeader{
		seq:    seq,
		seg:    uint32(j.fseg),
		synced: uint32(j.fsynced),
		chanID: chanID,
		typ:    typ,
		flags:  flags,
	}, body)
	j.foff += size
	j.fresh = false
	b.bytes += int(size)
	return entry{seq: seq, seg: j.fseg, off: uint32(off), size: uint32(size)}
}

// nextStart returns the start frame the next segment would get now (a
// snapshot of every live channel) and its size with padding. The
// recycled flag is one varint byte either way, so the frame's size is known
// before the flusher learns which file it gets. Called with mu held.
func (j *journal) nextStart() (*segmentStart, int) {
	prevEnd := int64(0)
	if j.fseg != 0 {
		prevEnd = j.foff + sealSize
	}
	st := &segmentStart{prevEnd: uint64(prevEnd), segmentBytes: j.s.cfg.SegmentBytes, nextChanID: j.nextChan, chans: j.live.snapshots()}
	return st, frameSize(len(encodeSegmentStart(*st)))
}

// startSegment frames the start of the next segment: the seal that ends the
// current one (in the room fit kept for it), and a piece at the new
// segment's offset 0 with room for st, the start frame nextStart just
// returned, of size bytes. The flusher installs the file, writes the seal
// and encodes the start frame. Called with mu held.
func (j *journal) startSegment(st *segmentStart, size int) {
	var seal *sealPlan
	if j.fseg != 0 {
		seal = &sealPlan{seg: j.fseg, off: j.foff, seq: j.nextSeq}
		j.nextSeq++
	}
	j.fseg++
	p := j.pend.newPiece(j.fseg, 0)
	p.start, p.startSeq, p.startLen, p.seal = st, j.nextSeq, size, seal
	j.nextSeq++
	p.buf = append(p.buf, make([]byte, size)...)
	j.pend.bytes += size
	// Synced whatever the policy before the segment is published: from
	// then on the collector may free the segment before it (doc.go,
	// Truncation).
	j.pend.needSync = true
	j.foff, j.fsynced, j.flimit = int64(size), 0, j.s.cfg.SegmentBytes
	j.fresh = true
}

// take hands the pending batch to the flusher (nil when there is none) and
// reports whether the journal is closing.
func (j *journal) take() (*batch, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pend.empty() {
		return nil, j.closing
	}
	b := j.pend
	j.pend, j.free = j.free, nil
	if j.pend == nil {
		j.pend = &batch{}
	}
	if j.room != nil {
		close(j.room)
		j.room = nil
	}
	return b, j.closing
}

// giveBack returns a written batch for reuse.
func (j *journal) giveBack(b *batch) {
	b.reset()
	j.mu.Lock()
	j.free = b
	j.mu.Unlock()
}

// run is the flusher goroutine.
func (j *journal) run() {
	defer close(j.stopped)
	var tick <-chan time.Time
	if j.s.cfg.Sync == SyncInterval {
		t := j.s.cfg.Clock.NewTicker(j.s.cfg.SyncInterval)
		defer t.Stop()
		tick = t.Chan()
	}
	for {
		b, closing := j.take()
		if b != nil {
			j.flush(b)
			j.giveBack(b)
			j.askDiskCheck()
			continue
		}
		if closing {
			// A clean close leaves nothing unsynced, whatever the policy.
			if j.active != nil && j.synced < j.woff && j.failed() == nil {
				if err := j.syncActive(); err != nil {
					j.final = err
				}
			}
			return
		}
		select {
		case <-j.wake:
		case <-tick:
			if j.active != nil && j.synced < j.woff && j.failed() == nil {
				_ = j.syncActive()
			}
		}
	}
}

// askDiskCheck asks the preparer to read the free space when
// Config.DiskCheckInterval has passed since the flusher last asked: while
// the journal writes, others may fill the file system (doc.go, Disk
// space). One clock reading per round.
func (j *journal) askDiskCheck() {
	if !j.s.disk.levels.enabled() {
		return
	}
	if now := j.s.cfg.Clock.Now(); now.Sub(j.diskAsked) >= j.s.cfg.DiskCheckInterval {
		j.diskAsked = now
		j.s.prep.requestDiskCheck()
	}
}

// flush is one group-commit round: write the batch once, sync once (per
// the policy), publish, acknowledge.
func (j *journal) flush(b *batch) {
	err := j.failed()
	for i := range b.pieces {
		if err != nil {
			break
		}
		err = j.writePiece(&b.pieces[i])
	}
	needSync := b.needSync || j.s.cfg.Sync == SyncAlways
	if err == nil && j.s.cfg.Sync == SyncInterval && j.s.cfg.Clock.Since(j.lastSync) >= j.s.cfg.SyncInterval {
		needSync = true
	}
	if err == nil && needSync && j.active != nil && j.synced < j.woff {
		err = j.syncActive()
	}
	if err != nil {
		// The segments the round started stay unlisted: a listed segment's
		// start frame is durable, and the collector may free the segment
		// before it (doc.go, Truncation). close closes their files.
		j.finishWaiters(b.recs, err)
		return
	}
	j.publish(b)
}

// writePiece writes a piece, installing its segment first when it starts
// one, followed by an end marker: an all-zero header where the next frame
// will go. The marker makes the end of the log explicit in a recycled
// segment, whose old frames would otherwise follow, and overwrites any
// frame left there by a torn write from before a recovery. The next write
// starts on the marker.
func (j *journal) writePiece(p *piece) error {
	if p.start != nil {
		if err := j.installSegment(p); err != nil {
			return err
		}
	}
	if j.active == nil || j.active.num != p.seg || j.woff != p.off {
		return j.fail(errors.AssertionFailedf("local: piece of segment %d at %d does not follow the writes (segment %d at %d)", p.seg, p.off, j.activeNum(), j.woff))
	}
	n := len(p.buf)
	// put kept room for it (and for a seal) in the segment.
	var marker [headerSize]byte
	p.buf = append(p.buf, marker[:]...)
	if _, err := j.active.f.WriteAt(p.buf, p.off); err != nil {
		return j.fail(errors.Wrapf(err, "local: write segment %d at %d", p.seg, p.off))
	}
	p.buf = p.buf[:n]
	j.woff = p.off + int64(n)
	return nil
}

func (j *journal) activeNum() uint64 {
	if j.active == nil {
		return 0
	}
	return j.active.num
}

// installSegment switches segments, in the order doc.go (Writing) gives:
// it syncs the active segment - whatever the policy, so that only the last
// segment can ever hold unsynced bytes - installs the spare as the piece's
// segment (renamed into place, the directory synced), writes the seal
// naming it into the old segment and syncs that, and encodes the piece's
// start frame. The seal is never durable before the new segment's name is.
func (j *journal) installSegment(p *piece) error {
	if p.seal != nil && (j.active == nil || j.active.num != p.seal.seg || j.woff != p.seal.off) {
		return j.fail(errors.AssertionFailedf("local: seal of segment %d at %d does not follow the writes (segment %d at %d)", p.seal.seg, p.seal.off, j.activeNum(), j.woff))
	}
	if j.active != nil && j.synced < j.woff {
		if err := j.syncActive(); err != nil {
			return err
		}
	}
	inst := j.s.prep.install(p.seg)
	if inst.err != nil {
		return j.fail(errors.Wrapf(inst.err, "local: start segment %d", p.seg))
	}
	seg := &segment{num: p.seg, f: inst.f, chans: map[*channel]uint64{}}
	// Listed at once, so that Close closes its file even if this fails.
	j.newSegs = append(j.newSegs, seg)
	if p.seal != nil {
		fr := appendFrame(nil, frameHeader{seq: p.seal.seq, seg: uint32(p.seal.seg), synced: uint32(j.synced), typ: typeSeal}, encodeSeal(p.seg))
		fr = append(fr, make([]byte, headerSize)...) // the end marker
		if _, err := j.active.f.WriteAt(fr, p.seal.off); err != nil {
			return j.fail(errors.Wrapf(err, "local: write the seal of segment %d at %d", p.seal.seg, p.seal.off))
		}
		j.woff = p.seal.off + sealSize
	}
	if j.active != nil && j.synced < j.woff {
		if err := j.syncActive(); err != nil {
			return err
		}
	}
	j.active = seg
	j.woff, j.synced = 0, 0
	st := *p.start
	st.recycled = inst.recycled
	fr := appendFrame(nil, frameHeader{seq: p.startSeq, seg: uint32(p.seg), typ: typeSegmentStart}, encodeSegmentStart(st))
	if len(fr) != p.startLen {
		return j.fail(errors.AssertionFailedf("local: start frame of segment %d is %d bytes, %d reserved", p.seg, len(fr), p.startLen))
	}
	copy(p.buf, fr)
	// The round's sync, which a round that starts a segment always makes,
	// covers the start frame before the segment is published.
	return nil
}

// syncActive fdatasyncs the active segment. A failure is sticky: the kernel
// may have dropped the pages it could not write, so a later successful sync
// would prove nothing. The root's first sync makes its first segment
// durable, start frame included: it then writes the journal marker, once,
// whose failure is sticky too. The sync's duration is the device's, timed
// on the real clock; lastSync is on Config.Clock, which schedules the
// interval policy.
func (j *journal) syncActive() error {
	start := time.Now()
	err := j.active.f.Sync()
	d := time.Since(start)
	j.s.m.syncSeconds.Observe(d.Seconds())
	if d >= j.s.cfg.SlowSync {
		j.s.log.Warn("slow fdatasync", "segment", j.active.num, "took", d)
	}
	if err != nil {
		return j.fail(errors.Wrapf(err, "local: fdatasync segment %d", j.active.num))
	}
	j.synced = j.woff
	j.lastSync = j.s.cfg.Clock.Now()
	j.mu.Lock()
	if j.fseg == j.active.num {
		j.fsynced = j.synced
	}
	j.mu.Unlock()
	if !j.marked {
		if err := j.s.writeMarker(); err != nil {
			return j.fail(err)
		}
		j.marked = true
	}
	return nil
}

// publishSegments lists the segments started by this round, whose start
// frames the round synced.
func (j *journal) publishSegments() {
	if len(j.newSegs) == 0 {
		return
	}
	s := j.s
	s.segMu.Lock()
	s.segments = append(s.segments, j.newSegs...)
	n := len(s.segments)
	s.segMu.Unlock()
	s.m.segments.Set(float64(n))
	j.newSegs = j.newSegs[:0]
}

// publish makes a written round visible: index entries, terms, truncation
// points, deletions, new segments; then it wakes scanners and acknowledges
// waiters.
func (j *journal) publish(b *batch) {
	s := j.s
	j.publishSegments()
	var touched, deleted []*channel
	freed := false // a truncation or deletion may free segments
	records, bytes := 0, 0
	for i := 0; i < len(b.recs); {
		r := &b.recs[i]
		ch := r.ch
		switch r.kind {
		case reqAppend:
			// A run of appends to one channel takes its lock once.
			ch.mu.Lock()
			for ; i < len(b.recs) && b.recs[i].kind == reqAppend && b.recs[i].ch == ch; i++ {
				ch.entries = append(ch.entries, b.recs[i].entry)
				ch.lastSeq = b.recs[i].entry.seq
				records++
				bytes += int(b.recs[i].entry.size)
			}
			ch.mu.Unlock()
			if len(touched) == 0 || touched[len(touched)-1] != ch {
				touched = append(touched, ch)
			}
			continue
		case reqTerm:
			ch.mu.Lock()
			ch.id = ch.w.id
			prev, fenced := ch.term, 0
			ch.term = max(ch.term, r.term)
			ch.gen = r.gen
			for w := range ch.writers {
				// The claimer is not listed yet; every listed writer
				// claimed earlier.
				if w.gen < r.gen && w.fence(&walimpls.FencedError{CurrentTerm: r.term}) {
					fenced++
				}
			}
			ch.mu.Unlock()
			switch {
			case r.wrote:
				s.log.Info("channel term stored", "channel", ch.name, "term", r.term, "previous_term", prev, "fenced_writers", fenced)
			case fenced > 0:
				s.log.Info("channel claimed again at its term", "channel", ch.name, "term", r.term, "fenced_writers", fenced)
			}
		case reqTruncate:
			if r.wrote {
				ch.publishTruncate(r.keep, r.lastRemoved)
				freed = true
			}
		case reqDelete:
			if ch != nil {
				fenced := ch.publishDelete()
				deleted = append(deleted, ch)
				s.log.Info("channel deleted", "channel", ch.name, "stored", r.wrote, "fenced_writers", fenced)
			}
		}
		i++
	}
	if records > 0 {
		s.segMu.Lock()
		for i := range b.recs {
			r := &b.recs[i]
			if r.kind != reqAppend {
				continue
			}
			if n := i + 1; n < len(b.recs) && b.recs[n].kind == reqAppend && b.recs[n].ch == r.ch && b.recs[n].entry.seg == r.entry.seg {
				continue // the next one overwrites it
			}
			// The round wrote to the last segments only.
			for k := len(s.segments) - 1; k >= 0; k-- {
				if seg := s.segments[k]; seg.num == r.entry.seg {
					seg.chans[r.ch] = r.entry.seq
					break
				}
			}
		}
		s.segMu.Unlock()
		s.m.appends.Add(float64(records))
		s.m.appendBytes.Add(float64(bytes))
		s.m.batchRecords.Observe(float64(records))
	}
	if len(deleted) > 0 {
		// After the appends above: those of a deleted channel in this
		// round were framed before its delete frame.
		s.forgetInSegments(deleted)
		freed = true
	}
	for _, ch := range touched {
		ch.wake()
	}
	j.finishWaiters(b.recs, nil)
	if freed {
		s.prep.requestGC()
	}
}

// wake tells the channel's tailing scanners that there is more to read.
func (ch *channel) wake() {
	ch.mu.Lock()
	close(ch.notify)
	ch.notify = make(chan struct{})
	ch.mu.Unlock()
}

// publishTruncate moves the published truncation point forward and drops the
// index entries below it.
func (ch *channel) publishTruncate(keep, lastRemoved uint64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if lastRemoved > ch.lastRemoved.Load() {
		ch.lastRemoved.Store(lastRemoved)
	}
	if keep <= ch.keep.Load() {
		return
	}
	ch.keep.Store(keep)
	i := 0
	for i < len(ch.entries) && ch.entries[i].seq < keep {
		i++
	}
	if i > 0 {
		// Copy when most of the array is dead, so truncation gives memory
		// back; otherwise re-slice.
		if i > len(ch.entries)/2 {
			ch.entries = append([]entry(nil), ch.entries[i:]...)
		} else {
			ch.entries = ch.entries[i:]
		}
	}
}
