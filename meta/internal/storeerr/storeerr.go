// Package storeerr holds the errors both meta stores (meta/boltstore,
// meta/etcdstore) build the same way: a cause marked with the meta
// sentinels it matches, and the meta.ErrConflict of a write whose expected
// revision did not hold.
package storeerr

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/meta"
)

// markedError is an error that errors.Is matches to each of its marks as
// well as to everything in its cause's chain. cockroachdb/errors.Mark does
// the same for cockroachdb/errors.Is only; callers using the standard
// library's errors.Is (or testify's ErrorIs) would not see such a mark.
type markedError struct {
	cause error
	marks []error
}

// Mark returns cause marked as matching marks (meta sentinels). Its text
// is cause's.
func Mark(cause error, marks ...error) error {
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

// Conflict is the meta.ErrConflict of the store's (such as "boltstore")
// write op to key, which expected revision expect and found actual.
func Conflict(store, op, key string, expect, actual int64) error {
	return errors.Wrapf(meta.ErrConflict, "%s: %s %q: expected %s, found %s", store, op, key, revString(expect), revString(actual))
}

// revString names an expected or actual revision in errors.
func revString(rev int64) string {
	switch rev {
	case meta.Absent:
		return "absent"
	case meta.Any:
		return "any"
	}
	return fmt.Sprintf("revision %d", rev)
}
