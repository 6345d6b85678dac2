package adaptor

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// ErrNoResumePosition is returned by LastConfirmed for a message that was
// not delivered by an adaptor scanner.
var ErrNoResumePosition = errors.New("message carries no resume position")

// LastConfirmed returns the resume position a scanner attached to a message
// it delivered: a scanner started with cursor.StartFrom(position) and
// Filter.TimeTickAbove set to the message's timetick delivers exactly the
// messages that came after it.
func LastConfirmed(m message.Immutable) (message.ID, error) {
	id := m.LastConfirmed()
	if id.IsZero() {
		return message.ID{}, errors.Wrapf(ErrNoResumePosition, "message %s", m.ID())
	}
	return id, nil
}
