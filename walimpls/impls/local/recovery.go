package local

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/cockroachdb/errors"
)

// segScan is one segment file as recovery read it: its bytes, its start
// frame, and where its frames end.
type segScan struct {
	seg     *segment
	buf     []byte
	start   segmentStart
	startOK bool        // the file begins with a valid start frame
	startSt frameStatus // what is at offset 0 when !startOK
	off     int         // where the frames end
	st      frameStatus // what is at off
	// sealNext is the segment the seal frame that ends the frames names, 0
	// when they end without one.
	sealNext uint64
	// batchAt is the offset of the first frame of a batch that the frames
	// end inside of (its last frame carries flagMore), -1 when they end
	// after a whole batch; batchFrames counts its frames. Such frames are
	// not replayed: recovery keeps a batch whole or drops it whole.
	batchAt     int
	batchFrames int
}

// end is where the log of the segment ends: before a batch cut short, or
// where its frames end.
func (sc *segScan) end() int {
	if sc.batchAt >= 0 {
		return sc.batchAt
	}
	return sc.off
}

// atMarker reports whether the frames end where the journal left its end
// marker (or at the end of the file).
func (sc *segScan) atMarker() bool {
	return sc.st == frameZero || len(sc.buf)-sc.off < headerSize
}

// limit is the bytes the segment may fill.
func (sc *segScan) limit(cfg Config) int64 {
	if sc.start.segmentBytes != 0 {
		return sc.start.segmentBytes
	}
	return cfg.SegmentBytes
}

// replayer carries the state of one recovery across segments.
type replayer struct {
	s       *Store
	rs      *recovered
	byID    map[uint32]*channel
	lastSeq uint64
	report  RecoveryReport
	opened  []File // every segment file opened, closed if recovery fails
	// marked is set when the root has its journal marker: a segment of it
	// was durable once.
	marked bool
}

// recover replays the segments of the root, rebuilding the channels and the
// segment list, cuts a torn tail and completes an interrupted segment
// switch. The rules are in doc.go (Recovery).
func (s *Store) recover() (rs recovered, err error) {
	rs = recovered{nextSeq: 1, nextChanID: 1}
	r := &replayer{s: s, rs: &rs, byID: map[uint32]*channel{}}
	defer func() {
		if err != nil {
			for _, f := range r.opened {
				_ = f.Close() // a file closed already says so; ignored
			}
			s.segments = nil
		}
	}()
	names, err := s.fs.ReadDir(s.cfg.Dir)
	if err != nil {
		return rs, errors.Wrapf(err, "local: list %s", s.cfg.Dir)
	}
	var (
		nums      []uint64
		leftovers []string
	)
	for _, name := range names {
		switch {
		case isSpareName(name), name == markerTempName:
			leftovers = append(leftovers, name)
		case name == markerName:
			r.marked = true
		default:
			if n, ok := parseSegmentName(name); ok {
				nums = append(nums, n)
			}
		}
	}
	if r.marked {
		if err := s.checkMarker(); err != nil {
			return rs, err
		}
		if len(nums) == 0 {
			return rs, errors.Wrapf(ErrCorrupt, "local: %s holds the journal marker %s but no segment file: the segment files were deleted, "+
				"and with them every channel's messages, terms and truncation points; restore the directory from a backup, "+
				"or remove %s to open it as a new, empty store", s.cfg.Dir, markerName, s.path(markerName))
		}
	}
	for _, name := range leftovers {
		// Spares are only ever prepared ahead, new ones are made; a
		// marker being written was not renamed into place.
		if err := s.fs.Remove(s.path(name)); err != nil {
			return rs, errors.Wrapf(err, "local: remove leftover %s", name)
		}
	}
	slices.Sort(nums)
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			return rs, errors.Wrapf(ErrCorrupt, "local: segment file %s is missing (found segments %d and %d)",
				s.path(segmentName(nums[i-1]+1)), nums[i-1], nums[i])
		}
	}
	r.report.Segments = len(nums)
	var (
		bufs  [2][]byte // the previous segment's bytes stay readable
		prev  *segScan
		first *segScan // the oldest segment, once its start frame is valid
	)
	for i, num := range nums {
		last := i == len(nums)-1
		cur, err := r.scan(num, &bufs[i%2], i == 0)
		if err != nil {
			return rs, err
		}
		if !cur.startOK {
			if !last {
				return rs, errors.Wrapf(ErrCorrupt, "local: segment %d has no valid start frame (%s)", num, cur.startSt)
			}
			if err := r.tornSwitch(prev, cur); err != nil {
				return rs, err
			}
			break
		}
		if i == 0 {
			first = cur
		}
		if prev != nil {
			if err := r.endMiddle(prev, cur); err != nil {
				return rs, err
			}
		}
		if last {
			if err := r.endLast(cur); err != nil {
				return rs, err
			}
		}
		prev = cur
	}
	if err := r.checkOldest(first); err != nil {
		return rs, err
	}
	if !r.marked && rs.active != nil {
		// Segments and no marker: a root of an earlier version, or a
		// process that died between its first sync and the marker. The
		// last segment is synced by now.
		if err := s.writeMarker(); err != nil {
			return rs, err
		}
		r.marked = true
	}
	rs.marked = r.marked
	rs.nextSeq = r.lastSeq + 1
	// Deleted channels hold no segment back (publish does the same).
	for _, seg := range s.segments {
		for ch := range seg.chans {
			if ch.deleted.Load() {
				delete(seg.chans, ch)
			}
		}
	}
	for _, ch := range s.channels {
		i := 0
		for i < len(ch.entries) && ch.entries[i].seq < ch.keep.Load() {
			i++
		}
		ch.entries = slices.Clip(ch.entries[i:])
	}
	s.recovery = r.report
	s.log.Info("recovered", "segments", r.report.Segments, "records", r.report.Records, "channels", len(s.channels), "next_seq", rs.nextSeq)
	return rs, nil
}

