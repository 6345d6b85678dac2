package local

import (
	"encoding/binary"
	"io"
	"os"
	"slices"

	"github.com/cockroachdb/errors"
)

// recover replays the segments of the root, rebuilding the channels and the
// segment list, and cuts a torn tail. The rules are in doc.go (Recovery).
func (s *Store) recover() (recovered, error) {
	rs := recovered{nextSeq: 1, nextChanID: 1}
	names, err := s.fs.ReadDir(s.cfg.Dir)
	if err != nil {
		return rs, errors.Wrapf(err, "local: list %s", s.cfg.Dir)
	}
	var nums []uint64
	for _, name := range names {
		if isSpareName(name) {
			// Spares are only ever prepared ahead; new ones are made.
			if err := s.fs.Remove(s.path(name)); err != nil {
				return rs, errors.Wrap(err, "local: remove leftover spare segment")
			}
			continue
		}
		if n, ok := parseSegmentName(name); ok {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			return rs, errors.Wrapf(ErrCorrupt, "local: segment %d is missing (found %d and %d)", nums[i-1]+1, nums[i-1], nums[i])
		}
	}
	byID := map[uint32]*channel{}
	var (
		buf     []byte
		lastSeq uint64
		prevEnd int64 // where the frames of the previous segment end
		report  = RecoveryReport{Segments: len(nums)}
	)
	for i, num := range nums {
		last := i == len(nums)-1
		// Read-write: a segment may be recycled as the spare later.
		f, err := s.fs.OpenFile(s.path(segmentName(num)), os.O_RDWR, 0)
		if err != nil {
			return rs, errors.Wrapf(err, "local: open segment %d", num)
		}
		seg := &segment{num: num, f: f, chans: map[*channel]uint64{}}
		fail := func(err error) (recovered, error) {
			_ = f.Close()
			return rs, err
		}
		size, err := f.Size()
		if err != nil {
			return fail(errors.Wrapf(err, "local: size of segment %d", num))
		}
		if size > maxSegmentBytes {
			return fail(errors.Wrapf(ErrCorrupt, "local: segment %d has %d bytes, more than %d", num, size, maxSegmentBytes))
		}
		if int64(cap(buf)) < size {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		if n, err := f.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
			return fail(errors.Wrapf(err, "local: read segment %d", num))
		}

		// The start frame: without it the segment is a torn switch (last)
		// or corruption (any other).
		h, body, sz, st := decodeFrame(buf, uint32(num))
		var start segmentStart
		if st == frameOK && h.typ == typeSegmentStart {
			start, err = decodeSegmentStart(body)
		}
		if st != frameOK || h.typ != typeSegmentStart || err != nil || (lastSeq != 0 && h.seq <= lastSeq) {
			if !last {
				return fail(errors.Wrapf(ErrCorrupt, "local: segment %d has no valid start frame (%s)", num, st))
			}
			// The file may be recycled: only frames of this segment count.
			if err := s.cutTail(seg, buf, 0, st, true, &report, true); err != nil {
				return rs, err
			}
			report.Segments--
			break
		}
		if i > 0 && start.prevEnd != uint64(prevEnd) {
			return fail(errors.Wrapf(ErrCorrupt, "local: segment %d ends at %d, but segment %d says it ended at %d", nums[i-1], prevEnd, num, start.prevEnd))
		}
		if i == 0 {
			rs.nextChanID = start.nextChanID
			for _, c := range start.chans {
				ch := newChannel(c.name)
				ch.id, ch.term, ch.lastSeq = c.id, c.term, c.lastSeq
				ch.keep.Store(c.keep)
				ch.lastRemoved.Store(c.lastRemoved)
				ch.w.defined, ch.w.id, ch.w.term = true, c.id, c.term
				ch.w.keep, ch.w.lastRemoved, ch.w.lastSeq = c.keep, c.lastRemoved, c.lastSeq
				byID[c.id] = ch
				s.channels[c.name] = ch
				rs.defined = append(rs.defined, ch)
			}
		}
		lastSeq = h.seq
		report.Records++
		off := sz
		for {
			h, body, sz, st = decodeFrame(buf[off:], uint32(num))
			if st != frameOK {
				break
			}
			if h.seq <= lastSeq {
				return fail(errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: seq %d after %d", num, off, h.seq, lastSeq))
			}
			if err := s.apply(seg, byID, &rs, h, body, uint32(off), uint32(sz)); err != nil {
				return fail(errors.Wrapf(err, "local: segment %d offset %d", num, off))
			}
			lastSeq = h.seq
			report.Records++
			off += sz
		}
		// The frames end at off. The journal wrote an end marker (a zero
		// header) there, unless the segment had no room left for one.
		atMarker := st == frameZero || len(buf)-off < headerSize
		if !last {
			// The journal synced this segment whole before moving on, and
			// the next start frame says where it ended (checked above on
			// the next round).
			if !atMarker {
				return fail(errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: %s in the middle of the log", num, off, st))
			}
			prevEnd = int64(off)
			s.segments = append(s.segments, seg)
			continue
		}
		clean := atMarker
		if clean {
			valid, _, _ := scanPast(buf, off, uint32(num))
			// In a zero-filled file everything past the marker is zero; in
			// a recycled one it is the older segment's content, and only
			// frames of this segment would mean more was written.
			clean = valid == 0 && (start.recycled || allZero(buf[off:]))
		}
		if !clean {
			if err := s.cutTail(seg, buf, off, st, start.recycled, &report, false); err != nil {
				return rs, err
			}
		}
		s.segments = append(s.segments, seg)
		// Whatever survived the crash may sit in the page cache only:
		// sync it so that the journal's synced offset is honest.
		if err := f.Sync(); err != nil {
			return rs, errors.Wrapf(err, "local: sync segment %d", num)
		}
		rs.active, rs.off = seg, int64(off)
	}
	if len(s.segments) > 0 && rs.active == nil {
		// The last segment was a torn switch and is gone: go on writing in
		// the previous one, which was synced before the switch.
		rs.active = s.segments[len(s.segments)-1]
		rs.off = prevEnd
	}
	rs.nextSeq = lastSeq + 1
	for _, ch := range s.channels {
		i := 0
		for i < len(ch.entries) && ch.entries[i].seq < ch.keep.Load() {
			i++
		}
		ch.entries = slices.Clip(ch.entries[i:])
	}
	s.recovery = report
	s.log.Info("recovered", "segments", report.Segments, "records", report.Records, "channels", len(s.channels), "next_seq", rs.nextSeq)
	return rs, nil
}

// apply replays one frame into the channels' state.
func (s *Store) apply(seg *segment, byID map[uint32]*channel, rs *recovered, h frameHeader, body []byte, off, size uint32) error {
	switch h.typ {
	case typeMessage:
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
			return errors.Wrapf(ErrCorrupt, "%v", err)
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
			rs.defined = append(rs.defined, ch)
			rs.nextChanID = max(rs.nextChanID, h.chanID+1)
		}
		if term > ch.term {
			ch.term, ch.w.term = term, term
		}
	case typeTruncate:
		keep, lastRemoved, err := decodeTruncate(body)
		if err != nil {
			return errors.Wrapf(ErrCorrupt, "%v", err)
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
	case typeSegmentStart:
		return errors.Wrap(ErrCorrupt, "segment start frame inside a segment")
	}
	return nil
}

// cutTail cuts the last segment at off after checking that the damage
// there is a torn write and not corruption of synced bytes: no valid frame
// of this segment further on may claim that off had been synced. whole
// removes the segment file (its start frame is what was torn). In a
// recycled file the older segment's frames are not counted as dropped.
func (s *Store) cutTail(seg *segment, buf []byte, off int, st frameStatus, recycled bool, report *RecoveryReport, whole bool) error {
	valid, synced, firstStale := scanPast(buf, off, uint32(seg.num))
	if synced {
		_ = seg.f.Close()
		return errors.Wrapf(ErrCorrupt, "local: segment %d offset %d: %s before frames written after it was synced", seg.num, off, st)
	}
	limit := len(buf)
	switch {
	case st == frameStale:
		limit = off // older content from here on: nothing of ours
	case recycled || whole:
		limit = firstStale
	}
	end := limit
	for end > off && buf[end-1] == 0 {
		end--
	}
	dropped := int64(end - off)
	frames := valid
	if dropped > 0 && !allZero(buf[off:min(off+headerSize, end)]) {
		frames++ // the torn frame itself
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
		if err := seg.f.Truncate(int64(off)); err != nil {
			_ = seg.f.Close()
			return errors.Wrapf(err, "local: truncate segment %d at %d", seg.num, off)
		}
		if err := seg.f.Sync(); err != nil {
			_ = seg.f.Close()
			return errors.Wrapf(err, "local: sync segment %d", seg.num)
		}
	}
	if dropped > 0 {
		report.DroppedBytes += dropped
		report.DroppedFrames += frames
		report.Segment, report.Offset, report.Reason = seg.num, int64(off), st.String()
		s.m.droppedBytes.Add(float64(dropped))
		s.m.droppedFrames.Add(float64(frames))
		s.log.Warn("recovery cut a torn tail", "segment", seg.num, "offset", off, "found", st.String(),
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
		if buf[p+28] < byte(typeSegmentStart) || buf[p+28] > byte(typeTruncate) || buf[p+29]|buf[p+30]|buf[p+31] != 0 {
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
