package local

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
