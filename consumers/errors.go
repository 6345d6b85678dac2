package consumers

import (
	"fmt"

	"github.com/cockroachdb/errors"
)

// Errors, checked with errors.Is.
var (
	// ErrBackwards is a commit before the consumer's stored checkpoint.
	ErrBackwards = errors.New("consumers: checkpoint moves backwards")
	// ErrTruncated is a commit before the channel's truncation point: the
	// log no longer holds (or is about to drop) what it names.
	ErrTruncated = errors.New("consumers: checkpoint before the truncated log")
	// ErrStaleTerm is a write through an owner whose term is lower than
	// the term the stored checkpoint or floor was written at.
	ErrStaleTerm = errors.New("consumers: stale term")
	// ErrInvalid is bad input: a consumer, vchannel or channel name that
	// is not one, a checkpoint that does not decode or is zero, positions
	// that do not compare.
	ErrInvalid = errors.New("consumers: invalid request")
	// ErrNotFound is a consumer that has no stored checkpoint.
	ErrNotFound = errors.New("consumers: no such consumer")
)

// RefusedError is a commit the store refused: why (Reason, one of
// ErrBackwards, ErrTruncated and ErrStaleTerm, which it matches), the
// consumer's checkpoint as stored (Stored; zero Revision when none) and
// the channel's floor.
type RefusedError struct {
	Channel string
	Scope   Scope
	Reason  error
	Stored  Checkpoint
	Floor   Floor
	detail  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: channel %s, %s: %s", e.Reason, e.Channel, e.Scope, e.detail)
}

// Unwrap returns the reason, so that errors.Is matches it (the standard
// library's and cockroachdb's alike).
func (e *RefusedError) Unwrap() error { return e.Reason }
