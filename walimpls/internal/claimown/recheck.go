package claimown

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Recheck is what a writer does about a failed send once it has checked
// its claim again (see AfterFailedSend).
type Recheck int

const (
	// StillWins: the writer's claim still wins, and the send failed for a
	// reason of its own. When the resource was taken from the writer (a
	// fenced producer), a concurrent open of a lower term took it before
	// it lost its claim check, and gives up: the writer drops the resource
	// and acquires a new one for the next send, and the failed requests
	// get a retryable error.
	StillWins Recheck = iota
	// Beaten: another claim wins, or the channel was deleted: the check's
	// error is the writer's fence for good.
	Beaten
	// CheckFailed: the claims could not be read, so whether the writer's
	// claim still wins is unknown. The failed requests get the send's
	// error together with the check's; the writer's state is unchanged.
	CheckFailed
)

// AfterFailedSend decides about a send that failed with cause, given
// check, the result of checking the writer's claim again after it (nil:
// the claim still wins; an error matching walimpls.ErrFenced: a claim
// beats it). It returns the decision and the error the failed requests
// are answered with, which the backend wraps with its context: cause when
// the claim still wins, check when it is beaten, and when the check
// failed an error that reads as cause followed by the check's error and
// that errors.Is and errors.As match to either (the send's error and,
// say, the context that ended the check).
//
// Pure: the backend checks the claim (I/O) and acts on the decision.
func AfterFailedSend(cause, check error) (Recheck, error) {
	switch {
	case check == nil:
		return StillWins, cause
	case errors.Is(check, walimpls.ErrFenced):
		return Beaten, check
	}
	// fmt.Errorf, not errors.Newf: cockroachdb/errors v1.13 formats a
	// second %w as %!w and unwraps neither.
	return CheckFailed, fmt.Errorf("%w (claim check: %w)", cause, check)
}
