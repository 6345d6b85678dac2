package chainread

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// CheckpointOf returns the checkpoint after m, a message a chainread
// scanner delivered: its resume position, a chain ID (cursor.ChainID),
// and its timetick. Its Marshal is "<timetick>@<chain position>", which
// cursor.ParseChainCheckpoint reads back without the chain's backends.
func CheckpointOf(m message.Immutable) (cursor.Checkpoint, error) {
	lc := m.LastConfirmed()
	if lc.IsZero() {
		return cursor.Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s", m.ID())
	}
	if _, _, ok := cursor.SplitID(lc); !ok {
		return cursor.Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s: resume position %s is not a chain id", m.ID(), lc)
	}
	tt, ok := m.TimeTick()
	if !ok {
		return cursor.Checkpoint{}, errors.Wrapf(ErrNoResumePosition, "message %s carries no timetick", m.ID())
	}
	return cursor.Checkpoint{Position: lc, TimeTick: tt}, nil
}
