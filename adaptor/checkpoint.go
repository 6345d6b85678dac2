package adaptor

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// CheckpointOf returns the checkpoint after m, a message an adaptor scanner
// delivered.
func CheckpointOf(m message.Immutable) (cursor.Checkpoint, error) {
	pos, err := LastConfirmed(m)
	if err != nil {
		return cursor.Checkpoint{}, err
	}
	tt, ok := m.TimeTick()
	if !ok {
		return cursor.Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s carries no timetick", m.ID())
	}
	return cursor.Checkpoint{Position: pos, TimeTick: tt}, nil
}

// CaughtUp reports whether m, a message a scanner delivered, shows that the
// scanner has delivered everything acknowledged before tail was taken
// (WAL.Tail): a watermark at or above tail's timetick.
func CaughtUp(m message.Immutable, tail cursor.Checkpoint) bool {
	if m.Kind() != message.KindTimeTick {
		return false
	}
	tt, ok := m.TimeTick()
	return ok && tt >= tail.TimeTick
}
