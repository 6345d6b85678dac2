package vchannel

import "github.com/cockroachdb/errors"

var (
	// ErrWrongVChannel is a message, or a read filter, that names another
	// vchannel than the view's. Appends refused with it stored nothing
	// (walimpls.NotStored holds).
	ErrWrongVChannel = errors.New("message belongs to another vchannel")
	// ErrInvalidReplay is a Replay that cannot start: no consumers, a
	// vchannel named twice, a checkpoint that is not one, or options that do
	// not validate.
	ErrInvalidReplay = errors.New("invalid replay")
)

// invalidReplayError is an ErrInvalidReplay with its cause kept: it
// matches ErrInvalidReplay and unwraps to the cause.
type invalidReplayError struct {
	what  string
	cause error
}

func (e *invalidReplayError) Error() string        { return e.what + ": " + e.cause.Error() }
func (e *invalidReplayError) Unwrap() error        { return e.cause }
func (e *invalidReplayError) Is(target error) bool { return target == ErrInvalidReplay }
