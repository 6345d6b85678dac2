package kafka

import (
	"context"
	"math"

	"github.com/cockroachdb/errors"
)

// Finding where a cursor.Tail(n) scanner starts (see the package
// documentation, "Reads").
const (
	// tailOffsetsPerMessage sizes the first window: a message appended
	// alone with transactions takes two offsets, its record and its
	// transaction's commit marker, so n appends of one message each fill
	// the last 2n offsets exactly. Without transactions, or with batches,
	// messages are denser and the window holds more than n.
	tailOffsetsPerMessage = 2
	// tailGrowth multiplies the window each time the offsets below it are
	// searched for the messages still missing (aborted transactions take
	// offsets and hold no message).
	tailGrowth = 2
)

// tailStart returns the offset a cursor.Tail(n) scanner s starts at: at
// least n committed messages lie between it and end, the last stable offset
// Read listed, or it is the log start, from which every message kept is
// delivered. Counting below end is enough: every message below it was
// stored when Read was called, and a message stored then but above it (its
// commit markers not yet written) is delivered anyway, since the start is
// below end.
//
// The search reads windows of offsets backwards from end, the first 2n
// wide, each next one twice the last, counting the messages in them, until
// they hold n. What it reads is bounded by the span of the last n messages
// (times the growth), whatever the length of the log. A truncation that
// moves the log start into a window makes it look again from the new start.
// The search ends with ctx or when the WAL closes.
func (w *wal) tailStart(ctx context.Context, s *scanner, n int, start, end int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.life, cancel)()
	for restarts := 0; ; restarts++ {
		off, err := s.tailFrom(ctx, int64(n), start, end)
		if isOutOfRange(err) && restarts < maxLastRestarts {
			start, _, err = listBounds(ctx, s.adm, w.topic, logPartition, true)
			if err == nil {
				continue
			}
		}
		switch {
		case w.isClosed():
			return 0, w.closedErr()
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case err != nil:
			return 0, errors.Wrapf(err, "kafka: read channel %q from tail(%d)", w.ch.Name, n)
		}
		return off, nil
	}
}

// tailFrom is one search of tailStart over the log [start, end).
func (s *scanner) tailFrom(ctx context.Context, need, start, end int64) (int64, error) {
	hi := end
	window := mulSat(need, tailOffsetsPerMessage)
	for {
		if hi-start <= window {
			// The log start is within reach: starting there delivers
			// every message kept. Messages never outnumber offsets, so a
			// tail longer than a short log ends here without a read.
			return start, nil
		}
		from := hi - window
		got, err := s.countMessages(ctx, from, hi)
		if err != nil {
			return 0, err
		}
		if need -= got; need <= 0 {
			return from, nil
		}
		hi = from
		window = mulSat(window, tailGrowth)
	}
}

// countMessages returns the number of committed messages in [from, hi),
// where hi is at most the last stable offset. It fetches with the
// scanner's client, read_committed, so aborted records and transaction
// markers are not counted.
func (s *scanner) countMessages(ctx context.Context, from, hi int64) (int64, error) {
	var count int64
	for next := from; next < hi; {
		fp, after, err := fetchRaw(ctx, s.cl, s.adm, s.w.topic, logPartition, next, tailFetchBytes, true)
		if err != nil {
			return 0, err
		}
		for _, r := range fp.Records { // at or after next, in offset order
			if r.Offset < hi {
				count++
			}
		}
		if after <= next {
			// Below the last stable offset a fetch always returns the
			// batch holding next.
			return 0, errors.Newf("fetch at offset %d below the last stable offset %d returned nothing", next, hi)
		}
		next = after
	}
	return count, nil
}

// mulSat returns a*b for non-negative a and b, or math.MaxInt64 when that
// overflows: a cursor.Tail(math.MaxInt) is valid and means the whole log.
func mulSat(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
