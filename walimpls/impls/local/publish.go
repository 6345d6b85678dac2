package local

import (
	"context"

	"github.com/streamwal/streamwal/walimpls"
)

// publish makes a written round visible: index entries, terms, truncation
// points, deletions, new segments; then it wakes scanners and acknowledges
// waiters.
func (j *journal) publish(b *batch) {
	s := j.s
	j.publishSegments()
	var touched, deleted []*channel
	freed := false // a truncation or deletion may free segments
	records, bytes := 0, 0
	for i := 0; i < len(b.recs); {
		r := &b.recs[i]
		ch := r.ch
		switch r.kind {
		case reqAppend:
			// A run of appends to one channel takes its lock once.
			ch.mu.Lock()
			for ; i < len(b.recs) && b.recs[i].kind == reqAppend && b.recs[i].ch == ch; i++ {
				ch.entries = append(ch.entries, b.recs[i].entry)
				ch.lastSeq = b.recs[i].entry.seq
				records++
				bytes += int(b.recs[i].entry.size)
			}
			ch.mu.Unlock()
			if len(touched) == 0 || touched[len(touched)-1] != ch {
				touched = append(touched, ch)
			}
			continue
		case reqTerm:
			ch.mu.Lock()
			ch.id = ch.w.id
			prev, fenced := ch.term, 0
			ch.term = max(ch.term, r.term)
			ch.gen = r.gen
			for w := range ch.writers {
				// The claimer is not listed yet; every listed writer
				// claimed earlier.
				if w.gen < r.gen && w.fence(&walimpls.FencedError{CurrentTerm: r.term}) {
					fenced++
				}
			}
			ch.mu.Unlock()
			switch {
			case r.wrote:
				s.log.Info("channel term stored", "channel", ch.name, "term", r.term, "previous_term", prev, "fenced_writers", fenced)
			case fenced > 0:
				s.log.Info("channel claimed again at its term", "channel", ch.name, "term", r.term, "fenced_writers", fenced)
			}
		case reqTruncate:
			if r.wrote {
				ch.publishTruncate(r.keep, r.lastRemoved)
				freed = true
			}
		case reqDelete:
			if ch != nil {
				fenced := ch.publishDelete()
				deleted = append(deleted, ch)
				s.log.Info("channel deleted", "channel", ch.name, "stored", r.wrote, "fenced_writers", fenced)
			}
		}
		i++
	}
	if records > 0 {
		j.noteAppendsInSegments(b)
		s.m.appends.Add(float64(records))
		s.m.appendBytes.Add(float64(bytes))
		s.m.batchRecords.Observe(float64(records))
	}
	if len(deleted) > 0 {
		// After the appends above: those of a deleted channel in this
		// round were framed before its delete frame.
		s.forgetInSegments(deleted)
		freed = true
	}
	for _, ch := range touched {
		ch.wake()
	}
	j.finishWaiters(b.recs, nil)
	if freed {
		s.prep.requestGC()
	}
}

// publishSegments lists the segments started by this round, whose start
// frames the round synced.
func (j *journal) publishSegments() {
	if len(j.newSegs) == 0 {
		return
	}
	s := j.s
	s.segMu.Lock()
	s.segments = append(s.segments, j.newSegs...)
	n := len(s.segments)
	s.segMu.Unlock()
	s.m.segments.Set(float64(n))
	j.newSegs = j.newSegs[:0]
}

// finishWaiters sets the outcome of the waiters of recs and closes their
// done; notes tells those with a notify. Called by the flusher.
func (j *journal) finishWaiters(recs []rec, err error) {
	var told []*waiter
	for _, r := range recs {
		if r.w == nil {
			continue
		}
		r.w.err = err
		close(r.w.done)
		if r.w.notify != nil {
			told = append(told, r.w)
		}
	}
	if len(told) > 0 {
		j.notes.Post(func() {
			for _, w := range told {
				w.notify(w.err)
			}
		})
	}
}

// noteAppendsInSegments records, in each segment the round wrote to, the
// last seq of every channel appended there: what the collector reads to
// tell when a segment holds nothing a channel still keeps.
func (j *journal) noteAppendsInSegments(b *batch) {
	s := j.s
	s.segMu.Lock()
	for i := range b.recs {
		r := &b.recs[i]
		if r.kind != reqAppend {
			continue
		}
		if n := i + 1; n < len(b.recs) && b.recs[n].kind == reqAppend && b.recs[n].ch == r.ch && b.recs[n].entry.seg == r.entry.seg {
			continue // the next one overwrites it
		}
		// The round wrote to the last segments only.
		for k := len(s.segments) - 1; k >= 0; k-- {
			if seg := s.segments[k]; seg.num == r.entry.seg {
				seg.chans[r.ch] = r.entry.seq
				break
			}
		}
	}
	s.segMu.Unlock()
}

// wake tells the channel's tailing scanners that there is more to read.
func (ch *channel) wake() {
	ch.mu.Lock()
	close(ch.notify)
	ch.notify = make(chan struct{})
	ch.mu.Unlock()
}

// publishTruncate moves the published truncation point forward and drops the
// index entries below it.
func (ch *channel) publishTruncate(keep, lastRemoved uint64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if lastRemoved > ch.lastRemoved.Load() {
		ch.lastRemoved.Store(lastRemoved)
	}
	if keep <= ch.keep.Load() {
		return
	}
	ch.keep.Store(keep)
	i := 0
	for i < len(ch.entries) && ch.entries[i].seq < keep {
		i++
	}
	if i > 0 {
		// Copy when most of the array is dead, so truncation gives memory
		// back; otherwise re-slice.
		if i > len(ch.entries)/2 {
			ch.entries = append([]entry(nil), ch.entries[i:]...)
		} else {
			ch.entries = ch.entries[i:]
		}
	}
}

// framedLastSeq returns the seq of the channel's last framed message: it
// runs ahead of the published one by the records not yet written, which
// SyncNone has acknowledged already.
func (j *journal) framedLastSeq(ch *channel) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return ch.w.lastSeq
}

// awaitPublished waits until the channel's published state covers seq,
// when seq is a framed message of the channel (SyncNone acknowledges an
// append before the flusher publishes it). It returns at once for a seq
// beyond the channel's last framed message, and with the journal's error
// when the records will never be published.
func (j *journal) awaitPublished(ctx context.Context, ch *channel, seq uint64) error {
	for {
		ch.mu.RLock()
		last, notify := ch.lastSeq, ch.notify
		ch.mu.RUnlock()
		if seq <= last {
			return nil
		}
		j.mu.Lock()
		framed, err := ch.w.lastSeq, j.err
		j.mu.Unlock()
		if seq > framed {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-notify:
		case <-j.failedCh:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
