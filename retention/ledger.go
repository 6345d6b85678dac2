package retention

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
)

// A block is closed at a segment's border, at its bounds' messages or
// bytes, or when it would span more than the age cap allows for
// (Policy.MaxAge / agePrecision).
const (
	agePrecision = 64
	// maxBlocks bounds the blocks a ledger keeps: past it, neighbours in
	// its older half merge, so that its older figures grow coarser
	// instead of its memory, while the newest blocks, where consumers
	// truncate, stay fine.
	maxBlocks = 512
)

// blockBounds are how many messages and bytes a block holds at most.
type blockBounds struct {
	messages int64
	bytes    int64
}

// defaultBlocks are the bounds of a ledger's blocks.
var defaultBlocks = blockBounds{messages: 256, bytes: 64 << 10}

// block is a run of data messages of one segment, in log order.
type block struct {
	segment         uint64
	first, last     message.ID // positions of its first and last messages
	firstTT, lastTT uint64     // the first message's timetick; the highest
	messages, bytes int64
}

// written is what the ledger knows of one vchannel's messages ("" for
// messages without a vchannel).
type written struct {
	first, last message.ID // the first retained (or a point before which none is) and the last
	firstTT     uint64
	lastTT      uint64 // the highest timetick among them
}

// ledger is what a retainer read of one channel's log, from the oldest
// message it retained when the reading began up to at. Owned by the
// channel's round.
type ledger struct {
	// at is how far the log was read: the tail a read reached, or the
	// checkpoint of the last message a read that did not reach it noted
	// (the next read goes on from there). tail is the last tail a read
	// reached (zero before): the rule decides on what lies up to it, and
	// only when at is tail (complete).
	at, tail cursor.Checkpoint
	complete bool
	// from is where the first read starts when set (at zero): the
	// channel's floor, before which its log is truncated or about to be
	// (a truncation into a later segment of a chain that a crash
	// interrupted leaves segments whose data is gone, which a read from
	// the oldest would meet); zero: from the oldest retained message.
	from      message.ID
	blocks    []block
	vchannels map[string]*written
	span      time.Duration // how long a block may span; 0: any
	bounds    blockBounds
}

func newLedger(policy Policy, bounds blockBounds) *ledger {
	l := &ledger{vchannels: map[string]*written{}, bounds: bounds}
	if policy.MaxAge > 0 {
		l.span = policy.MaxAge / agePrecision
	}
	return l
}

// caughtUp reports whether the ledger knows the log up to a tail.
func (l *ledger) caughtUp() bool { return !l.tail.IsZero() && l.complete }

// advance reads w from where the ledger stands up to tail. A read that
// fails keeps what it noted: the next goes on after it.
func (l *ledger) advance(ctx context.Context, w adaptor.WAL, tail cursor.Checkpoint) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := cursor.After(l.at)
	if l.at.IsZero() && !l.from.IsZero() {
		start = cursor.StartFrom(l.from)
	}
	s, err := w.ReadBatches(ctx, adaptor.ReadOption{
		Name:          "retention",
		DeliverPolicy: start,
		Filter:        adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTimeTick}},
	})
	if err != nil {
		return errors.Wrapf(err, "retention: read after %s", l.at)
	}
	defer func() { _ = s.Close() }()
	for {
		select {
		case batch, ok := <-s.Batches():
			if !ok {
				<-s.Done()
				err := s.Error()
				if err == nil {
					err = errors.New("the scanner ended")
				}
				return errors.Wrapf(err, "retention: read after %s up to the tail %s", l.at, tail)
			}
			for _, m := range batch {
				if adaptor.CaughtUp(m, tail) {
					l.at, l.tail, l.complete = tail, tail, true
					return nil
				}
				if l.note(m, tail) {
					if cp, err := cursor.CheckpointOf(m); err == nil {
						l.at, l.complete = cp, false
					}
				}
			}
		case <-ctx.Done():
			return errors.Wrapf(ctx.Err(), "retention: read after %s up to the tail %s", l.at, tail)
		}
	}
}

// note records a data message read at or below the tail, and reports
// whether it did.
func (l *ledger) note(m message.Immutable, tail cursor.Checkpoint) bool {
	tt, ok := m.TimeTick()
	if m.Kind() != message.KindData || !ok || tt > tail.TimeTick {
		return false
	}
	id := m.ID()
	seg, _, _ := cursor.SplitID(id) // 0 for a backend's own ID: a channel without a chain
	size := int64(m.Size())
	if n := len(l.blocks); n == 0 || !l.fits(&l.blocks[n-1], seg, tt, size) {
		l.blocks = append(l.blocks, block{segment: seg, first: id, firstTT: tt})
		if len(l.blocks) > maxBlocks {
			old := mergePairs(l.blocks[:maxBlocks/2])
			l.blocks = append(old, l.blocks[maxBlocks/2:]...)
		}
	}
	b := &l.blocks[len(l.blocks)-1]
	b.last, b.lastTT = id, max(b.lastTT, tt)
	b.messages++
	b.bytes += size

	v := l.vchannels[m.VChannel()]
	if v == nil {
		l.vchannels[m.VChannel()] = &written{first: id, last: id, firstTT: tt, lastTT: tt}
		return true
	}
	v.last, v.lastTT = id, max(v.lastTT, tt)
	return true
}

