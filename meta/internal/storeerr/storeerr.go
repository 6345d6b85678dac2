// Package storeerr holds the errors both meta stores (meta/boltstore,
// meta/etcdstore) build the same way: a cause marked with the meta
// sentinels it matches, and the meta.ErrConflict of a write whose expected
// revision did not hold.
package storeerr

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/meta"
)

// Mark returns cause marked as matching marks (meta sentinels), for the
// standard library's errors.Is as well as cockroachdb's (see
// internal/errmark, which every package of the module shares). Its text is
// cause's.
func Mark(cause error, marks ...error) error { return errmark.Mark(cause, marks...) }

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
