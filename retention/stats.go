package retention

import (
	"context"
	"slices"
	"time"

	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
)

// Stats is what a channel's log retains, as its owner last measured it.
type Stats struct {
	Channel string
	Term    int64
	// Messages and Bytes are the data messages retained, and their bytes
	// (payload and properties).
	Messages, Bytes int64
	// Oldest is the oldest retained data message's position, OldestTime
	// when it was appended; zero when the log retains none.
	Oldest     message.ID
	OldestTime time.Time
	// HeldBy says who holds the log back at its oldest retained point
	// (see the package documentation); Holding names the consumers.
	HeldBy  string
	Holding []consumers.Scope
	// Floor is where the log is truncated (the store's floor).
	Floor string
	// Segments are the kept segments, oldest first.
	Segments []SegmentStats
	// Dropped counts what the policy dropped at this term: messages,
	// bytes.
	Dropped [2]int64
	Policy  Policy
	// MeasuredAt is when the round that measured this ended; Err is its
	// error, if it failed after measuring.
	MeasuredAt time.Time
	Err        error
}

// SegmentStats is one kept segment's share.
type SegmentStats struct {
	Index           uint64
	Backend         string
	BackendChannel  string
	Sealed          bool
	Messages, Bytes int64
}

// publish updates channel's stats and metrics after a round.
func (r *Retainer) publish(ctx context.Context, channel string, st *state, read consumers.Channel, d decision, roundErr error) {
	messages, bytes, bySegment := st.ledger.totals()
	s := Stats{Channel: channel, Term: st.term, Messages: messages, Bytes: bytes, HeldBy: d.heldBy, Holding: d.holding,
		Floor: read.Floor.Checkpoint, Dropped: st.dropped, Policy: st.policy, MeasuredAt: r.clock.Now(), Err: roundErr}
	if len(st.ledger.blocks) > 0 {
		b := st.ledger.blocks[0]
		s.Oldest, s.OldestTime = b.first, hlc.Physical(b.firstTT)
	}
	if !st.truncated.IsZero() {
		s.Floor = st.truncated.Marshal()
	}
	if r.chains != nil {
		if c, err := r.chains(ctx, channel); err == nil {
			for _, seg := range c.Segments {
				n := bySegment[seg.Index]
				s.Segments = append(s.Segments, SegmentStats{Index: seg.Index, Backend: seg.Backend.Name,
					BackendChannel: seg.Backend.Channel, Sealed: seg.Seal != nil, Messages: n[0], Bytes: n[1]})
			}
			if first := c.First(); first > st.segments {
				if st.segments > 0 || st.hasStats {
					r.metrics.segmentsDeleted.Add(float64(first - st.segments))
				}
				st.segments = first
			}
		}
	}
	if len(s.Segments) == 0 {
		for _, i := range sortedSegments(bySegment) {
			n := bySegment[i]
			s.Segments = append(s.Segments, SegmentStats{Index: i, Messages: n[0], Bytes: n[1]})
		}
	}
	r.metrics.measured(s, r.clock.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.states[channel] == st {
		st.stats, st.hasStats = s, true
	}
}

func sortedSegments(m map[uint64][2]int64) []uint64 {
	out := make([]uint64, 0, len(m))
	for i := range m {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}