// fits reports whether a message of segment seg, at timetick tt, of size
// bytes still goes into b.
func (l *ledger) fits(b *block, seg, tt uint64, size int64) bool {
	switch {
	case b.segment != seg, b.messages >= l.bounds.messages, b.bytes+size > l.bounds.bytes && b.messages > 0:
		return false
	case l.span > 0 && hlc.Physical(tt).Sub(hlc.Physical(b.firstTT)) > l.span:
		return false
	}
	return true
}

// mergePairs halves the blocks by merging neighbours of one segment, in a
// new slice.
func mergePairs(bs []block) []block {
	out := make([]block, 0, len(bs)/2+1)
	for i := 0; i < len(bs); i++ {
		b := bs[i]
		if i+1 < len(bs) && bs[i+1].segment == b.segment {
			n := bs[i+1]
			b.last, b.lastTT = n.last, max(b.lastTT, n.lastTT)
			b.messages += n.messages
			b.bytes += n.bytes
			i++
		}
		out = append(out, b)
	}
	return out
}

// truncated forgets what lies before upTo, a position the log was
// truncated at: whole blocks before it (a block it falls inside is kept
// whole), and the vchannels whose last message is before it. It returns
// what the dropped blocks held.
func (l *ledger) truncated(upTo message.ID) (messages, bytes int64) {
	keep := 0
	for keep < len(l.blocks) && l.blocks[keep].last.LT(upTo) {
		messages += l.blocks[keep].messages
		bytes += l.blocks[keep].bytes
		keep++
	}
	l.blocks = append(l.blocks[:0], l.blocks[keep:]...)
	for name, v := range l.vchannels {
		switch {
		case v.last.LT(upTo):
			delete(l.vchannels, name)
		case v.first.LT(upTo):
			// Its first retained message is at or after upTo: upTo is a
			// point before which it has none.
			v.first = upTo
		}
	}
	return messages, bytes
}

// recount counts again the first block when a truncation at upTo fell
// inside it (truncated keeps it whole): it reads w from upTo until a
// message past the block's highest timetick, which comes after every
// message at the block's positions, and keeps the block's data messages
// at or after upTo. A failed read leaves the block as it was (the figures
// then stay coarse until a later truncation passes it). The read is of
// one block at most (its bounds), whatever the log's length.
func (l *ledger) recount(ctx context.Context, w adaptor.WAL, upTo message.ID) error {
	if len(l.blocks) == 0 || !l.blocks[0].first.LT(upTo) || l.tail.IsZero() {
		return nil
	}
	b := l.blocks[0]
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := w.ReadBatches(ctx, adaptor.ReadOption{
		Name:          "retention-recount",
		DeliverPolicy: cursor.StartFrom(upTo),
		Filter:        adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTimeTick}},
	})
	if err != nil {
		return errors.Wrapf(err, "retention: recount from %s", upTo)
	}
	defer func() { _ = s.Close() }()
	next := block{segment: b.segment, firstTT: b.firstTT}
	for {
		select {
		case batch, ok := <-s.Batches():
			if !ok {
				<-s.Done()
				return errors.Wrapf(errors.Join(s.Error(), errors.New("the scanner ended")), "retention: recount from %s", upTo)
			}
			for _, m := range batch {
				tt, _ := m.TimeTick()
				if tt > b.lastTT || adaptor.CaughtUp(m, l.tail) {
					if next.messages == 0 {
						l.blocks = l.blocks[1:]
					} else {
						l.blocks[0] = next
					}
					return nil
				}
				if m.Kind() != message.KindData || b.last.LT(m.ID()) || m.ID().LT(upTo) {
					continue
				}
				if next.messages == 0 || m.ID().LT(next.first) {
					next.first, next.firstTT = m.ID(), tt
				}
				if next.last.IsZero() || next.last.LT(m.ID()) {
					next.last = m.ID()
				}
				next.lastTT = max(next.lastTT, tt)
				next.messages++
				next.bytes += int64(m.Size())
			}
		case <-ctx.Done():
			return errors.Wrapf(ctx.Err(), "retention: recount from %s", upTo)
		}
	}
}

// totals are the ledger's messages and bytes, in all and per segment.
func (l *ledger) totals() (messages, bytes int64, bySegment map[uint64][2]int64) {
	bySegment = map[uint64][2]int64{}
	for _, b := range l.blocks {
		messages += b.messages
		bytes += b.bytes
		s := bySegment[b.segment]
		bySegment[b.segment] = [2]int64{s[0] + b.messages, s[1] + b.bytes}
	}
	return messages, bytes, bySegment
}