// scan opens and reads segment num into *buf and replays its frames, when
// it starts with a valid start frame (the oldest segment's start frame
// defines the channels). Corruption inside the frames is an error; what
// ends them is for the caller to judge.
func (r *replayer) scan(num uint64, buf *[]byte, oldest bool) (*segScan, error) {
	s := r.s
	// Read-write: a segment may be recycled as the spare later.
	f, err := s.fs.OpenFile(s.path(segmentName(num)), os.O_RDWR, 0)
	if err != nil {
		return nil, errors.Wrapf(err, "local: open segment %d", num)
	}
	r.opened = append(r.opened, f)
	size, err := f.Size()
	if err != nil {
		return nil, errors.Wrapf(err, "local: size of segment %d", num)
	}
	// A segment written before a change of SegmentBytes may end a seal
	// past its size.
	if size > maxSegmentBytes+sealReserve {
		return nil, errors.Wrapf(ErrCorrupt, "local: segment %d has %d bytes, more than %d", num, size, maxSegmentBytes)
	}
	if int64(cap(*buf)) < size {
		*buf = make([]byte, size)
	}
	b := (*buf)[:size]
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, errors.Wrapf(err, "local: read segment %d", num)
	}
	sc := &segScan{seg: &segment{num: num, f: f, chans: map[*channel]uint64{}}, buf: b, batchAt: -1}

	// The start frame: without it the segment is a torn switch (last)
	// or corruption (any other).
	h, body, sz, st := decodeFrame(b, uint32(num))
	if st == frameOK && h.typ == typeSegmentStart {
		sc.start, err = decodeSegmentStart(body)
	}
	if st != frameOK || h.typ != typeSegmentStart || err != nil || (r.lastSeq != 0 && h.seq <= r.lastSeq) {
		sc.startSt = st
		if st == frameOK {
			sc.startSt = frameBad
		}
		return sc, nil
	}
	sc.startOK = true
	if oldest {
		// Its snapshot defines the channels.
		r.rs.nextChanID = sc.start.nextChanID
		for _, c := range sc.start.chans {
			ch := newChannel(c.name)
			ch.id, ch.term, ch.lastSeq = c.id, c.term, c.lastSeq
			ch.keep.Store(c.keep)
			ch.lastRemoved.Store(c.lastRemoved)
			ch.w.defined, ch.w.id, ch.w.term = true, c.id, c.term
			ch.w.keep, ch.w.lastRemoved, ch.w.lastSeq = c.keep, c.lastRemoved, c.lastSeq
			r.byID[c.id] = ch
			s.channels[c.name] = ch
			r.rs.live.add(ch)
		}
	}
	r.lastSeq = h.seq
	r.report.Records++
	off := sz
	// The frames of a batch are replayed once its last frame is read.
	type batchFrame struct {
		h         frameHeader
		body      []byte
		off, size int
	}
	var batch []batchFrame
	seen := r.lastSeq
	for {
		h, body, sz, st = decodeFrame(b[off:], uint32(num))
		if st != frameOK {
			break
		}
		if sc.sealNext != 0 {
			return nil, errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: a frame after the seal", num, off)
		}
		if h.seq <= seen {
			return nil, errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: seq %d after %d", num, off, h.seq, seen)
		}
		seen = h.seq
		if len(batch) > 0 && (!isMessage(h.typ) || h.chanID != batch[0].h.chanID || h.seq != batch[len(batch)-1].h.seq+1) {
			// A batch is framed at once, in one piece of one segment.
			return nil, errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: a frame of type %d, channel %d, seq %d inside a batch of channel %d",
				num, off, h.typ, h.chanID, h.seq, batch[0].h.chanID)
		}
		if h.flags&flagMore != 0 || len(batch) > 0 {
			batch = append(batch, batchFrame{h: h, body: body, off: off, size: sz})
			off += sz
			if h.flags&flagMore != 0 {
				continue
			}
			for _, f := range batch {
				if err := s.apply(sc.seg, r.byID, r.rs, f.h, f.body, uint32(f.off), uint32(f.size)); err != nil {
					return nil, errors.Wrapf(err, "local: segment %d offset %d", num, f.off)
				}
			}
			r.lastSeq = h.seq
			r.report.Records += len(batch)
			batch = batch[:0]
			continue
		}
		if h.typ == typeSeal {
			next, err := decodeSeal(body)
			if err != nil || next != num+1 || h.chanID != 0 {
				return nil, errors.WithStack(fmt.Errorf("local: segment %d offset %d: seal naming segment %d (%w): %w", num, off, next, err, ErrCorrupt))
			}
			sc.sealNext = next
		} else if err := s.apply(sc.seg, r.byID, r.rs, h, body, uint32(off), uint32(sz)); err != nil {
			return nil, errors.Wrapf(err, "local: segment %d offset %d", num, off)
		}
		r.lastSeq = h.seq
		r.report.Records++
		off += sz
	}
	sc.off, sc.st = off, st
	if len(batch) > 0 {
		sc.batchAt, sc.batchFrames = batch[0].off, len(batch)
	}
	return sc, nil
}

