package walimpls

import (
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// ReadOption configures a scanner.
type ReadOption struct {
	// Name identifies the scanner in logs and metrics.
	Name string
	// DeliverPolicy says where to start; the zero value is cursor.All. A
	// backend reads the log policies (see cursor.Policy.Log): All, Latest,
	// StartFrom, StartAfter and Tail.
	DeliverPolicy cursor.Policy
	// ReadAheadBytes bounds how many bytes the backend buffers ahead of the
	// consumer; 0 takes the backend's default.
	ReadAheadBytes int
}

// Scanner delivers messages of one WAL in order: a backend's in ID order,
// the adaptor's (adaptor.WAL.Read) in strictly increasing timetick order.
type Scanner interface {
	// Chan delivers messages; it is closed when the scanner ends.
	Chan() <-chan message.Immutable
	// Done is closed when the scanner has ended and released everything.
	Done() <-chan struct{}
	// Error returns why the scanner ended: nil after Close (and while it
	// runs), the cause otherwise (for example ErrPositionGone). Valid
	// after Done is closed.
	Error() error
	// Close stops the scanner and waits until it has released everything.
	// It is idempotent and returns nil.
	Close() error
}

// BatchScanner delivers what a Scanner does, several messages at a time
// (BatchReader, adaptor.WAL.ReadBatches).
type BatchScanner interface {
	// Batches delivers non-empty slices of messages, in the order Chan
	// would deliver them, within and across slices, without gaps; it is
	// closed when the scanner ends. A slice belongs to the receiver once
	// received: the scanner neither reads nor changes it again, so the
	// receiver may keep, reorder or clear it.
	Batches() <-chan []message.Immutable
	// Done, Error and Close are those of Scanner.
	Done() <-chan struct{}
	Error() error
	Close() error
}
