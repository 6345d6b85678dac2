// Package errmarktest checks errors the way this module's callers do: with
// the standard library's errors.Is and with cockroachdb/errors' Is, both.
// A test that checks one only would pass on an error the other cannot see
// (cockroachdb's errors.Mark is invisible to the standard errors.Is).
package errmarktest

import (
	stderrors "errors"
	"testing"

	crerrors "github.com/cockroachdb/errors"
)

// Is fails tb unless both errors.Is report that err matches every target.
func Is(tb testing.TB, err error, targets ...error) {
	tb.Helper()
	for _, target := range targets {
		if !stderrors.Is(err, target) {
			tb.Fatalf("the standard errors.Is does not see %q in: %v", target, err)
		}
		if !crerrors.Is(err, target) {
			tb.Fatalf("cockroachdb's errors.Is does not see %q in: %v", target, err)
		}
	}
}

// IsNot fails tb if either errors.Is reports that err matches a target.
func IsNot(tb testing.TB, err error, targets ...error) {
	tb.Helper()
	for _, target := range targets {
		if stderrors.Is(err, target) {
			tb.Fatalf("the standard errors.Is sees %q in: %v", target, err)
		}
		if crerrors.Is(err, target) {
			tb.Fatalf("cockroachdb's errors.Is sees %q in: %v", target, err)
		}
	}
}
