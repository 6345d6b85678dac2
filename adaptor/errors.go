package adaptor

import "github.com/cockroachdb/errors"

var (
	// ErrInvalidOptions is returned by Open for options that do not validate.
	ErrInvalidOptions = errors.New("invalid adaptor options")
	// ErrScannerBufferFull ends a scanner whose reorder buffer exceeded its
	// budget: the writer's watermarks did not keep up (or a writer that is not
	// streamwal wrote to the channel). Nothing is dropped silently: the
	// scanner ends, and may be restarted from its last delivered position.
	ErrScannerBufferFull = errors.New("scanner reorder buffer full")
)
