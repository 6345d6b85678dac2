package adaptor

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// LastConfirmed returns the resume position a scanner attached to a message
// it delivered (cursor.CheckpointOf's, with the message's timetick), or
// cursor.ErrNoResumePosition: a scanner started with cursor.StartFrom(position) and
// Filter.TimeTickAbove set to the message's timetick delivers exactly the
// messages that came after it.
func LastConfirmed(m message.Immutable) (message.ID, error) {
	id := m.LastConfirmed()
	if id.IsZero() {
		return message.ID{}, errors.Wrapf(cursor.ErrNoResumePosition, "message %s", m.ID())
	}
	return id, nil
}