// endMiddle checks how a segment that is not the last ended, against the
// start frame of the segment after it, and lists it.
func (r *replayer) endMiddle(prev, next *segScan) error {
	num := prev.seg.num
	if prev.batchAt >= 0 {
		// Batches never straddle segments, and the journal synced this
		// segment whole before moving on.
		return errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: a batch cut short by %s in the middle of the log", num, prev.batchAt, prev.st)
	}
	if next.start.prevEnd != uint64(prev.off) {
		return errors.Wrapf(ErrCorrupt, "local: segment %d ends at %d, but segment %d says it ended at %d", num, prev.off, next.seg.num, next.start.prevEnd)
	}
	// The journal synced this segment whole before moving on, ending it
	// with its seal and an end marker (no seal before seals existed).
	if !prev.atMarker() {
		return errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: %s in the middle of the log", num, prev.off, prev.st)
	}
	r.s.segments = append(r.s.segments, prev.seg)
	return nil
}

// endLast handles the tail of the last segment, which has a valid start
// frame, and makes it the active one.
func (r *replayer) endLast(sc *segScan) error {
	s := r.s
	num := sc.seg.num
	if sc.sealNext != 0 {
		// The journal seals only once the next segment's name is durable,
		// and never deletes the last segment.
		return errors.Wrapf(ErrCorrupt, "local: segment %d ends with a seal naming segment %d, but %s is missing: the newest segment file was deleted",
			num, sc.sealNext, s.path(segmentName(sc.sealNext)))
	}
	clean := sc.atMarker() && sc.batchAt < 0
	if clean {
		valid, _, _ := scanPast(sc.buf, sc.off, uint32(num))
		// In a zero-filled file everything past the marker is zero; in
		// a recycled one it is the older segment's content, and only
		// frames of this segment would mean more was written.
		clean = valid == 0 && (sc.start.recycled || allZero(sc.buf[sc.off:]))
	}
	if !clean {
		if err := s.cutTail(sc.seg, sc.buf, sc.end(), sc.off, sc.st, sc.start.recycled, &r.report, false); err != nil {
			return err
		}
	}
	s.segments = append(s.segments, sc.seg)
	// Whatever survived the crash may sit in the page cache only: sync it
	// so that the journal's synced offset is honest.
	if err := sc.seg.f.Sync(); err != nil {
		return errors.Wrapf(err, "local: sync segment %d", num)
	}
	r.activate(sc.seg, int64(sc.end()), sc.limit(s.cfg), sc.start.segmentBytes)
	return nil
}

