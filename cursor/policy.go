package cursor

import (
	"fmt"

	"github.com/streamwal/streamwal/message"
)

type kind uint8

const (
	kindAll kind = iota
	kindLatest
	kindStartFrom
	kindStartAfter
	kindTail
	kindFromTimeTick
	kindAfter
)

// Policy says where a scanner starts. The zero value is All. A backend
// (walimpls) reads a log that knows no timeticks: it is given Log's
// policy, one of All, Latest, StartFrom, StartAfter or Tail. The adaptor
// and the chain reader also take FromTimeTick and After, and refuse Tail.
// The positions are the reader's IDs: a backend's, or chain IDs (a bare
// backend ID names segment 0 of a chain).
type Policy struct {
	kind kind
	id   message.ID
	n    int    // Tail
	tt   uint64 // FromTimeTick, After
}

// All starts at the first message still kept.
func All() Policy { return Policy{kind: kindAll} }

// Latest delivers only messages appended after the read starts.
func Latest() Policy { return Policy{kind: kindLatest} }

// StartFrom starts at id, inclusive.
func StartFrom(id message.ID) Policy { return Policy{kind: kindStartFrom, id: id} }

// StartAfter starts right after id, exclusive.
func StartAfter(id message.ID) Policy { return Policy{kind: kindStartAfter, id: id} }

// Tail starts near the end of a backend's log: at a position from which at
// least the last n messages stored when the read starts are delivered
// (every message kept, when fewer are kept). A backend may start earlier
// than exactly n messages from the end, never later. n must be at least 1.
func Tail(n int) Policy { return Policy{kind: kindTail, n: n} }

// FromTimeTick delivers every kept message whose timetick is at or above
// tt.
func FromTimeTick(tt uint64) Policy { return Policy{kind: kindFromTimeTick, tt: tt} }

// After starts right after a checkpoint: at its position, delivering only
// messages with a higher timetick. The zero checkpoint is All.
func After(c Checkpoint) Policy {
	if c.IsZero() {
		return All()
	}
	return Policy{kind: kindAfter, id: c.Position, tt: c.TimeTick}
}

// IsAll reports whether p is All.
func (p Policy) IsAll() bool { return p.kind == kindAll }

// IsLatest reports whether p is Latest.
func (p Policy) IsLatest() bool { return p.kind == kindLatest }

// Tail returns n and true for a Tail policy.
func (p Policy) Tail() (n int, ok bool) {
	if p.kind != kindTail {
		return 0, false
	}
	return p.n, true
}

// StartID returns where the log is read from under a StartFrom, StartAfter
// or After policy, and whether that position itself is read (After reads
// it, and delivers it only when its timetick is above the checkpoint's);
// false for the others.
func (p Policy) StartID() (id message.ID, inclusive bool, ok bool) {
	switch p.kind {
	case kindStartFrom, kindAfter:
		return p.id, true, true
	case kindStartAfter:
		return p.id, false, true
	}
	return message.ID{}, false, false
}

// FromTimeTick returns tt and true for a FromTimeTick policy.
func (p Policy) FromTimeTick() (tt uint64, ok bool) {
	if p.kind != kindFromTimeTick {
		return 0, false
	}
	return p.tt, true
}

// After returns the checkpoint and true for an After policy.
func (p Policy) After() (c Checkpoint, ok bool) {
	if p.kind != kindAfter {
		return Checkpoint{}, false
	}
	return Checkpoint{Position: p.id, TimeTick: p.tt}, true
}

// Log returns the policy of the log read under p: FromTimeTick reads All,
// After reads StartFrom its position; the others are their own. What p
// delivers of that read is the messages Admits.
func (p Policy) Log() Policy {
	switch p.kind {
	case kindFromTimeTick:
		return All()
	case kindAfter:
		return StartFrom(p.id)
	}
	return p
}

// Admits reports whether p delivers a message of timetick tt that its Log
// read: FromTimeTick only those at or above its timetick, After only
// those above its checkpoint's.
func (p Policy) Admits(tt uint64) bool {
	switch p.kind {
	case kindFromTimeTick:
		return tt >= p.tt
	case kindAfter:
		return tt > p.tt
	}
	return true
}

// WithStartID returns p with its position (StartID's) replaced by id: the
// same policy read on a log whose IDs name positions differently (a
// chain's segment, read with its backend's IDs). Other policies are
// returned as they are.
func (p Policy) WithStartID(id message.ID) Policy {
	if _, _, ok := p.StartID(); ok {
		p.id = id
	}
	return p
}

func (p Policy) String() string {
	switch p.kind {
	case kindAll:
		return "all"
	case kindLatest:
		return "latest"
	case kindStartFrom:
		return "start-from(" + p.id.String() + ")"
	case kindStartAfter:
		return "start-after(" + p.id.String() + ")"
	case kindTail:
		return fmt.Sprintf("tail(%d)", p.n)
	case kindFromTimeTick:
		return fmt.Sprintf("from-timetick(%d)", p.tt)
	case kindAfter:
		return "after(" + Checkpoint{Position: p.id, TimeTick: p.tt}.Marshal() + ")"
	}
	return fmt.Sprintf("policy(%d)", p.kind)
}
