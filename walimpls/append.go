package walimpls

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// Append stores m on w and returns its ID once the backend acknowledged it.
// A fenced WAL fails with ErrFenced and stores nothing; see the package
// documentation for which errors leave the outcome unknown.
//
// It is AppendBatch of one message, for every backend: a backend has one
// append path, so a single message meets the same checks, refusals and
// errors as a batch. A backend that answers a batch of one with other than
// one ID and no error breaks its contract; that is an error of unknown
// outcome here, not a panic.
func Append(ctx context.Context, w WALImpl, m message.Message) (message.ID, error) {
	ids, err := w.AppendBatch(ctx, []message.Message{m})
	if err != nil {
		return message.ID{}, err
	}
	if len(ids) != 1 {
		return message.ID{}, errors.Errorf("%s: AppendBatch of one message answered %d IDs and no error", w.WALName(), len(ids))
	}
	return ids[0], nil
}
