package cursor

import (
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrCorruptCheckpoint is returned for a checkpoint string that does
	// not decode.
	ErrCorruptCheckpoint = errors.New("corrupt checkpoint")
	// ErrNoResumePosition is returned by CheckpointOf for a message that no
	// scanner of the adaptor or of a chain delivered.
	ErrNoResumePosition = errors.New("message carries no resume position")
)

// Checkpoint is where a consumer resumes reading a channel: the resume
// position of the last message it processed (its LastConfirmed, a backend
// ID or a chain ID) and that message's timetick. A scanner started with
// After(c) delivers exactly the messages after it: nothing lost, nothing
// again. The zero Checkpoint means "nothing processed yet".
type Checkpoint struct {
	Position message.ID
	TimeTick uint64
}

// CheckpointOf returns the checkpoint after m, a message a scanner of the
// adaptor or of a chain delivered: its resume position (LastConfirmed: a
// backend ID, or a chain ID) and its timetick.
func CheckpointOf(m message.Immutable) (Checkpoint, error) {
	pos := m.LastConfirmed()
	if pos.IsZero() {
		return Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s", m.ID())
	}
	tt, ok := m.TimeTick()
	if !ok {
		return Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s carries no timetick", m.ID())
	}
	return Checkpoint{Position: pos, TimeTick: tt}, nil
}

// IsZero reports whether c is the zero checkpoint.
func (c Checkpoint) IsZero() bool { return c.Position.IsZero() && c.TimeTick == 0 }

// Marshal returns the checkpoint as one string, "<timetick>@<position>"
// with the position in its backend's own form; the zero checkpoint is "".
// adaptor.WAL.ParseCheckpoint decodes it.
func (c Checkpoint) Marshal() string {
	if c.IsZero() {
		return ""
	}
	return strconv.FormatUint(c.TimeTick, 10) + "@" + c.Position.Marshal()
}

func (c Checkpoint) String() string {
	if c.IsZero() {
		return "checkpoint(none)"
	}
	return "checkpoint(" + strconv.FormatUint(c.TimeTick, 10) + "@" + c.Position.String() + ")"
}

// Before reports whether c comes before o in the channel: its position is
// earlier, or the same with a lower timetick. The zero checkpoint comes
// before every other. Checkpoints of different backends are not ordered
// (false, and an error from Compare).
func (c Checkpoint) Before(o Checkpoint) bool {
	n, err := c.Compare(o)
	return err == nil && n < 0
}

// Compare orders c against o: -1, 0 or +1 (see Before).
func (c Checkpoint) Compare(o Checkpoint) (int, error) {
	switch {
	case c.IsZero() && o.IsZero():
		return 0, nil
	case c.IsZero():
		return -1, nil
	case o.IsZero():
		return 1, nil
	}
	n, err := c.Position.Compare(o.Position)
	if err != nil || n != 0 {
		return n, err
	}
	switch {
	case c.TimeTick < o.TimeTick:
		return -1, nil
	case c.TimeTick > o.TimeTick:
		return 1, nil
	}
	return 0, nil
}

// ParseCheckpoint decodes Marshal's form, the position with parseID (a
// backend's UnmarshalID, or ParsePosition's for a chain). "" is the zero
// Checkpoint; a string that does not decode is ErrCorruptCheckpoint, and
// also matches parseID's error when the position is what does not.
func ParseCheckpoint(s string, parseID func(string) (message.ID, error)) (Checkpoint, error) {
	if s == "" {
		return Checkpoint{}, nil
	}
	ttText, idText, ok := strings.Cut(s, "@")
	if !ok {
		return Checkpoint{}, errors.Wrapf(ErrCorruptCheckpoint, "%q: no '@'", s)
	}
	tt, err := strconv.ParseUint(ttText, 10, 64)
	if err != nil || strconv.FormatUint(tt, 10) != ttText || tt == 0 {
		return Checkpoint{}, errors.Wrapf(ErrCorruptCheckpoint, "%q: timetick %q", s, ttText)
	}
	id, err := parseID(idText)
	if err == nil && id.IsZero() {
		err = errors.Wrap(message.ErrCorruptID, "an empty position")
	}
	if err != nil {
		return Checkpoint{}, &corruptCheckpointError{text: s, cause: err}
	}
	return Checkpoint{Position: id, TimeTick: tt}, nil
}

// ParseChainCheckpoint is ParseCheckpoint of a chain's checkpoint without
// its backends: the position is a chain position (a bare backend ID is
// segment 0) whose backend ID IDOf keeps undecoded.
func ParseChainCheckpoint(s string) (Checkpoint, error) {
	return ParseCheckpoint(s, func(text string) (message.ID, error) {
		p, err := ParsePosition(text)
		return IDOf(p), err
	})
}

// corruptCheckpointError is a checkpoint whose position does not decode: it
// matches ErrCorruptCheckpoint and unwraps to the backend's error.
type corruptCheckpointError struct {
	text  string
	cause error
}

func (e *corruptCheckpointError) Error() string {
	return "corrupt checkpoint " + strconv.Quote(e.text) + ": " + e.cause.Error()
}
func (e *corruptCheckpointError) Unwrap() error        { return e.cause }
func (e *corruptCheckpointError) Is(target error) bool { return target == ErrCorruptCheckpoint }
