package chainread

import (
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/message"
)

// idBackend is the Backend of the IDs this package delivers.
const idBackend = "chain"

// idValue is the message.IDValue of a delivered message: its segment and
// its ID on the segment's backend. IDs hold a pointer to one, so that a
// scanner allocates those of a batch at once (one slice per batch, not one
// value per message).
type idValue struct {
	segment uint64
	id      message.ID
}

// Backend implements message.IDValue.
func (v *idValue) Backend() string { return idBackend }

// Compare implements message.IDValue: by segment, then by the backend's
// order (IDs of one segment share a backend).
func (v *idValue) Compare(o message.IDValue) int {
	ov, ok := o.(*idValue)
	if !ok {
		return 1
	}
	switch {
	case v.segment < ov.segment:
		return -1
	case v.segment > ov.segment:
		return 1
	}
	n, err := v.id.Compare(ov.id)
	if err != nil {
		// Only the zero ID, which a delivered ID never holds.
		return 0
	}
	return n
}

// Marshal implements message.IDValue: the chain position's string.
func (v *idValue) Marshal() string { return v.position().String() }

func (v *idValue) position() cursor.Position {
	return cursor.Position{Segment: v.segment, ID: v.id.Marshal()}
}

// IDOf returns the chain ID of backendID, an ID of the backend of the
// chain's segment: what a writer of the chain returns for its appends,
// which compares with the IDs scanners of this package deliver.
func IDOf(segment uint64, backendID message.ID) message.ID {
	return message.NewID(&idValue{segment: segment, id: backendID})
}

// PositionOf returns the chain position of an ID a chainread scanner
// delivered (a message's ID or LastConfirmed); any other ID is
// message.ErrIncomparableID.
func PositionOf(id message.ID) (cursor.Position, error) {
	v, ok := id.Value().(*idValue)
	if !ok {
		return cursor.Position{}, errors.Wrapf(message.ErrIncomparableID, "chainread: id %s is not a chain id", id)
	}
	return v.position(), nil
}

// BackendID returns the segment and the backend ID of an ID a chainread
// scanner delivered.
func BackendID(id message.ID) (segment uint64, backendID message.ID, err error) {
	v, ok := id.Value().(*idValue)
	if !ok {
		return 0, message.ID{}, errors.Wrapf(message.ErrIncomparableID, "chainread: id %s is not a chain id", id)
	}
	return v.segment, v.id, nil
}

// Checkpoint is where a consumer resumes reading a chain: the resume
// position of the last message it processed and that message's timetick.
// DeliverAfter(c) delivers exactly the messages after it. The zero
// Checkpoint means nothing processed yet.
type Checkpoint struct {
	Position cursor.Position
	TimeTick uint64
}

// CheckpointOf returns the checkpoint after m, a message a chainread
// scanner delivered.
func CheckpointOf(m message.Immutable) (Checkpoint, error) {
	lc := m.LastConfirmed()
	if lc.IsZero() {
		return Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s", m.ID())
	}
	pos, err := PositionOf(lc)
	if err != nil {
		return Checkpoint{}, errmark.Mark(err, ErrNoResumePosition)
	}
	tt, ok := m.TimeTick()
	if !ok {
		return Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s carries no timetick", m.ID())
	}
	return Checkpoint{Position: pos, TimeTick: tt}, nil
}

// IsZero reports whether c is the zero checkpoint.
func (c Checkpoint) IsZero() bool { return c.Position.IsZero() && c.TimeTick == 0 }

// Marshal returns "<timetick>@<chain position>", the adaptor's checkpoint
// form (a checkpoint in segment 0 is the one the adaptor writes); the
// zero checkpoint is "".
func (c Checkpoint) Marshal() string {
	if c.IsZero() {
		return ""
	}
	return strconv.FormatUint(c.TimeTick, 10) + "@" + c.Position.String()
}

func (c Checkpoint) String() string {
	if c.IsZero() {
		return "checkpoint(none)"
	}
	return "checkpoint(" + c.Marshal() + ")"
}

// ParseCheckpoint decodes Marshal's form, and the adaptor's
// (Checkpoint.Marshal of a channel without a chain: segment 0). A string
// that does not decode is an error matching adaptor.ErrCorruptCheckpoint.
func ParseCheckpoint(s string) (Checkpoint, error) {
	if s == "" {
		return Checkpoint{}, nil
	}
	ttText, posText, ok := strings.Cut(s, "@")
	if !ok {
		return Checkpoint{}, errors.Wrapf(errCorruptCheckpoint, "%q: no '@'", s)
	}
	tt, err := strconv.ParseUint(ttText, 10, 64)
	if err != nil || strconv.FormatUint(tt, 10) != ttText || tt == 0 {
		return Checkpoint{}, errors.Wrapf(errCorruptCheckpoint, "%q: timetick %q", s, ttText)
	}
	pos, err := cursor.ParsePosition(posText)
	if err != nil || pos.IsZero() {
		return Checkpoint{}, errmark.Mark(errors.Wrapf(errCorruptCheckpoint, "%q: position: %v", s, err), message.ErrCorruptID)
	}
	return Checkpoint{Position: pos, TimeTick: tt}, nil
}
