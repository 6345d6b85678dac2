package local

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

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
// keeps the batch whole or drops it whole (format.go, Batches). A batch that
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
