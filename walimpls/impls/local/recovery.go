package local

import (
	"slices"

	"github.com/cockroachdb/errors"
)

// segScan is one segment file as recovery read it: its bytes, its start
// frame, and where its frames end.
type segScan struct {
	seg     *segment
	buf     []byte
	start   segmentStart
	startOK bool        // the file begins with a valid start frame
	startSt frameStatus // what is at offset 0 when !startOK
	off     int         // where the frames end
	st      frameStatus // what is at off
	// sealNext is the segment the seal frame that ends the frames names, 0
	// when they end without one.
	sealNext uint64
	// batchAt is the offset of the first frame of a batch that the frames
	// end inside of (its last frame carries flagMore), -1 when they end
	// after a whole batch; batchFrames counts its frames. Such frames are
	// not replayed: recovery keeps a batch whole or drops it whole.
	batchAt     int
	batchFrames int
}

// end is where the log of the segment ends: before a batch cut short, or
// where its frames end.
func (sc *segScan) end() int {
	if sc.batchAt >= 0 {
		return sc.batchAt
	}
	return sc.off
}

// atMarker reports whether the frames end where the journal left its end
// marker (or at the end of the file).
func (sc *segScan) atMarker() bool {
	return sc.st == frameZero || len(sc.buf)-sc.off < headerSize
}

// limit is the bytes the segment may fill.
func (sc *segScan) limit(cfg Config) int64 {
	if sc.start.segmentBytes != 0 {
		return sc.start.segmentBytes
	}
	return cfg.SegmentBytes
}

// replayer carries the state of one recovery across segments. Recovery's
// jobs: this file walks the segments in order; replay.go reads one segment's
// frames (scan) and applies its records to the channels (apply); repair.go
// decides how each segment ended and cuts a torn tail or completes a torn
// segment switch.
type replayer struct {
	s       *Store
	rs      *recovered
	byID    map[uint32]*channel
	lastSeq uint64
	report  RecoveryReport
	opened  []File // every segment file opened, closed if recovery fails
	// marked is set when the root has its journal marker: a segment of it
	// was durable once.
	marked bool
}

// recover replays the segments of the root, rebuilding the channels and the
// segment list, cuts a torn tail and completes an interrupted segment
// switch. The rules are in format.go (Recovery).
func (s *Store) recover() (rs recovered, err error) {
	rs = recovered{nextSeq: 1, nextChanID: 1}
	r := &replayer{s: s, rs: &rs, byID: map[uint32]*channel{}}
	defer func() {
		if err != nil {
			for _, f := range r.opened {
				_ = f.Close() // a file closed already says so; ignored
			}
			s.segments = nil
		}
	}()
	names, err := s.fs.ReadDir(s.cfg.Dir)
	if err != nil {
		return rs, errors.Wrapf(err, "local: list %s", s.cfg.Dir)
	}
	var (
		nums      []uint64
		leftovers []string
	)
	for _, name := range names {
		switch {
		case isSpareName(name), name == markerTempName:
			leftovers = append(leftovers, name)
		case name == markerName:
			r.marked = true
		default:
			if n, ok := parseSegmentName(name); ok {
				nums = append(nums, n)
			}
		}
	}
	if r.marked {
		if err := s.checkMarker(); err != nil {
			return rs, err
		}
		if len(nums) == 0 {
			return rs, errors.Wrapf(ErrCorrupt, "local: %s holds the journal marker %s but no segment file: the segment files were deleted, "+
				"and with them every channel's messages, terms and truncation points; restore the directory from a backup, "+
				"or remove %s to open it as a new, empty store", s.cfg.Dir, markerName, s.path(markerName))
		}
	}
	for _, name := range leftovers {
		// Spares are only ever prepared ahead, new ones are made; a
		// marker being written was not renamed into place.
		if err := s.fs.Remove(s.path(name)); err != nil {
			return rs, errors.Wrapf(err, "local: remove leftover %s", name)
		}
	}
	slices.Sort(nums)
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			return rs, errors.Wrapf(ErrCorrupt, "local: segment file %s is missing (found segments %d and %d)",
				s.path(segmentName(nums[i-1]+1)), nums[i-1], nums[i])
		}
	}
	r.report.Segments = len(nums)
	var (
		bufs  [2][]byte // the previous segment's bytes stay readable
		prev  *segScan
		first *segScan // the oldest segment, once its start frame is valid
	)
	for i, num := range nums {
		last := i == len(nums)-1
		cur, err := r.scan(num, &bufs[i%2], i == 0)
		if err != nil {
			return rs, err
		}
		if !cur.startOK {
			if !last {
				return rs, errors.Wrapf(ErrCorrupt, "local: segment %d has no valid start frame (%s)", num, cur.startSt)
			}
			if err := r.tornSwitch(prev, cur); err != nil {
				return rs, err
			}
			break
		}
		if i == 0 {
			first = cur
		}
		if prev != nil {
			if err := r.endMiddle(prev, cur); err != nil {
				return rs, err
			}
		}
		if last {
			if err := r.endLast(cur); err != nil {
				return rs, err
			}
		}
		prev = cur
	}
	if err := r.checkOldest(first); err != nil {
		return rs, err
	}
	if !r.marked && rs.active != nil {
		// Segments and no marker: a root of an earlier version, or a
		// process that died between its first sync and the marker. The
		// last segment is synced by now.
		if err := s.writeMarker(); err != nil {
			return rs, err
		}
		r.marked = true
	}
	rs.marked = r.marked
	rs.nextSeq = r.lastSeq + 1
	// Deleted channels hold no segment back (publish does the same).
	for _, seg := range s.segments {
		for ch := range seg.chans {
			if ch.deleted.Load() {
				delete(seg.chans, ch)
			}
		}
	}
	for _, ch := range s.channels {
		i := 0
		for i < len(ch.entries) && ch.entries[i].seq < ch.keep.Load() {
			i++
		}
		ch.entries = slices.Clip(ch.entries[i:])
	}
	s.recovery = r.report
	s.log.Info("recovered", "segments", r.report.Segments, "records", r.report.Records, "channels", len(s.channels), "next_seq", rs.nextSeq)
	return rs, nil
}
