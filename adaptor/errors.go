package adaptor

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

var (
	// ErrInvalidOptions is returned by Open for options that do not validate.
	ErrInvalidOptions = errors.New("invalid adaptor options")
	// ErrScannerBufferFull ends a scanner whose reorder buffer exceeded its
	// budget: the writer's watermarks did not keep up (or a writer that is not
	// streamwal wrote to the channel). Nothing is dropped silently: the
	// scanner ends, and may be restarted from its last delivered position.
	ErrScannerBufferFull = errors.New("scanner reorder buffer full")
)

// closedError is an append that the WAL's Close ended: it matches
// walimpls.ErrClosed, and unwraps to its cause, whose outcome mark (see
// walimpls.NotStored) it keeps.
type closedError struct{ cause error }

func (e *closedError) Error() string        { return "wal closed: " + e.cause.Error() }
func (e *closedError) Unwrap() error        { return e.cause }
func (e *closedError) Is(target error) bool { return target == walimpls.ErrClosed }
