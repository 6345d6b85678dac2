package local

import (
	"time"

	"github.com/cockroachdb/errors"
)

// run is the flusher goroutine, the "doing" half of the journal: it takes
// the pending batch, writes it once, syncs once (per the policy) and
// publishes it; between rounds it syncs an idle journal on the interval
// policy's tick, and on close it syncs what is left. A failure is sticky
// (journal.fail): every later round fails its waiters with the same error,
// and nothing is written after it.
func (j *journal) run() {
	defer close(j.stopped)
	var tick <-chan time.Time
	if j.s.cfg.Sync == SyncInterval {
		t := j.s.cfg.clock.NewTicker(j.s.cfg.SyncInterval)
		defer t.Stop()
		tick = t.Chan()
	}
	for {
		b, closing := j.take()
		if b == nil {
			if closing {
				// A clean close leaves nothing unsynced, whatever the policy.
				if j.unsynced() && j.failed() == nil {
					j.final = j.syncActive()
				}
				return
			}
			select {
			case <-j.wake:
			case <-tick:
				if j.unsynced() && j.failed() == nil {
					_ = j.syncActive()
				}
			}
			continue
		}

		// One group-commit round.
		err := j.failed()
		for i := range b.pieces {
			if err != nil {
				break
			}
			err = j.writePiece(&b.pieces[i]) // installs the segments it starts
		}
		if err == nil && j.roundSyncs(b) && j.unsynced() {
			err = j.syncActive()
		}
		if err == nil {
			j.publish(b) // and acknowledges
		} else {
			// The segments the round started stay unlisted: a listed
			// segment's start frame is durable, and the collector may free
			// the segment before it (doc.go, Truncation). close closes
			// their files.
			j.finishWaiters(b.recs, err)
		}
		j.giveBack(b)
		j.askDiskCheck()
	}
}

// roundSyncs reports whether the round of b ends with a sync: always for a
// round that holds a term, truncate or delete frame or starts a segment,
// else per the policy (SyncInterval: once the interval has passed since the
// last sync).
func (j *journal) roundSyncs(b *batch) bool {
	switch {
	case b.needSync, j.s.cfg.Sync == SyncAlways:
		return true
	case j.s.cfg.Sync == SyncInterval:
		return j.s.cfg.clock.Since(j.lastSync) >= j.s.cfg.SyncInterval
	}
	return false
}

// unsynced reports whether the active segment holds bytes not known
// durable.
func (j *journal) unsynced() bool { return j.active != nil && j.synced < j.woff }

// askDiskCheck asks the preparer to read the free space when
// Config.DiskCheckInterval has passed since the flusher last asked: while
// the journal writes, others may fill the file system (doc.go, Disk
// space). One clock reading per round.
func (j *journal) askDiskCheck() {
	if !j.s.disk.levels.enabled() {
		return
	}
	if now := j.s.cfg.clock.Now(); now.Sub(j.diskAsked) >= j.s.cfg.DiskCheckInterval {
		j.diskAsked = now
		j.s.prep.requestDiskCheck()
	}
}

// writePiece writes a piece, installing its segment first when it starts
// one, followed by an end marker: an all-zero header where the next frame
// will go. The marker makes the end of the log explicit in a recycled
// segment, whose old frames would otherwise follow, and overwrites any
// frame left there by a torn write from before a recovery. The next write
// starts on the marker.
func (j *journal) writePiece(p *piece) error {
	if p.start != nil {
		if err := j.installSegment(p); err != nil {
			return err
		}
	}
	if j.active == nil || j.active.num != p.seg || j.woff != p.off {
		return j.fail(errors.AssertionFailedf("local: piece of segment %d at %d does not follow the writes (segment %d at %d)", p.seg, p.off, j.activeNum(), j.woff))
	}
	n := len(p.buf)
	// put kept room for it (and for a seal) in the segment.
	var marker [headerSize]byte
	p.buf = append(p.buf, marker[:]...)
	if _, err := j.active.f.WriteAt(p.buf, p.off); err != nil {
		return j.fail(errors.Wrapf(err, "local: write segment %d at %d", p.seg, p.off))
	}
	p.buf = p.buf[:n]
	j.woff = p.off + int64(n)
	return nil
}

func (j *journal) activeNum() uint64 {
	if j.active == nil {
		return 0
	}
	return j.active.num
}

// syncActive fdatasyncs the active segment. A failure is sticky: the kernel
// may have dropped the pages it could not write, so a later successful sync
// would prove nothing. The root's first sync makes its first segment
// durable, start frame included: it then writes the journal marker, once,
// whose failure is sticky too. The sync's duration is the device's, timed
// on the real clock; lastSync is on walimpls.WithClock, which schedules the
// interval policy.
func (j *journal) syncActive() error {
	start := time.Now()
	err := j.active.f.Sync()
	d := time.Since(start)
	j.s.m.syncSeconds.Observe(d.Seconds())
	if d >= j.s.cfg.SlowSync {
		j.s.log.Warn("slow fdatasync", "segment", j.active.num, "took", d)
	}
	if err != nil {
		return j.fail(errors.Wrapf(err, "local: fdatasync segment %d", j.active.num))
	}
	j.synced = j.woff
	j.lastSync = j.s.cfg.clock.Now()
	j.mu.Lock()
	if j.fseg == j.active.num {
		j.fsynced = j.synced
	}
	j.mu.Unlock()
	if !j.marked {
		if err := j.s.writeMarker(); err != nil {
			return j.fail(err)
		}
		j.marked = true
	}
	return nil
}
