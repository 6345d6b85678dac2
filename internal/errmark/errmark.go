// Package errmark marks an error as matching sentinels for every errors.Is:
// the standard library's, testify's ErrorIs and cockroachdb/errors'.
//
// cockroachdb/errors.Mark does the same for cockroachdb/errors.Is only: a
// caller using the standard errors.Is does not see its marks, so an error
// marked client.ErrOutcomeUnknown, checked that way, looks like something
// else. Every package of this module marks errors with Mark below instead
// (internal/errcheck fails on an errors.Mark in non-test code).
package errmark

import (
	"fmt"

	"github.com/cockroachdb/errors"
)

// markedError is an error that errors.Is matches to each of its marks as
// well as to everything in its cause's chain. Its text is its cause's: the
// marks add none.
type markedError struct {
	cause error
	marks []error
}

// Mark returns cause marked as matching marks (sentinels, compared with ==).
// Its text is cause's, and it unwraps to cause, so errors.As and the stack
// traces of cockroachdb/errors see through it. Mark of a nil cause is nil.
func Mark(cause error, marks ...error) error {
	if cause == nil {
		return nil
	}
	return &markedError{cause: cause, marks: marks}
}

func (e *markedError) Error() string { return e.cause.Error() }
func (e *markedError) Unwrap() error { return e.cause }

// Format prints the cause's chain, with its stack traces for %+v, the way
// cockroachdb/errors prints its own errors.
func (e *markedError) Format(s fmt.State, verb rune) { errors.FormatError(e, s, verb) }

// Is reports whether target is one of e's marks; errors.Is goes on to the
// cause by itself.
func (e *markedError) Is(target error) bool {
	for _, m := range e.marks {
		if target == m {
			return true
		}
	}
	return false
}