// activate makes seg the segment the journal goes on in, at off. recorded
// is the size the segment's start frame gave (0 if none).
func (r *replayer) activate(seg *segment, off, limit, recorded int64) {
	r.rs.active, r.rs.off, r.rs.limit = seg, off, limit
	if recorded != 0 && recorded != r.s.cfg.SegmentBytes {
		r.s.log.Info("segment size changed: the segments written keep their size, the next ones take the new one",
			"segment", seg.num, "previous_segment_bytes", recorded, "segment_bytes", r.s.cfg.SegmentBytes)
	}
}

// tornSwitch handles a last segment cur without a valid start frame: a
// crash during a segment switch. When prev ends with a seal naming cur the
// crash came after the seal: the switch is completed. Otherwise the seal
// never became durable: cur is removed and prev is the last segment. A
// lone cur (no prev) is removed only in a root without a marker.
func (r *replayer) tornSwitch(prev, cur *segScan) error {
	s := r.s
	if prev == nil && r.marked {
		// The marker was written once a start frame was durable, and a
		// segment is installed only while the one before it exists.
		return errors.Wrapf(ErrCorrupt, "local: segment %d, the only segment file, has no valid start frame (%s), but the journal marker %s "+
			"says one was durable: the start frame was damaged, or the segment files before %s were deleted; restore the directory "+
			"from a backup, or remove both files to open it as a new, empty store",
			cur.seg.num, cur.startSt, s.path(markerName), s.path(segmentName(cur.seg.num)))
	}
	// The file may be recycled: only frames of this segment count.
	if prev == nil || prev.sealNext != cur.seg.num {
		if err := s.cutTail(cur.seg, cur.buf, 0, 0, cur.startSt, true, &r.report, true); err != nil {
			return err
		}
		s.log.Info("recovery removed a segment whose switch did not complete", "segment", cur.seg.num)
		r.report.Segments--
		if prev == nil {
			return nil // an empty store
		}
		// The journal synced prev before it renamed cur into place.
		return r.endLast(prev)
	}
	// Nothing may follow the seal but its end marker: cut whatever a torn
	// write left after it, so that prev ends like any middle segment.
	if !prev.atMarker() {
		if err := s.cutTail(prev.seg, prev.buf, prev.off, prev.off, prev.st, prev.start.recycled, &r.report, false); err != nil {
			return err
		}
	}
	s.segments = append(s.segments, prev.seg)
	// Complete the switch: cur's start frame, a snapshot of the replayed
	// state, as the journal would have written it. The file is cut to
	// nothing first (after the check that what it held is a torn write, not
	// synced frames damaged later), so that no frame of cur's torn round is
	// left after the new start frame to be taken for the continuation of
	// the log after a later crash. The file may be recycled.
	num := cur.seg.num
	if err := s.cutTail(cur.seg, cur.buf, 0, 0, cur.startSt, true, &r.report, false); err != nil {
		return err
	}
	st := segmentStart{prevEnd: uint64(prev.off), segmentBytes: s.cfg.SegmentBytes, nextChanID: r.rs.nextChanID, chans: r.rs.live.snapshots()}
	r.lastSeq++
	fr := appendFrame(nil, frameHeader{seq: r.lastSeq, seg: uint32(num), typ: typeSegmentStart}, encodeSegmentStart(st))
	size := len(fr)
	fr = append(fr, make([]byte, headerSize)...) // the end marker
	f := cur.seg.f
	if _, err := f.WriteAt(fr, 0); err != nil {
		return errors.Wrapf(err, "local: write the start frame of segment %d", num)
	}
	if err := f.Sync(); err != nil {
		return errors.Wrapf(err, "local: sync segment %d", num)
	}
	s.segments = append(s.segments, cur.seg)
	r.report.Records++
	s.log.Info("recovery completed an interrupted segment switch", "segment", num)
	r.activate(cur.seg, int64(size), s.cfg.SegmentBytes, prev.start.segmentBytes)
	return nil
}

