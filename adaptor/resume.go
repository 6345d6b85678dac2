package adaptor

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// LastConfirmed returns the resume position a scanner attached to a message
// it delivered: a scanner started with DeliverStartFrom(position) and
// Filter.TimeTickAbove set to the message's timetick delivers exactly the
// messages that came after it. unmarshal decodes the backend's IDs
// (walimpls.Opener.UnmarshalID).
func LastConfirmed(m message.Immutable, unmarshal func(string) (message.ID, error)) (message.ID, error) {
	s, ok := m.Properties().Get(message.KeyLastConfirmed)
	if !ok {
		return message.ID{}, errors.Wrap(message.ErrBadProperty, "message carries no last-confirmed position")
	}
	return unmarshal(s)
}
