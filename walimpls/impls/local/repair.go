package local

import (
	"encoding/binary"

	"github.com/cockroachdb/errors"
)

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