// checkOldest checks that the oldest segment holds every message the
// channels keep: its start frame says each channel's last message before
// it, and the journal deletes a segment only once every channel has
// truncated past its messages.
func (r *replayer) checkOldest(first *segScan) error {
	if first == nil {
		return nil
	}
	for _, c := range first.start.chans {
		ch := r.byID[c.id]
		if c.lastSeq == 0 || ch == nil {
			continue
		}
		if keep := ch.keep.Load(); keep <= c.lastSeq {
			return errors.Wrapf(ErrCorrupt, "local: channel %q keeps messages from seq %d on, but its messages up to %d were in segments before %d, and %s is missing: the oldest segment files were deleted",
				ch.name, keep, c.lastSeq, first.seg.num, r.s.path(segmentName(first.seg.num-1)))
		}
	}
	return nil
}

// apply replays one frame into the channels' state.
func (s *Store) apply(seg *segment, byID map[uint32]*channel, rs *recovered, h frameHeader, body []byte, off, size uint32) error {
	switch h.typ {
	case typeMessage, typeMessageV1:
		ch, ok := byID[h.chanID]
		if !ok {
			return errors.Wrapf(ErrCorrupt, "message of undefined channel %d", h.chanID)
		}
		ch.entries = append(ch.entries, entry{seq: h.seq, seg: seg.num, off: off, size: size})
		ch.lastSeq, ch.w.lastSeq = h.seq, h.seq
		seg.chans[ch] = h.seq
	case typeTerm:
		term, name, err := decodeTerm(body)
		if err != nil {
			return errors.WithStack(fmt.Errorf("%w: %w", err, ErrCorrupt))
		}
		ch, ok := byID[h.chanID]
		if !ok {
			if h.chanID == 0 || h.chanID < rs.nextChanID {
				return errors.Wrapf(ErrCorrupt, "term record defines channel id %d again", h.chanID)
			}
			if _, dup := s.channels[name]; dup {
				return errors.Wrapf(ErrCorrupt, "channel %q defined twice", name)
			}
			ch = newChannel(name)
			ch.id, ch.w.id, ch.w.defined = h.chanID, h.chanID, true
			byID[h.chanID] = ch
			s.channels[name] = ch
			rs.live.add(ch)
			rs.nextChanID = max(rs.nextChanID, h.chanID+1)
		}
		if term > ch.term {
			ch.term, ch.w.term = term, term
		}
	case typeTruncate:
		keep, lastRemoved, err := decodeTruncate(body)
		if err != nil {
			return errors.WithStack(fmt.Errorf("%w: %w", err, ErrCorrupt))
		}
		ch, ok := byID[h.chanID]
		if !ok {
			return errors.Wrapf(ErrCorrupt, "truncate of undefined channel %d", h.chanID)
		}
		if keep > ch.keep.Load() {
			ch.keep.Store(keep)
			ch.w.keep = keep
		}
		if lastRemoved > ch.lastRemoved.Load() {
			ch.lastRemoved.Store(lastRemoved)
			ch.w.lastRemoved = lastRemoved
		}
	case typeDelete:
		name, err := decodeDelete(body)
		if err != nil {
			return errors.WithStack(fmt.Errorf("%w: %w", err, ErrCorrupt))
		}
		ch, ok := byID[h.chanID]
		if !ok {
			return errors.Wrapf(ErrCorrupt, "delete of undefined channel %d", h.chanID)
		}
		if ch.name != name {
			return errors.Wrapf(ErrCorrupt, "delete of channel %d names %q, but the id was defined as %q", h.chanID, name, ch.name)
		}
		// The id ends here: its later frames are corruption, and the name
		// may be defined again under a new id.
		delete(byID, h.chanID)
		delete(s.channels, name)
		rs.live.remove(ch)
		ch.w.deleted = true
		ch.deleted.Store(true)
		ch.entries = nil
	case typeSegmentStart:
		return errors.Wrap(ErrCorrupt, "segment start frame inside a segment")
	}
	return nil
}

