package adaptor

import (
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// ErrCorruptCheckpoint is returned for a checkpoint string that does not
// decode.
var ErrCorruptCheckpoint = errors.New("corrupt checkpoint")

// Checkpoint is where a consumer resumes reading a channel: the resume
// position of the last message it processed (LastConfirmed) and that
// message's timetick. A scanner started with DeliverAfter(c) delivers
// exactly the messages after it: nothing lost, nothing again. The zero
// Checkpoint means "nothing processed yet".
type Checkpoint struct {
	Position message.ID
	TimeTick uint64
}

// CheckpointOf returns the checkpoint after m, a message an adaptor scanner
// delivered.
func CheckpointOf(m message.Immutable) (Checkpoint, error) {
	pos, err := LastConfirmed(m)
	if err != nil {
		return Checkpoint{}, err
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
// WAL.ParseCheckpoint decodes it.
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

// parseCheckpoint decodes Marshal's form with the backend's ID decoder.
func parseCheckpoint(s string, unmarshalID func(string) (message.ID, error)) (Checkpoint, error) {
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
	id, err := unmarshalID(idText)
	if err != nil {
		return Checkpoint{}, &corruptCheckpointError{text: s, cause: err}
	}
	return Checkpoint{Position: id, TimeTick: tt}, nil
}

// DeliverAfter starts right after a checkpoint: at its position, delivering
// only messages with a higher timetick. The zero checkpoint is DeliverAll.
func DeliverAfter(c Checkpoint) DeliverPolicy {
	if c.IsZero() {
		return DeliverAll()
	}
	p := DeliverStartFrom(c.Position)
	p.afterTT = c.TimeTick
	return p
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

// CaughtUp reports whether m, a message a scanner delivered, shows that the
// scanner has delivered everything acknowledged before tail was taken
// (WAL.Tail): a watermark at or above tail's timetick.
func CaughtUp(m message.Immutable, tail Checkpoint) bool {
	if m.Kind() != message.KindTimeTick {
		return false
	}
	tt, ok := m.TimeTick()
	return ok && tt >= tail.TimeTick
}
