package local

import (
	"github.com/cockroachdb/errors"
)

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
	if j.unsynced() {
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
	if j.unsynced() {
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