// cutTail cuts the last segment at cut after checking that the damage is
// a torn write and not corruption of synced bytes: no valid frame of this
// segment further on may claim that cut had been synced. off is where the
// segment's frames end and st what is there; cut is off, or the start of
// the batch the frames end inside of (never acknowledged: the journal
// writes a batch at once and syncs it whole). whole removes the segment
// file (its start frame is what was torn). In a recycled file the older
// segment's frames are not counted as dropped.
func (s *Store) cutTail(seg *segment, buf []byte, cut, off int, st frameStatus, recycled bool, report *RecoveryReport, whole bool) error {
	reason := st.String()
	if cut < off {
		reason = "batch cut short by " + reason
	}
	valid, synced, firstStale := scanPast(buf, cut, uint32(seg.num))
	if synced {
		return errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: %s before frames written after it was synced", seg.num, cut, reason)
	}
	limit := len(buf)
	switch {
	case st == frameStale:
		limit = off // older content from here on: nothing of ours
	case recycled || whole:
		limit = firstStale
	}
	end := limit
	for end > cut && buf[end-1] == 0 {
		end--
	}
	dropped := int64(end - cut)
	// scanPast counted the valid frames after cut (the rest of a batch cut
	// short among them); add the one at cut, and the torn one at off.
	frames := valid
	if dropped > 0 && !allZero(buf[cut:min(cut+headerSize, end)]) {
		frames++
	}
	if cut < off && off < end && (st == frameBad || st == frameShort) {
		frames++
	}
	if whole {
		_ = seg.f.Close()
		if err := s.fs.Remove(s.path(segmentName(seg.num))); err != nil {
			return errors.Wrapf(err, "local: remove torn segment %d", seg.num)
		}
		if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
			return errors.Wrapf(err, "local: sync %s", s.cfg.Dir)
		}
	} else {
		// Cut the file rather than overwrite in place: a valid frame left
		// beyond the cut could otherwise be read as part of the log after
		// the next crash.
		if err := seg.f.Truncate(int64(cut)); err != nil {
			return errors.Wrapf(err, "local: truncate segment %d at %d", seg.num, cut)
		}
		if err := seg.f.Sync(); err != nil {
			return errors.Wrapf(err, "local: sync segment %d", seg.num)
		}
	}
	if dropped > 0 {
		report.DroppedBytes += dropped
		report.DroppedFrames += frames
		report.Segment, report.Offset, report.Reason = seg.num, int64(cut), reason
		s.m.droppedBytes.Add(float64(dropped))
		s.m.droppedFrames.Add(float64(frames))
		s.log.Warn("recovery cut a torn tail", "segment", seg.num, "offset", cut, "found", reason,
			"dropped_bytes", dropped, "dropped_frames", frames, "whole_segment", whole)
	}
	return nil
}

// scanPast looks for valid frames of segment seg after a damaged offset: it
// counts them, reports whether any of them was written after off had been
// synced, and returns the offset of the first frame of an older segment
// (recycled content; len(buf) if none).
func scanPast(buf []byte, off int, seg uint32) (valid int, synced bool, firstStale int) {
	firstStale = len(buf)
	for p := off + frameAlign; p+headerSize <= len(buf); p += frameAlign {
		// Cheap filters before the CRC: the type and reserved bytes, and a
		// segment number that is this one or an older one.
		if !validTypeAndFlags(buf[p+28], buf[p+29]) || buf[p+30]|buf[p+31] != 0 {
			continue
		}
		fseg := binary.LittleEndian.Uint32(buf[p+16:])
		if fseg > seg || fseg == 0 || (fseg != seg && firstStale != len(buf)) {
			continue
		}
		h, _, sz, st := decodeFrame(buf[p:], fseg)
		if st != frameOK {
			continue
		}
		if fseg != seg {
			firstStale = p
			continue
		}
		valid++
		if int(h.synced) > off {
			synced = true
		}
		p += sz - frameAlign
	}
	return valid, synced, firstStale
}
