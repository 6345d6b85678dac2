package etcdstore

// markedError is an error that errors.Is matches to each of its marks as
// well as to everything in its cause's chain. cockroachdb/errors.Mark does
// the same for cockroachdb/errors.Is only; callers using the standard
// library's errors.Is (or testify's ErrorIs) would not see such a mark.
type markedError struct {
	cause error
	marks []error
}

// mark returns cause marked as matching marks (meta sentinels).
func mark(cause error, marks ...error) error {
	return &markedError{cause: cause, marks: marks}
}

func (e *markedError) Error() string { return e.cause.Error() }
func (e *markedError) Unwrap() error { return e.cause }

// Is reports whether target is one of e's marks.
func (e *markedError) Is(target error) bool {
	for _, m := range e.marks {
		if target == m {
			return true
		}
	}
	return false
}
