package local

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/errors"
)

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
