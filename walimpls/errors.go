package walimpls

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
)

// Sentinel errors. Backends wrap them with context; callers check them with
// errors.Is.
var (
	// ErrFenced means this writer can never append again: a higher term owns
	// the channel. Opening with a term below the channel's highest is
	// ErrFenced too.
	ErrFenced = errors.New("wal fenced by a higher term")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("wal closed")
	// ErrPositionGone means a read start position has been truncated.
	ErrPositionGone = errors.New("read position truncated")
	// ErrTooLarge means a message exceeds the backend's size limit.
	ErrTooLarge = errors.New("message too large")
	// ErrReadOnly is returned by Append and Truncate of a read-only WAL.
	ErrReadOnly = errors.New("wal is read-only")
	// ErrInvalidChannel means an OpenOption's channel is not valid.
	ErrInvalidChannel = errors.New("invalid channel")
	// ErrInvalidPosition means an ID cannot be used as a position here: an ID
	// of another backend, the zero ID, or a truncation point beyond the end.
	ErrInvalidPosition = errors.New("invalid position")
	// ErrUnknownBackend is returned by Registry.Lookup for a name nobody
	// registered.
	ErrUnknownBackend = errors.New("unknown wal backend")
	// ErrUnrecoverable means the backend can no longer serve this WAL until
	// it is reopened: a failed fsync, a corrupt log. Retrying cannot help.
	ErrUnrecoverable = errors.New("wal backend failed unrecoverably")
	// ErrInvalidConfig means a backend's configuration does not validate.
	ErrInvalidConfig = errors.New("invalid wal backend config")
)

// FencedError details why a writer is fenced. It matches ErrFenced.
type FencedError struct {
	Channel string
	// Term is the term of the fenced writer (or of the refused open).
	Term int64
	// CurrentTerm is the term that owns the channel, when known (0 if not).
	CurrentTerm int64
}

func (e *FencedError) Error() string {
	if e.CurrentTerm > 0 {
		return fmt.Sprintf("channel %q: term %d fenced by term %d", e.Channel, e.Term, e.CurrentTerm)
	}
	return fmt.Sprintf("channel %q: term %d fenced", e.Channel, e.Term)
}

// Is makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// TooLargeError details a message above the backend's limit. It matches
// ErrTooLarge.
type TooLargeError struct {
	Size  int
	Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes exceeds the backend limit of %d bytes", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// IsRetryable reports whether an append that failed with err may succeed if
// tried again: everything except fencing, size, read-only, invalid input,
// closed WALs and context ends.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	for _, final := range []error{ErrFenced, ErrTooLarge, ErrReadOnly, ErrClosed, ErrUnrecoverable,
		ErrInvalidChannel, ErrInvalidPosition, ErrInvalidConfig, ErrPositionGone} {
		if errors.Is(err, final) {
			return false
		}
	}
	return !errors.IsAny(err, context.Canceled, context.DeadlineExceeded)
}
