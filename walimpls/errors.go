package walimpls

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/internal/errmark"
)

// Sentinel errors. Backends wrap them with context; callers check them with
// errors.Is.
var (
	// ErrFenced means this writer can never append or truncate again: a
	// higher term, or a later open of the same term, owns the channel, or
	// the channel was deleted.
	// Opening with a term below the channel's highest is ErrFenced too.
	ErrFenced = errors.New("wal fenced")
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
	// ErrNoChannel is a ReadOnly open of a channel that does not exist
	// (never opened ReadWrite, or deleted): a reader creates nothing, so
	// that it never brings a deleted channel back.
	ErrNoChannel = errors.New("no such channel")
)

// FencedError details why a writer is fenced. It matches ErrFenced.
type FencedError struct {
	Channel string
	// Term is the term of the fenced writer (or of the refused open).
	Term int64
	// CurrentTerm is the term that owns the channel, when known (0 if not).
	// It equals Term when a later open of the same term took over.
	CurrentTerm int64
	// Deleted is true when the writer was fenced by Opener.Delete of its
	// channel.
	Deleted bool
}

func (e *FencedError) Error() string {
	switch {
	case e.Deleted:
		return fmt.Sprintf("channel %q: term %d fenced: the channel was deleted", e.Channel, e.Term)
	case e.CurrentTerm == e.Term:
		return fmt.Sprintf("channel %q: term %d fenced by a later open of the same term", e.Channel, e.Term)
	case e.CurrentTerm > 0:
		return fmt.Sprintf("channel %q: term %d fenced by term %d", e.Channel, e.Term, e.CurrentTerm)
	}
	return fmt.Sprintf("channel %q: term %d fenced", e.Channel, e.Term)
}

// Is makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// TooLargeError details a message above a size limit. It matches
// ErrTooLarge.
type TooLargeError struct {
	Size  int
	Limit int
	// What names the limit when it is not the backend's own (the
	// adaptor's MaxMessageBytes, the room properties leave in a part).
	What string
}

func (e *TooLargeError) Error() string {
	what := e.What
	if what == "" {
		what = "the backend limit"
	}
	return fmt.Sprintf("message of %d bytes exceeds %s of %d bytes", e.Size, what, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Outcome marks. errOutcomeUnknown wins over errNotStored: a layer that
// retried an append after an attempt of unknown outcome cannot promise that
// nothing was stored, whatever its last attempt said.
var (
	errNotStored      = errors.New("not stored")
	errOutcomeUnknown = errors.New("outcome unknown")
)

// MarkNotStored marks err, the error of a failed Append, as certain to have
// stored nothing: the message was refused before it was handed to storage.
// Backends and the layers above mark only what they know; an unmarked error
// leaves the outcome unknown.
func MarkNotStored(err error) error {
	if err == nil {
		return nil
	}
	return errmark.Mark(err, errNotStored)
}

// MarkOutcomeUnknown marks err as the error of an Append whose outcome is
// unknown, overriding any NotStored mark or sentinel in its chain: for a
// retry whose earlier attempt may have stored the message.
func MarkOutcomeUnknown(err error) error {
	if err == nil {
		return nil
	}
	return errmark.Mark(err, errOutcomeUnknown)
}

// NotStored reports whether the Append that failed with err certainly stored
// nothing. It is false for nil and for every error whose outcome is unknown
// (the message may be stored and read later): a cancelled context during the
// call, a connection lost, an ErrFenced or ErrClosed that raced a write in
// flight. Input errors (ErrTooLarge, ErrReadOnly, ErrInvalidChannel,
// ErrInvalidPosition, ErrInvalidConfig) are never stored.
func NotStored(err error) bool {
	if err == nil || errors.Is(err, errOutcomeUnknown) {
		return false
	}
	return errors.IsAny(err, errNotStored, ErrTooLarge, ErrReadOnly, ErrInvalidChannel, ErrInvalidPosition, ErrInvalidConfig)
}

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
