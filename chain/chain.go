package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
)

// Chain is a channel's segments, oldest kept first, and the migration
// pending on its last one. See the package documentation for its rules;
// Validate checks them.
type Chain struct {
	Channel  string     `json:"channel"`
	Segments []Segment  `json:"segments"`
	Pending  *Migration `json:"pending,omitempty"`
}

// Segment is a part of a channel on one backend.
type Segment struct {
	Index     uint64    `json:"index"`
	Backend   Backend   `json:"backend"`
	FirstTerm int64     `json:"first_term"`
	Created   time.Time `json:"created"`
	// Seal is nil on the last segment, set on every other.
	Seal *Seal `json:"seal,omitempty"`
}

// Backend is where a segment lives, written once when its migration is
// requested.
type Backend struct {
	// Name is the configuration entry the segment was built from.
	Name string `json:"name"`
	// Kind is the backend's registered name (local, memory, kafka, pulsar,
	// s3).
	Kind string `json:"kind"`
	// Channel is the channel's name on that backend.
	Channel string `json:"channel"`
	// Params are the backend's settings that locate the data, a JSON
	// object without secrets; empty when the backend needs none.
	Params json.RawMessage `json:"params,omitempty"`
}

// Seal closes a segment for writes.
type Seal struct {
	// Term sealed the segment: its writers were fenced by an open at it.
	Term int64 `json:"term"`
	// End is the last position readers deliver, its backend's marshaled
	// message ID; "" when they deliver nothing.
	End string `json:"end"`
	// TimeTick is the highest timetick given in the segment or any before
	// it: the next segment's writer allocates above it.
	TimeTick uint64    `json:"tt"`
	At       time.Time `json:"at"`
}

// Migration is a requested move of the channel's writes to another
// backend, pending until the seal records it or it is cancelled.
type Migration struct {
	Target Backend `json:"target"`
	// Term is the term that will seal the last segment and open the next.
	Term int64     `json:"term"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
}

// First returns the index of the first kept segment: positions in earlier
// segments are gone.
func (c Chain) First() uint64 {
	if len(c.Segments) == 0 {
		return 0
	}
	return c.Segments[0].Index
}

// Last returns the writable segment. A chain that does not validate may
// have none (the zero Segment).
func (c Chain) Last() Segment {
	if len(c.Segments) == 0 {
		return Segment{}
	}
	return c.Segments[len(c.Segments)-1]
}

// Segment returns the kept segment of index i.
func (c Chain) Segment(i uint64) (Segment, bool) {
	if len(c.Segments) == 0 || i < c.First() || i-c.First() >= uint64(len(c.Segments)) {
		return Segment{}, false
	}
	return c.Segments[i-c.First()], true
}

// Locate returns the segment p names: walimpls.ErrPositionGone when it
// was pruned, ErrUnknownSegment when it comes after the last.
func (c Chain) Locate(p cursor.Position) (Segment, error) {
	if s, ok := c.Segment(p.Segment); ok {
		return s, nil
	}
	if p.Segment < c.First() {
		return Segment{}, errors.Wrapf(walimpls.ErrPositionGone,
			"chain %s: position %s is in segment %d, pruned (the chain starts at segment %d)", c.Channel, p, p.Segment, c.First())
	}
	return Segment{}, errors.Wrapf(ErrUnknownSegment,
		"chain %s: position %s is in segment %d, after the last segment %d (a position of another chain?)", c.Channel, p, p.Segment, c.Last().Index)
}

// Clone returns a deep copy, which the Store changes without touching c.
func (c Chain) Clone() Chain {
	out := c
	out.Segments = make([]Segment, len(c.Segments))
	for i, s := range c.Segments {
		s.Backend = s.Backend.clone()
		if s.Seal != nil {
			seal := *s.Seal
			s.Seal = &seal
		}
		out.Segments[i] = s
	}
	if c.Pending != nil {
		m := *c.Pending
		m.Target = m.Target.clone()
		out.Pending = &m
	}
	return out
}

// Equal reports whether b is the same backend: the same name, kind,
// channel and params (compared as compact JSON).
func (b Backend) Equal(o Backend) bool {
	return b.Name == o.Name && b.Kind == o.Kind && b.Channel == o.Channel &&
		bytes.Equal(compactJSON(b.Params), compactJSON(o.Params))
}

func (b Backend) String() string { return b.Name + "/" + b.Channel }

func (b Backend) clone() Backend {
	b.Params = bytes.Clone(b.Params)
	return b
}

// compactJSON returns raw without insignificant space, or raw itself when
// it does not parse (Validate reports that).
func compactJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

func (s Seal) String() string {
	end := s.End
	if end == "" {
		end = "<empty>"
	}
	return fmt.Sprintf("sealed at term %d, end %s, timetick %d", s.Term, end, s.TimeTick)
}

func (m Migration) String() string {
	return fmt.Sprintf("migration to %s at term %d, requested by %q at %s", m.Target, m.Term, m.By, m.At.UTC().Format(time.RFC3339))
}
