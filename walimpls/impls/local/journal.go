package local

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

type reqKind uint8

const (
	reqAppend reqKind = iota
	reqTerm
	reqTruncate
)

// request is one record (or one decision) queued for the flusher.
type request struct {
	kind reqKind
	ch   *channel
	term int64  // the writer's term; for reqTerm the term to store
	body []byte // reqAppend: the encoded message
	// reqTruncate: the first seq to keep and the last one removed.
	keep, lastRemoved uint64

	// Set by the flusher before done is closed.
	seq   uint64
	entry entry
	wrote bool // a term or truncate frame was written
	err   error
	done  chan struct{}
}

// recovered is the journal state that recovery hands to the flusher.
type recovered struct {
	active     *segment // nil for an empty store
	off        int64
	nextSeq    uint64
	nextChanID uint32
	defined    []*channel
}

// journal is the group-committed segment stream. Appenders enqueue requests;
// the flusher goroutine (run) owns everything below the queue: the active
// segment, the write buffer and the channels' journal views.
type journal struct {
	s *Store

	mu      sync.Mutex // guards queue, err, closing
	queue   []*request
	err     error // sticky: set once a write or sync failed
	closing bool
	wake    chan struct{} // capacity 1
	stopped chan struct{} // closed when run returns
	final   error         // the final sync's error, read after stopped

	// Owned by the flusher goroutine.
	active     *segment
	off        int64 // where the next frame goes in the active segment
	synced     int64 // bytes of the active segment known durable
	lastSync   time.Time
	nextSeq    uint64
	nextChanID uint32
	defined    []*channel
	buf        []byte
	bufOff     int64      // segment offset of buf[0]
	newSegs    []*segment // segments started this round, published with it
	needSync   bool
	fresh      bool // the active segment holds nothing but its start frame
}

func newJournal(s *Store, rs recovered) *journal {
	j := &journal{
		s:          s,
		wake:       make(chan struct{}, 1),
		stopped:    make(chan struct{}),
		active:     rs.active,
		off:        rs.off,
		synced:     rs.off,
		nextSeq:    rs.nextSeq,
		nextChanID: rs.nextChanID,
		defined:    rs.defined,
		lastSync:   time.Now(),
	}
	return j
}

func (j *journal) lock()   { j.mu.Lock() }
func (j *journal) unlock() { j.mu.Unlock() }

// enqueue queues r, or fails at once when the journal failed or is closing.
func (j *journal) enqueue(r *request) error {
	j.lock()
	if j.err != nil {
		err := j.err
		j.unlock()
		return err
	}
	if j.closing {
		j.unlock()
		return errors.Wrap(walimpls.ErrClosed, "local: store closed")
	}
	j.queue = append(j.queue, r)
	j.unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return nil
}

