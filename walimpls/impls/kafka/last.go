package kafka

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/backoff"
)

// Reading the log partition backwards from its end (see Last).
const (
	// firstTailWindow is the number of offsets below the end that Last
	// reads first: enough for a transaction's last record and its commit
	// marker.
	firstTailWindow = 4
	// tailWindowGrowth multiplies the window each time a window held no
	// message (markers and aborted records only).
	tailWindowGrowth = 8
	// tailFetchBytes is the most one backwards fetch asks for.
	tailFetchBytes = 1 << 20
	// maxLastRestarts bounds how often Last starts again because a
	// truncation overtook its search.
	maxLastRestarts = 8
)

// Last implements walimpls.WALImpl: the offset of the last record a
// read_committed scanner delivers. It works on every WAL, fenced and
// read-only ones included: it only reads, with the opener's client.
//
// Offsets are not dense, so the last message is not the end minus one: Last
// waits until the last stable offset reaches the high watermark it saw when
// called (a transaction acknowledged before the call may still be writing
// its commit markers), then reads backwards from there in growing windows
// until it finds a committed data record. A transaction left open by a dead
// writer holds Last up until the transaction times out, as it holds up
// scanners.
func (w *wal) Last(ctx context.Context) (message.ID, error) {
	if w.isClosed() {
		return message.ID{}, w.closedErr()
	}
	if w.deleted.Load() {
		return message.ID{}, w.goneErr("last message")
	}
	if err := ctx.Err(); err != nil {
		return message.ID{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.life, cancel)()

	off, found, err := w.lastOffset(ctx)
	switch {
	case w.isClosed():
		return message.ID{}, w.closedErr()
	case err != nil:
		return message.ID{}, errors.Wrapf(err, "kafka: last message of channel %q", w.ch.Name)
	case !found:
		return message.ID{}, nil
	}
	return message.NewSeqID(Name, off), nil
}

// lastOffset returns the offset of the last committed data record of the
// log partition; found is false when there is none.
func (w *wal) lastOffset(ctx context.Context) (off int64, found bool, err error) {
	for restarts := 0; ; restarts++ {
		start, end, err := w.stableBounds(ctx)
		if err != nil {
			return 0, false, err
		}
		off, found, err = w.lastBelow(ctx, start, end)
		if isOutOfRange(err) && restarts < maxLastRestarts {
			// A truncation moved the log start above the window. It
			// keeps the last message: look again from the new start.
			continue
		}
		return off, found, err
	}
}

// stableBounds returns the log start and the last stable offset of the log
// partition, once the last stable offset has reached the high watermark
// listed first: every record written before the call is then committed or
// aborted.
func (w *wal) stableBounds(ctx context.Context) (start, end int64, err error) {
	_, hwm, err := w.o.bounds(ctx, w.topic, logPartition, false)
	if err != nil {
		return 0, 0, err
	}
	pace := backoff.Config{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond, NoJitter: true}
	for attempt := 0; ; attempt++ {
		start, end, err = w.o.bounds(ctx, w.topic, logPartition, true)
		if err != nil || end >= hwm {
			return start, end, err
		}
		if err := pace.Wait(ctx, attempt); err != nil {
			return 0, 0, errors.Wrapf(err, "waiting for the transactions below offset %d to end (last stable offset %d)", hwm, end)
		}
	}
}

// lastBelow returns the last committed data record in [start, end), reading
// windows backwards from end, each tailWindowGrowth times the last.
func (w *wal) lastBelow(ctx context.Context, start, end int64) (off int64, found bool, err error) {
	hi := end
	for window := int64(firstTailWindow); hi > start; window *= tailWindowGrowth {
		from := max(start, hi-window)
		if off, found, err = w.lastIn(ctx, from, hi); err != nil || found {
			return off, found, err
		}
		hi = from
	}
	return 0, false, nil
}

// lastIn returns the last committed data record in [from, hi), where hi is
// at most the last stable offset.
func (w *wal) lastIn(ctx context.Context, from, hi int64) (off int64, found bool, err error) {
	for next := from; next < hi; {
		fp, after, err := w.o.fetchRaw(ctx, w.topic, logPartition, next, tailFetchBytes, true)
		if err != nil {
			return 0, false, err
		}
		for _, r := range fp.Records { // in offset order
			if r.Offset < hi {
				off, found = r.Offset, true
			}
		}
		if after <= next {
			// Below the last stable offset a fetch always returns the
			// batch holding next.
			return 0, false, errors.Newf("fetch at offset %d below the last stable offset %d returned nothing", next, hi)
		}
		next = after
	}
	return off, found, nil
}