// do enqueues r and waits until the flusher has handled it or ctx ends. A
// request abandoned by its context is still carried out.
func (j *journal) do(ctx context.Context, r *request) error {
	r.done = make(chan struct{})
	if err := j.enqueue(r); err != nil {
		return err
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the flusher after it has written and synced everything
// queued, and returns the final sync's error.
func (j *journal) close() error {
	j.lock()
	j.closing = true
	j.unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.stopped
	return j.final
}

// fail makes err sticky and returns it marked with ErrJournalFailed.
func (j *journal) fail(err error) error {
	err = &journalError{dir: j.s.cfg.Dir, cause: err}
	j.lock()
	if j.err == nil {
		j.err = err
	} else {
		err = j.err
	}
	j.unlock()
	j.s.log.Error("journal failed; refusing every later append", "err", err)
	return err
}

func (j *journal) failed() error {
	j.lock()
	defer j.unlock()
	return j.err
}

// take removes up to MaxBatchBytes of requests from the queue (at least
// one), and reports whether the journal is closing.
func (j *journal) take() ([]*request, bool) {
	j.lock()
	defer j.unlock()
	n, bytes := 0, 0
	for n < len(j.queue) {
		bytes += frameSize(len(j.queue[n].body))
		n++
		if bytes >= j.s.cfg.MaxBatchBytes {
			break
		}
	}
	reqs := j.queue[:n:n]
	if n == len(j.queue) {
		j.queue = nil
	} else {
		j.queue = j.queue[n:]
	}
	return reqs, j.closing
}

// run is the flusher goroutine.
func (j *journal) run() {
	defer close(j.stopped)
	var tick <-chan time.Time
	if j.s.cfg.Sync == SyncInterval {
		t := time.NewTicker(j.s.cfg.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		reqs, closing := j.take()
		if len(reqs) > 0 {
			j.flush(reqs)
			continue
		}
		if closing {
			// A clean close leaves nothing unsynced, whatever the policy.
			if j.active != nil && j.synced < j.off && j.failed() == nil {
				if err := j.syncActive(); err != nil {
					j.final = err
				}
			}
			return
		}
		select {
		case <-j.wake:
		case <-tick:
			if j.active != nil && j.synced < j.off && j.failed() == nil {
				_ = j.syncActive()
			}
		}
	}
}

// flush is one group-commit round: frame every request, write once, sync
// once (per the policy), publish, acknowledge.
func (j *journal) flush(reqs []*request) {
	j.buf = j.buf[:0]
	j.bufOff = j.off
	j.needSync = j.s.cfg.Sync == SyncAlways
	err := j.failed()
	for _, r := range reqs {
		if err != nil {
			break
		}
		err = j.frame(r)
	}
	if err == nil {
		err = j.writeBuf()
	}
	if err == nil && j.s.cfg.Sync == SyncInterval && time.Since(j.lastSync) >= j.s.cfg.SyncInterval {
		j.needSync = true
	}
	if err == nil && j.needSync && j.synced < j.off {
		err = j.syncActive()
	}
	if err != nil {
		// The segments stay listed so that Close closes their files.
		j.publishSegments()
		for _, r := range reqs {
			if r.err == nil {
				r.err = err
			}
			close(r.done)
		}
		return
	}
	j.publish(reqs)
}

// publishSegments lists the segments started by this round.
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

// frame appends r's frame, if it needs one, to the round's buffer. It
// returns an error only when the journal failed; refusals (fencing, size)
// are set on r.
func (j *journal) frame(r *request) error {
	ch := r.ch
	switch r.kind {
	case reqAppend:
		if r.term < ch.w.term {
			r.err = &walimpls.FencedError{Channel: ch.name, Term: r.term, CurrentTerm: ch.w.term}
			return nil
		}
		seq, e, err := j.put(typeMessage, ch.w.id, r.body)
		if err != nil {
			return err
		}
		if e.size == 0 {
			// Only a message whose encoding (many tiny properties) is far
			// above its Size gets here.
			r.err = &walimpls.TooLargeError{Size: len(r.body), Limit: j.s.cfg.MaxMessageBytes}
			return nil
		}
		r.seq, r.entry = seq, e
		ch.w.lastSeq = seq
	case reqTerm:
		if r.term < ch.w.term {
			r.err = &walimpls.FencedError{Channel: ch.name, Term: r.term, CurrentTerm: ch.w.term}
			return nil
		}
		if ch.w.defined && r.term == ch.w.term {
			return nil // the same owner reopening: nothing to store
		}
		if !ch.w.defined {
			ch.w.id = j.nextChanID
			j.nextChanID++
			ch.w.defined = true
			j.defined = append(j.defined, ch)
		}
		ch.w.term = r.term
		if err := j.putMeta(typeTerm, ch.w.id, encodeTerm(r.term, ch.name)); err != nil {
			return err
		}
		r.wrote = true
		j.needSync = true
	case reqTruncate:
		if r.term < ch.w.term {
			r.err = &walimpls.FencedError{Channel: ch.name, Term: r.term, CurrentTerm: ch.w.term}
			return nil
		}
		if r.keep <= ch.w.keep {
			return nil
		}
		ch.w.keep = r.keep
		ch.w.lastRemoved = max(ch.w.lastRemoved, r.lastRemoved)
		if err := j.putMeta(typeTruncate, ch.w.id, encodeTruncate(ch.w.keep, ch.w.lastRemoved)); err != nil {
			return err
		}
		r.wrote = true
		j.needSync = true
	}
	return nil
}

// putMeta frames a term or truncate record. Such a record not fitting in an
// empty segment (a start frame listing a vast number of channels) fails the
// journal: the channels' journal view already moved ahead of the log.
func (j *journal) putMeta(typ frameType, chanID uint32, body []byte) error {
	_, e, err := j.put(typ, chanID, body)
	if err == nil && e.size == 0 {
		err = j.fail(errors.Newf("local: a %d-byte record does not fit in a %d-byte segment after its start frame", len(body), j.s.cfg.SegmentBytes))
	}
	return err
}

// put frames one record into the active segment, switching segments when it
// does not fit. A zero entry size with a nil error means the record does not
// fit even in an empty segment.
func (j *journal) put(typ frameType, chanID uint32, body []byte) (uint64, entry, error) {
	size := int64(frameSize(len(body)))
	if j.active == nil || j.off+size > j.s.cfg.SegmentBytes {
		if j.active != nil && j.fresh {
			return 0, entry{}, nil
		}
		if err := j.switchSegment(); err != nil {
			return 0, entry{}, err
		}
		if j.off+size > j.s.cfg.SegmentBytes {
			return 0, entry{}, nil
		}
	}
	seq := j.nextSeq
	j.nextSeq++
	off := j.off
	j.buf = appendFrame(j.buf, frameHeader{
		seq:    seq,
		seg:    uint32(j.active.num),
		synced: uint32(j.synced),
		chanID: chanID,
		typ:    typ,
	}, body)
	j.off += size
	j.fresh = false
	return seq, entry{seq: seq, seg: j.active.num, off: uint32(off), size: uint32(size)}, nil
}

func (j *journal) startBody(prevEnd int64, recycled bool) []byte {
	snaps := make([]chanSnapshot, len(j.defined))
	for i, ch := range j.defined {
		snaps[i] = chanSnapshot{
			id: ch.w.id, name: ch.name, term: ch.w.term,
			keep: ch.w.keep, lastRemoved: ch.w.lastRemoved, lastSeq: ch.w.lastSeq,
		}
	}
	return encodeSegmentStart(segmentStart{prevEnd: uint64(prevEnd), recycled: recycled, nextChanID: j.nextChanID, chans: snaps})
}

// switchSegment writes and syncs what the round has for the active segment,
// installs the spare as the next segment and frames its start record. The
// old segment is synced whatever the policy, so only the last segment can
// ever hold unsynced bytes.
func (j *journal) switchSegment() error {
	next, prevEnd := uint64(1), int64(0)
	if j.active != nil {
		prevEnd = j.off
		if err := j.writeBuf(); err != nil {
			return err
		}
		if j.synced < j.off {
			if err := j.syncActive(); err != nil {
				return err
			}
		}
		next = j.active.num + 1
	}
	inst := j.s.prep.install(next)
	if inst.err != nil {
		return j.fail(errors.Wrapf(inst.err, "local: start segment %d", next))
	}
	seg := &segment{num: next, f: inst.f, chans: map[*channel]uint64{}}
	j.newSegs = append(j.newSegs, seg)
	j.active = seg
	j.off, j.synced = 0, 0
	j.buf = j.buf[:0]
	j.bufOff = 0
	seq := j.nextSeq
	j.nextSeq++
	body := j.startBody(prevEnd, inst.recycled)
	j.buf = appendFrame(j.buf, frameHeader{seq: seq, seg: uint32(next), typ: typeSegmentStart}, body)
	j.off = int64(frameSize(len(body)))
	j.fresh = true
	// The new segment's start frame must be durable before anything in it
	// is acknowledged; the round's sync covers it with SyncAlways, and the
	// other policies accept losing an unsynced tail.
	return nil
}

// writeBuf writes the round's buffer to the active segment, followed by an
// end marker: an all-zero header where the next frame will go. The marker
// makes the end of the log explicit in a recycled segment, whose old frames
// would otherwise follow, and overwrites any frame left there by a torn
// write from before a recovery. The next write starts on the marker.
func (j *journal) writeBuf() error {
	if len(j.buf) == 0 {
		return nil
	}
	n := len(j.buf)
	if j.bufOff+int64(n)+headerSize <= j.s.cfg.SegmentBytes {
		var marker [headerSize]byte
		j.buf = append(j.buf, marker[:]...)
	}
	if _, err := j.active.f.WriteAt(j.buf, j.bufOff); err != nil {
		return j.fail(errors.Wrapf(err, "local: write segment %d at %d", j.active.num, j.bufOff))
	}
	j.bufOff += int64(n)
	j.buf = j.buf[:0]
	return nil
}

// syncActive fdatasyncs the active segment. A failure is sticky: the kernel
// may have dropped the pages it could not write, so a later successful sync
// would prove nothing.
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
	j.synced = j.off
	j.lastSync = time.Now()
	return nil
}

// publish makes a written round visible: index entries, terms, truncation
// points, new segments; then it wakes scanners and acknowledges waiters.
func (j *journal) publish(reqs []*request) {
	s := j.s
	j.publishSegments()
	var touched []*channel
	truncated := false
	records, bytes := 0, 0
	for _, r := range reqs {
		if r.err != nil {
			continue
		}
		ch := r.ch
		switch r.kind {
		case reqAppend:
			records++
			bytes += int(r.entry.size)
			ch.mu.Lock()
			ch.entries = append(ch.entries, r.entry)
			ch.lastSeq = r.seq
			ch.mu.Unlock()
			if len(touched) == 0 || touched[len(touched)-1] != ch {
				touched = append(touched, ch)
			}
		case reqTerm:
			ch.mu.Lock()
			ch.id = ch.w.id
			prev, fenced := ch.term, 0
			if r.term > ch.term {
				ch.term = r.term
				for w := range ch.writers {
					if w.info.Term < r.term {
						w.fence(r.term)
						fenced++
					}
				}
			}
			ch.mu.Unlock()
			if r.wrote {
				s.log.Info("channel term stored", "channel", ch.name, "term", r.term, "previous_term", prev, "fenced_writers", fenced)
			}
		case reqTruncate:
			if r.wrote {
				ch.publishTruncate(r.keep, r.lastRemoved)
				truncated = true
			}
		}
	}
	if records > 0 {
		s.segMu.Lock()
		for _, r := range reqs {
			if r.err == nil && r.kind == reqAppend {
				// The round wrote to the last segments only.
				for i := len(s.segments) - 1; i >= 0; i-- {
					if seg := s.segments[i]; seg.num == r.entry.seg {
						seg.chans[r.ch] = r.seq
						break
					}
				}
			}
		}
		s.segMu.Unlock()
		s.m.appends.Add(float64(records))
		s.m.appendBytes.Add(float64(bytes))
		s.m.batchRecords.Observe(float64(records))
	}
	for _, ch := range touched {
		ch.wake()
	}
	for _, r := range reqs {
		close(r.done)
	}
	if truncated {
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
